"""The ops and their semantics (PyTorch's), the user signature a kernel of each has, and the
properties a kernel of them is judged on."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

__all__ = ["OpSpec", "OPS", "SOFTMAX_OPS", "get_op", "FLOAT32_EPS", "PROPERTIES", "IGNORABLE", "check_ignore",
           "OPTIONAL", "JUDGED_BY_DEFAULT", "INFORMATIVE", "check_opt_in"]

#: ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the compute type: float32's.
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 1.1920929e-07


@dataclass(frozen=True)
class OpSpec:
    """What an op computes (PyTorch semantics) and how a user function for it is called."""

    name: str
    params: tuple[str, ...]
    default_eps: float | None
    formula: str

    @property
    def signature(self) -> str:
        return f"fn({', '.join(self.params)})"

    @property
    def has_gamma(self) -> bool:
        return "gamma" in self.params

    @property
    def has_beta(self) -> bool:
        return "beta" in self.params

    @property
    def has_mask(self) -> bool:
        return "mask" in self.params

    @property
    def is_softmax(self) -> bool:
        """Judged as a softmax (row sums, bounds, argmax, ratios)."""
        return self.name in SOFTMAX_OPS


OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec("softmax", ("x",), None, "exp(x - max x) / sum exp(x - max x), over the last axis"),
        OpSpec(
            "layernorm",
            ("x", "gamma", "beta", "eps"),
            1e-5,
            "(x - mean) / sqrt(var + eps) * gamma + beta, population variance",
        ),
        OpSpec("rmsnorm", ("x", "gamma", "eps"), FLOAT32_EPS, "x / sqrt(mean(x^2) + eps) * gamma"),
        # PyTorch's scaled_dot_product_attention convention: a True mask entry takes part.
        OpSpec("masked_softmax", ("x", "mask", "scale"), None,
               "softmax(scale * x) over the entries where mask is True, 0 elsewhere, over the last axis"),
    )
}

#: The ops judged as a softmax.
SOFTMAX_OPS = frozenset({"softmax", "masked_softmax"})


def get_op(name: str) -> OpSpec:
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise ValueError(f"op must be one of {', '.join(OPS)} but was {name!r}") from None


#: Every property the judge can fail, most severe first: the order a report lists them in, and the
#: order that picks a case's headline.
PROPERTIES: dict[str, str] = {
    "contract": "the call returns an array of the input's type, shape and device, leaves its "
                "inputs alone, and returns in time",
    "finite": "finite output wherever the exact result is finite",
    "nan_propagation": "a row with NaN (or an infinity) gives NaN or the IEEE limit, nothing else",
    "masked_rows": "a fully masked softmax row gives all NaN or all zeros",
    "range_safety": "right for any finite float32 row (rows outside the accuracy domain, family huge); "
                    "softmax: judged by default; norms: opt-in, else shown as information",
    "accuracy": "within the condition-aware tolerance of the exact result",
    "ratios": "softmax: y_i / y_j = exp(x_i - x_j) within a bound that does not grow with the row",
    "exact_constant": "opt-in: an exactly constant row gives beta (layer norm), a zero row 0 (RMS norm)",
    "sum_to_one": "softmax rows sum to 1 within the bound",
    "bounds": "softmax outputs lie in [0, 1]",
    "argmax": "softmax keeps the argmax",
    "determinism": "two calls on the same input are bitwise equal",
    "batch_invariance": "a row's output is bitwise the same alone, in any batch, at any position",
    "shift_invariance": "adding an exact constant to a row changes nothing (softmax, layer norm)",
    "scale_invariance": "scaling x by 2^k and eps by 4^k changes nothing (norms)",
}



#: Properties judged only for a kernel that asks for them (``Target.opt_in``): a contract some
#: users hold and others do not. ``exact_constant``: docs/tolerances.md, "Exactly constant rows".
#: ``range_safety``: a norm's squares overflow float32 past |x| of about 1.8e19 unless it scales
#: each row first, which PyTorch's, Liger's, QuACK's and the textbook norms do not.
OPTIONAL = frozenset({"exact_constant", "range_safety"})

#: Optional properties an op judges whether asked or not: softmax kernels subtract the row max, so
#: a row of any finite magnitude (family huge) is ordinary for them; a masked softmax can subtract
#: it before it scales, so ``scale * x`` past float32's range is ordinary for it too.
JUDGED_BY_DEFAULT: dict[str, frozenset[str]] = {"softmax": frozenset({"range_safety"}),
                                                "masked_softmax": frozenset({"range_safety"})}

#: Optional properties hunted all the same when not judged, their findings shown as information
#: ("not range-safe"), never as failures: whether a kernel is range-safe is worth knowing either way.
INFORMATIVE = frozenset({"range_safety"})

#: What a kernel may declare it does not promise: everything but the calling contract, finite
#: outputs for finite results, and ``exact_constant`` (not judged unless asked for). Range safety
#: is both: a softmax may decline it, a norm may ask for it.
IGNORABLE = frozenset(PROPERTIES) - {"contract", "finite", "exact_constant"}


def _property_names(value: object, *, allowed: frozenset[str], what: str, wrong: str) -> frozenset[str]:
    """``value`` (property names, or "a,b" text) as a frozenset, every name in ``allowed``; else a
    ValueError naming ``what``, the bad names, and the choices."""
    if isinstance(value, str):
        value = [p.strip() for p in value.split(",") if p.strip()]
    try:
        names = frozenset(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{what} must be a collection of property names but was {value!r}") from None
    unknown = sorted(n for n in names if n not in allowed)
    if unknown:
        # A name that is no property at all is a typo: say so, and suggest the nearest one.
        typos = [n for n in unknown if n not in PROPERTIES]
        near = [m for n in typos for m in difflib.get_close_matches(n, sorted(allowed), n=1)]
        why = "is not a property" if typos and len(unknown) == 1 else (
            "are not properties" if len(typos) == len(unknown) else wrong)
        hint = f" (did you mean {', '.join(map(repr, near))}?)" if near else ""
        raise ValueError(f"{what}: {', '.join(map(repr, unknown))} {why}{hint}; choose from "
                         f"{', '.join(p for p in PROPERTIES if p in allowed)}")
    return names


def check_ignore(ignore: object) -> frozenset[str]:
    """``ignore`` (names of properties) validated: a frozenset, or ValueError naming the bad ones."""
    return _property_names(ignore, allowed=IGNORABLE, what="ignore", wrong="cannot be ignored")


def check_opt_in(opt_in: object) -> frozenset[str]:
    """``opt_in`` (names of optional properties) validated: a frozenset, or ValueError naming the
    bad ones."""
    return _property_names(opt_in, allowed=OPTIONAL, what="opt_in", wrong="is not an optional property")
