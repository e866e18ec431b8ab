"""A kernel's declaration: what it computes and promises, as one frozen value.

Everything a hunt needs to know about a kernel before calling it (its op, its arrays, the widths
it takes, the properties it does and does not promise, the shape of its reduction, its mask
convention, how long one call may take) travels between the layers as a :class:`Declaration`,
built once from keyword arguments (:meth:`Declaration.declare`, which the API and the CLI call),
from a registry entry (:meth:`Declaration.from_spec`) or from a report (:meth:`Declaration.from_json`),
and written back as a report's JSON (:meth:`Declaration.to_json`) or as the flags of the replay
command a report prints (:meth:`Declaration.to_flags`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from normprops.case import ShapeConstraints
from normprops.errormodel import FOREIGN_ERROR_MODEL, VARIANCES, ErrorModel
from normprops.errors import UsageError
from normprops.flags import flag, spelled
from normprops.frameworks import get_adapter
from normprops.kernelspec import KernelSpec
from normprops.masking import MASK_KINDS, mask_fill_value
from normprops.ops import (
    APPLICABLE,
    OPS,
    PROPERTIES,
    ROW_REDUCTIONS,
    USER_ROW_REDUCTION,
    check_ignore,
    check_opt_in,
    get_op,
)

__all__ = ["Declaration", "KEYWORDS", "VARIANCE_OPS", "REPLAY_CALL_TIMEOUT"]

#: The keywords :meth:`Declaration.declare` takes besides ``op``, with their defaults: a user's
#: kernel declared with none of them is a float32 numpy function of T = 32 sequential threads.
KEYWORDS: dict[str, Any] = {
    "dtype": "float32", "framework": "numpy", "device": None, "constraints": ShapeConstraints(),
    "ignore": (), "opt_in": (), "threads": None, "reduction": "sequential", "row_reduction": None,
    "arithmetic": "float32", "ftz": False, "variance": "two_pass", "mask": "bool",
    "mask_fill": None, "call_timeout": None,
}

#: The ops that compute a variance, which ``variance=`` (--variance) describes.
VARIANCE_OPS = tuple(name for name, spec in OPS.items() if spec.has_variance)

#: ``normprops replay``'s own call timeout, left out of a replay command that would repeat it.
REPLAY_CALL_TIMEOUT = 60.0


@dataclass(frozen=True)
class Declaration:
    """What a kernel declares. Built by :meth:`declare` (a user's declaration, every field checked
    and the error naming the argument), :meth:`from_spec` (a registry entry's, trusted) or
    :meth:`from_json`; changed with :func:`dataclasses.replace`."""

    op: str
    dtype: str = "float32"  # storage type: the hunt's cases hold values exact in it
    framework: str = "numpy"  # the arrays it takes (normprops.frameworks)
    device: str | None = None  # where they live (None: the framework's default)
    constraints: ShapeConstraints = ShapeConstraints()
    ignore: frozenset[str] = frozenset()  # properties it does not promise: never judged
    opt_in: frozenset[str] = frozenset()  # optional properties judged too (ops.OPTIONAL)
    # The shape of its reduction (threads, sequential or tree, the rows' sum of a gradient), its
    # arithmetic, flushing and variance: the depth of its bounds.
    error_model: ErrorModel = FOREIGN_ERROR_MODEL
    # Masked softmax: None, the mask is handed over as booleans; else as an additive float mask of
    # 0 and this fill (its value in the storage type).
    mask_fill: float | None = None
    call_timeout: float | None = None  # a call that does not return in time stops the hunt
    # An op of named arrays (attention): its own declaration (normprops.ops.NamedArrays), None for
    # its default (and for the row ops, which have none).
    op_declaration: Any = None

    @property
    def mask(self) -> str:
        return "bool" if self.mask_fill is None else "additive"

    @property
    def row_reduction(self) -> str:
        return self.error_model.row_reduction

    @property
    def op_promises(self) -> Any:
        """The op's own declaration (its default where none was given); None for a row op."""
        named = get_op(self.op).named
        if named is None:
            return None
        return named.default_declaration if self.op_declaration is None else self.op_declaration

    @classmethod
    def declare(cls, *, op: str, **keywords: Any) -> Declaration:
        """A user's declaration from the keywords of :data:`KEYWORDS` (those left out take their
        defaults), every one checked: :class:`~normprops.errors.UsageError` naming the argument,
        its value and the fix; TypeError for a keyword it does not take."""
        try:
            spec = get_op(op)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        own_names = () if spec.named is None else spec.named.keywords
        own = {key: keywords.pop(key) for key in list(keywords) if key in own_names}
        unknown = sorted(set(keywords) - set(KEYWORDS))
        for key in unknown:
            owner = next((o.name for o in OPS.values() if o.named and key in o.named.keywords), None)
            if owner is not None and keywords[key] is not None:
                raise UsageError(f"{spelled(key)} applies to {flag('op')} {owner} only; op {op} "
                                 f"does not take it: drop it")
        unknown = [key for key in unknown if keywords[key] is not None or not any(
            o.named and key in o.named.keywords for o in OPS.values())]
        if unknown:
            raise TypeError(f"declare() got unexpected keyword arguments {', '.join(unknown)}; it "
                            f"takes op, {', '.join(KEYWORDS)}")
        keywords = {key: value for key, value in keywords.items() if key in KEYWORDS}
        k = {**KEYWORDS, **keywords}
        threads, timeout, row_reduction = k["threads"], k["call_timeout"], k["row_reduction"]
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise UsageError(f"threads must be a positive integer but was {threads!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise UsageError(f"call timeout ({flag('call_timeout')}, call_timeout=) must be a positive "
                             f"number of seconds but was {timeout!r}")
        if row_reduction is not None and row_reduction not in ROW_REDUCTIONS:
            raise UsageError(f"row_reduction must be one of {', '.join(ROW_REDUCTIONS)} but was "
                             f"{row_reduction!r}")
        if spec.forward is None:  # the row sums below exist in the gradient ops only
            if row_reduction is not None:
                raise UsageError(f"{spelled('row_reduction')} applies to the gradient ops only; op "
                                 f"{op} sums no rows into dgamma or dbeta: drop it")
            row_reduction = "blocks"  # unread: a forward target sums no rows
        elif row_reduction is None:
            row_reduction = USER_ROW_REDUCTION
        get_adapter(k["framework"], dtype=k["dtype"], device=k["device"])  # UsageError naming it
        fill = _mask_fill(op, k["mask"], k["mask_fill"], k["dtype"])
        _check_variance(k["variance"], op)
        try:
            model = replace(FOREIGN_ERROR_MODEL, ftz=k["ftz"], reduction=k["reduction"],
                            arithmetic=k["arithmetic"], variance=k["variance"],
                            row_reduction=row_reduction,
                            **({} if threads is None else {"threads": threads}))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        _check_arithmetic(model.arithmetic, k["dtype"])
        ignored, chosen = _check_promises(k["ignore"], k["opt_in"], op)
        promises = None
        if spec.named is not None:
            # A plain loop's depth unless the kernel declares its threads.
            depth = model if threads is not None else replace(model, threads=1)
            promises = spec.named.declare(depth, dtype=k["dtype"], **own)
        return cls(op=op, dtype=k["dtype"], framework=k["framework"], device=k["device"],
                   constraints=k["constraints"], ignore=ignored, opt_in=chosen, error_model=model,
                   mask_fill=fill, call_timeout=timeout, op_declaration=promises)

    @classmethod
    def from_spec(cls, spec: KernelSpec) -> Declaration:
        """A registry entry's declaration. Range safety is judged wherever a registered kernel is
        hunted: its claims say, family by family, what it promises (cuda-prod's norms claim huge),
        and an unclaimed cell is information."""
        return cls(op=spec.op, dtype=spec.dtype, framework=spec.framework, device=spec.device,
                   constraints=spec.constraints, ignore=spec.exempt,
                   opt_in=frozenset({"range_safety"}) - spec.exempt, error_model=spec.error_model,
                   op_declaration=spec.op_declaration)

    def to_json(self) -> dict[str, Any]:
        """What a report says the kernel declared (the keys of its ``targets`` entries that
        :meth:`from_json` reads back); the fields an op does not have are left out."""
        model, spec = self.error_model, get_op(self.op)
        return {
            "op": self.op, "framework": self.framework, "device": self.device, "dtype": self.dtype,
            "constraints": self.constraints.to_json(),
            "ignore": sorted(self.ignore), "opt_in": sorted(self.opt_in),
            "ftz": model.ftz, "threads": model.threads, "call_timeout": self.call_timeout,
            "reduction": model.reduction, "arithmetic": model.arithmetic,
            **({"row_reduction": model.row_reduction} if spec.forward is not None else {}),
            **({"variance": model.variance} if spec.has_variance else {}),
            **({"mask": self.mask, "mask_fill": _fill_json(self.mask_fill)} if spec.has_mask else {}),
            **({"op_declaration": self.op_promises.to_json()} if spec.named is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Declaration:
        """The declaration a report's ``targets`` entry (:meth:`to_json`) records; a key an older
        report lacks takes its default. ValueError for a record that holds no valid one."""
        op = doc["op"]
        spec = get_op(op)
        widths = doc.get("constraints") or {}
        fill = doc.get("mask_fill") if doc.get("mask") == "additive" else None
        model = replace(FOREIGN_ERROR_MODEL, ftz=bool(doc.get("ftz", False)),
                        threads=doc.get("threads") or FOREIGN_ERROR_MODEL.threads,
                        reduction=doc.get("reduction") or "sequential",
                        arithmetic=doc.get("arithmetic") or "float32",
                        variance=doc.get("variance") or "two_pass",
                        row_reduction=doc.get("row_reduction")
                        or (USER_ROW_REDUCTION if spec.forward is not None else "blocks"))
        return cls(op=op, dtype=doc.get("dtype") or "float32",
                   framework=doc.get("framework") or "numpy", device=doc.get("device"),
                   constraints=ShapeConstraints(cols_multiple_of=widths.get("cols_multiple_of", 1),
                                                min_cols=widths.get("min_cols", 1),
                                                max_cols=widths.get("max_cols")),
                   ignore=frozenset(doc.get("ignore", ())), opt_in=frozenset(doc.get("opt_in", ())),
                   error_model=model, mask_fill=None if fill is None else float(fill),
                   call_timeout=doc.get("call_timeout"),
                   op_declaration=None if spec.named is None else spec.named.from_json(
                       doc.get("op_declaration"), model))

    def to_flags(self, *, policy: str = "default") -> str:
        """The flags that make ``normprops replay`` judge this kernel's fixtures as its hunt did:
        every field that differs from the CLI's default, and the hunt's tolerance ``policy``."""
        model, widths = self.error_model, self.constraints
        arrays = self.framework != "numpy"
        pairs: list[tuple[str, object]] = [
            ("framework", self.framework if arrays else None),
            ("device", self.device if arrays else None),
            ("dtype", self.dtype if self.dtype != "float32" else None),
            ("cols_multiple_of", widths.cols_multiple_of if widths.cols_multiple_of > 1 else None),
            ("min_cols", widths.min_cols if widths.min_cols > 1 else None),
            ("max_cols", widths.max_cols),
            ("ignore", ",".join(sorted(self.ignore)) or None),
            ("opt_in", ",".join(sorted(self.opt_in)) or None),
            ("threads", model.threads if model.threads != 32 else None),
            ("reduction", model.reduction if model.reduction != "sequential" else None),
            ("arithmetic", model.arithmetic if model.arithmetic != "float32" else None),
            ("row_reduction", model.row_reduction if get_op(self.op).forward is not None
             and model.row_reduction != USER_ROW_REDUCTION else None),
            ("variance", model.variance if model.variance != "two_pass" else None),
        ]
        if self.mask_fill is not None:
            pairs += [("mask", "additive"), ("mask_fill", repr(float(self.mask_fill)))]
        if self.op_declaration is not None:
            pairs += self.op_declaration.flag_pairs()
        if self.call_timeout not in (None, REPLAY_CALL_TIMEOUT):
            pairs.append(("call_timeout", repr(float(self.call_timeout))))  # type: ignore[arg-type]
        pairs.append(("policy", policy if policy != "default" else None))
        line = "".join(f" {flag(name)} {value}" for name, value in pairs if value is not None)
        return line + (f" {flag('ftz')}" if model.ftz else "")


def _fill_json(fill: float | None) -> float | str | None:
    return fill if fill is None or math.isfinite(fill) else repr(fill)


def _check_promises(ignore: object, opt_in: object, op: str) -> tuple[frozenset[str], frozenset[str]]:
    """``ignore`` and ``opt_in`` validated, disjoint, and each optional property one that ``op``
    has: UsageError otherwise."""
    try:
        ignored, asked = check_ignore(ignore), check_opt_in(opt_in)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    both = sorted(ignored & asked)
    if both:
        raise UsageError(f"{', '.join(both)} both ignored and checked ({flag('ignore')} and "
                         f"{flag('opt_in')}, ignore= and opt_in=): a kernel promises a property or "
                         f"does not; keep one")
    spec = get_op(op)
    if "row_order" in asked and spec.forward is None:
        raise UsageError(f"{spelled('opt_in', 'row_order')} applies to the gradient ops only; op "
                         f"{op} has no dgamma or dbeta")
    if "exact_constant" in asked and not (spec.forward is None and spec.has_gamma):
        raise UsageError(f"{spelled('opt_in', 'exact_constant')} applies to layernorm and rmsnorm "
                         f"only; op {op} has no row whose output is exactly known")
    for names, field in ((ignored, "ignore"), (asked, "opt_in")):
        foreign = sorted(names - APPLICABLE[op])
        if foreign:  # a promise about a property the op never has is a mistake, not a no-op
            raise UsageError(f"{spelled(field)} {','.join(foreign)}: op {op} is never judged on "
                             f"{'it' if len(foreign) == 1 else 'them'}; its properties: "
                             f"{', '.join(p for p in PROPERTIES if p in APPLICABLE[op])}")
    return ignored, asked


def _check_arithmetic(arithmetic: str, dtype: str) -> None:
    """bfloat16 arithmetic needs 16-bit storage: on float32 storage it would judge float32 outputs
    with bounds 65536 times wider, and pass what float32 arithmetic fails."""
    if arithmetic == "bfloat16" and dtype == "float32":
        raise UsageError(f"{spelled('arithmetic', 'bfloat16', quoted=True)} declares a kernel whose "
                         f"every operation rounds to bfloat16, which its float32 storage does not; "
                         f"for a kernel that stores bfloat16, add "
                         f"{spelled('dtype', 'bfloat16', quoted=True)}")


def _check_variance(variance: str, op: str) -> None:
    """A variance is layer norm's: declared for another op it would mean nothing."""
    if variance not in VARIANCES:
        raise UsageError(f"{spelled('variance')} must be one of {', '.join(VARIANCES)} but was "
                         f"{variance!r}: two_pass for a variance around the mean (or Welford's), "
                         f"one_pass for E[x^2] - E[x]^2")
    if variance != "two_pass" and not get_op(op).has_variance:
        raise UsageError(f"{spelled('variance')} applies to {flag('op')} "
                         f"{' and '.join(VARIANCE_OPS)} only; op {op} computes no variance")


def _mask_fill(op: str, mask: str, mask_fill: float | str | None, dtype: str) -> float | None:
    """The additive mask's fill as the storage type holds it, None for a boolean mask; UsageError
    for a mask convention given to an op without a mask, or a bad fill."""
    if mask not in MASK_KINDS:
        raise UsageError(f"{spelled('mask')} must be one of {', '.join(MASK_KINDS)} but was {mask!r}")
    if not get_op(op).has_mask:
        if mask != "bool" or mask_fill is not None:
            given = spelled("mask_fill") if mask == "bool" else spelled("mask")
            raise UsageError(f"{given} applies to {flag('op')} masked_softmax only; op {op} takes "
                             f"no mask")
        return None
    if mask == "bool":
        if mask_fill is not None:
            raise UsageError(f"{spelled('mask_fill', str(mask_fill))} needs "
                             f"{spelled('mask', 'additive', quoted=True)}: a "
                             f"boolean mask has no fill")
        return None
    try:
        return mask_fill_value("-inf" if mask_fill is None else mask_fill, dtype=dtype)
    except ValueError as exc:
        raise UsageError(f"{spelled('mask_fill')}: {exc}") from None
