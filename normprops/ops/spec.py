"""The generic op type every op module builds (:class:`OpSpec`), the registry of ops, and the
properties a kernel of them is judged on. :mod:`normprops.ops` re-exports all of it and registers
the built-in ops."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from normprops.case import SIGNATURES
from normprops.ops.common import ROW_REDUCTIONS

__all__ = ["OpSpec", "NamedArrays", "NamedExact", "Transform",
           "OPS", "get_op", "register", "FLOAT32_EPS", "PROPERTIES",
           "IGNORABLE", "check_ignore", "OPTIONAL", "INFORMATIVE", "check_opt_in", "EVERY_OP",
           "BACKWARD_FAMILIES", "is_backward", "ROW_REDUCTIONS", "USER_ROW_REDUCTION", "APPLICABLE"]

#: ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the compute type: float32's.
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 1.1920929e-07


@dataclass(frozen=True)
class Transform:
    """A copy of a case the op's output must agree with (within both bounds): ``apply`` returns the
    copy and its description, or None where the case admits no exact copy. A named-arrays op's copy
    has outputs of the case's shapes, element for element the same exact values or, where the copy
    rounds its inputs, exact values of its own (the difference is allowed for)."""

    property: str
    apply: Callable[[Any], tuple[Any, str] | None]  # (case) -> (copy, what) or None
    # A named-arrays op's copy whose exact outputs and bounds are the case's (keys permuted): they
    # are not computed again.
    same_exact: bool = False


@dataclass(frozen=True)
class NamedExact:
    """A named-arrays op's exact outputs, their bounds and the elements judged by accuracy (the
    others, such as an empty query row's, are the op's own checks), each by output name."""

    exact: dict[str, np.ndarray]
    tol: dict[str, np.ndarray]
    judged: dict[str, np.ndarray]
    reference: Any = None  # the op's own reference, for its checks


@dataclass(frozen=True)
class NamedArrays:
    """An op whose case is named input arrays of any shape rather than a batch of rows (attention):
    what the pipeline asks it in place of the row machinery. The case type has ``op``, ``family``,
    ``dtype``, ``params``, ``shape``, ``mask_fill``, ``args()``, ``fields()``, ``float_arrays()``
    and ``replace()``."""

    # (family, storage type, the op's declaration) -> the family's cases, only those the kernel takes
    cases: Callable[[str, str, Any], Any]
    # (case, the op's declaration, number of arrays returned) -> ((name, shape, dtype), ...): what
    # the call must return, in order; ValueError saying what it returns otherwise
    outputs: Callable[[Any, Any, int], tuple[tuple[str, tuple[int, ...], str], ...]]
    # (case, the op's declaration, oracle) -> NamedExact
    exact: Callable[[Any, Any, str], NamedExact]
    # (case, outputs by name, NamedExact, the op's declaration, label) -> the op's own verdicts
    check: Callable[..., list[Any]]
    # (output name, index) -> how a person names the element: "b 0 h 3 q 5 col 17"
    element: Callable[[str, tuple[int, ...]], str]
    # case -> ((smaller case, its place in the case's outputs as a tuple of slices, what), ...):
    # calls whose outputs must equal the case's there bitwise (batch invariance)
    pieces: Callable[[Any], tuple[tuple[Any, tuple[slice, ...], str], ...]]
    # (family, storage type, fields by name, params) -> a case (ValueError naming the bad part)
    build: Callable[[str, str, dict[str, Any], dict[str, Any]], Any]
    # (case, verdict or None) -> a few lines a person reads: the drawn parameters, not the arrays
    describe: Callable[[Any, Any], str]
    # The op's own declaration: its default, a user's from keywords (ErrorModel, dtype, **keywords,
    # UsageError naming a bad one), and one read back from a report (doc, ErrorModel)
    default_declaration: Any
    declare: Callable[..., Any]
    from_json: Callable[[Any, Any], Any]
    keywords: tuple[str, ...] = ()
    # (family, the op's declaration) -> why the family draws nothing the kernel takes, or None
    undrawable: Callable[[str, Any], str | None] | None = None
    # Float inputs handed over in float32 whatever the storage type (cross-entropy's dloss); the
    # others in the storage type. Integer arrays (a target's class indices) go over as int64.
    float32_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpSpec:
    """Everything the pipeline asks about one op: what it computes (PyTorch semantics), how a user
    function for it is called and what it returns, its exact reference and its bound, the families it
    is hunted on, the properties that apply to it, and its own checks and metamorphic copies.

    The pipeline never branches on ``name``: it asks these fields. Each op module
    (:mod:`normprops.ops.softmax`, ...) builds its ops and :func:`register` s them.
    """

    name: str
    params: tuple[str, ...]  # the user signature's arguments, in order
    default_eps: float | None
    formula: str
    # A gradient op: the forward op it differentiates. None: a forward op.
    forward: str | None = None
    # The arrays the op returns, in order: forward ops one, ``y``; gradients ``dx`` and, where the
    # op has them, ``dgamma`` and ``dbeta``.
    outputs: tuple[str, ...] = ("y",)
    # The families it is hunted on, in report order (forward ops: normprops.strategies.FAMILIES;
    # gradients: BACKWARD_FAMILIES, built from a forward family's x and a kind of dy).
    families: tuple[str, ...] = ()
    # The families that draw finite rows outside the accuracy domain, where the arithmetic the op
    # is declared with must leave float32's range on the way (a norm's x*x past 1.8e19, a masked
    # softmax's scale * x past FLT_MAX): range safety is judged there, or shown as information.
    range_families: tuple[str, ...] = ()
    # What overflows on those rows, and how a kernel avoids it: the hint a judged range-safety
    # failure gets.
    range_hint: str | None = None
    # The properties the judge can fail a kernel of this op on; the others never apply to it.
    properties: frozenset[str] = frozenset()
    # Statistics taken about the row mean (layer norm) rather than about zero (RMS norm): what the
    # eps_scale family and the gradients' cancelling dy aim at.
    centred: bool = False
    # The float64 reference of a case: a Reference (forward) or a GradReference (gradient).
    reference: Callable[..., Any] | None = None
    # Forward ops: row r of a case exactly, inside mpmath.workprec (None where the row has no
    # finite exact result), and the rows where float64 is not enough to judge by.
    exact_row: Callable[[Any, int], list[float] | None] | None = None
    needs_mpmath: Callable[[Any, Any], np.ndarray] | None = None
    # Gradients: the outputs at ``prec`` bits (case, rows, reference, prec, columns) -> by name.
    exact_outputs: Callable[..., dict[str, np.ndarray]] | None = None
    # The default policy's bound: (case, reference, model, row_reduction) -> Tolerance or
    # GradTolerance (docs/tolerances.md).
    bound: Callable[..., Any] | None = None
    # Rows outside the domain of the arithmetic a kernel declares beyond the op's own
    # (Reference.in_domain): a one-pass layer norm's x*x.
    out_of_domain: Callable[[Any, Any, Any], np.ndarray] | None = None
    # The op's own checks of one output beyond accuracy (softmax's sum_to_one, bounds, argmax,
    # ratios): (case, got, reference, tolerance, verdicts) -> None, adding to ``verdicts``.
    check_output: Callable[..., None] | None = None
    # exact_constant: the rows it applies to, the exact output there, and the promise in words.
    exact_constant: Callable[[Any], tuple[np.ndarray, np.ndarray, str]] | None = None
    # Metamorphic copies (shift invariance, scale invariance).
    transforms: tuple[Transform, ...] = ()
    # Gradients: the case's x (softmax: y) from the forward case, and the direction dy is taken
    # against (y, or xhat), both exact in the case's dtype: (forward case) -> (x, direction).
    gradient_inputs: Callable[[Any], tuple[np.ndarray, np.ndarray]] | None = None
    # An op whose case is named arrays of any shape (attention): its hooks; None: a row op.
    named: NamedArrays | None = None
    # What a kernel returns, as help and docs write it ("out or (out, lse)"); None: the outputs in
    # order (nothing said for a forward op's one ``y``).
    returns: str | None = None
    # The examples a claimed family of a kernel of this op hunts in a gate, under the ``ci`` profile
    # only, where fewer than the profile's: three times the worst examples-to-catch of the op's
    # planted bugs over 20 seeds, at least 30 (docs/ci.md, "Examples a claimed family hunts in the
    # gate"). None: the profile's own. Never more than the profile's (normprops.engine.gate_config).
    gate_examples: int | None = None

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
    def has_eps(self) -> bool:
        return "eps" in self.params

    @property
    def is_gradient(self) -> bool:
        return self.forward is not None

    @property
    def has_variance(self) -> bool:
        """Forms a layer norm's variance (a row's mean removed first), which the declared
        ``variance`` describes."""
        return self.centred


#: Every op by name: the built-in ones (this package's modules) and those :func:`register` ed.
OPS: dict[str, OpSpec] = {}

#: The properties the judge can fail a kernel of each op on (``OpSpec.properties``).
APPLICABLE: dict[str, frozenset[str]] = {}


def register(op: OpSpec, *, replace: bool = False) -> OpSpec:
    """Make ``op`` known to every part of normprops (hunts, the API, the reports) under ``op.name``.
    An op of that name already known is an error unless ``replace``."""
    if not isinstance(op, OpSpec):
        raise TypeError(f"op must be an OpSpec but was {type(op).__name__}")
    if op.name in OPS and not replace:
        raise ValueError(f"an op named {op.name!r} is already registered; pass replace=True")
    for name in ("reference", "bound"):
        if getattr(op, name) is None:
            raise ValueError(f"op {op.name!r} needs a {name}")
    if op.forward is None and op.exact_row is None and op.named is None:
        raise ValueError(f"op {op.name!r} needs an exact_row (its mpmath reference)")
    if not op.families:
        raise ValueError(f"op {op.name!r} needs at least one family")
    unknown = sorted(op.properties - set(PROPERTIES))
    if unknown:
        raise ValueError(f"op {op.name!r}: {', '.join(unknown)} are not properties")
    if op.gate_examples is not None and (not isinstance(op.gate_examples, int)
                                         or isinstance(op.gate_examples, bool) or op.gate_examples < 1):
        raise ValueError(f"op {op.name!r}: gate_examples must be a positive integer or None (the "
                         f"profile's own) but was {op.gate_examples!r}")
    OPS[op.name] = op
    APPLICABLE[op.name] = op.properties
    SIGNATURES[op.name] = op.params
    return op


def unregister(name: str) -> OpSpec:
    """Forget the op ``name`` (one :func:`register` ed, for a test that must leave the registry as
    it found it); returns it. An unknown name is a ValueError."""
    op = get_op(name)
    for table in (OPS, APPLICABLE, SIGNATURES):
        del table[name]
    return op


#: The families a gradient is hunted on, and what each draws: a forward family's x (for softmax,
#: the logits whose softmax is the y the kernel receives) with an upstream gradient dy of its own
#: kind. normprops.strategies builds them (normprops.dy_kinds); docs/tolerances.md, "Gradients".
BACKWARD_FAMILIES: dict[str, str] = {
    "ordinary": "ordinary x (logits), ordinary dy",
    "large_mean": "x with |mean|/std from 1e2 to 1e7, dy of every kind (recomputed statistics)",
    "wide_span": "spreads of 100 to 1e4 in x: softmax y with subnormal and zero entries",
    "constant": "zero-variance, one-hot and spike rows of x (uniform or one-hot y)",
    "tiny": "x down to subnormals; dy ordinary or tiny (products that underflow)",
    "eps_scale": "mean square or variance of x near eps",
    "huge": "x up to float32 max (range safety)",
    "ragged": "edge column counts only, ordinary values",
    "nonfinite": "NaN and +-inf in some rows of x (y): those rows' dx non-finite, others untouched",
    "cancelling_dy": "dy nearly constant along y (softmax), nearly a + b*xhat over gamma (norms): "
                     "dx nearly 0, its terms cancel",
    "orthogonal_dy": "dy orthogonal to y (softmax) or g = dy*gamma orthogonal to xhat (norms), up "
                     "to dy's rounding: the projection term vanishes",
    "one_hot_dy": "one nonzero dy per row",
    "dy_scale": "dy from 1e-38 to 1e30 (products that underflow or grow)",
    "tall": "64 to 1024 rows of 1 to 64 columns (dgamma and dbeta sum many rows)",
}

#: The row reduction a user's gradient kernel is judged under unless it declares another. A sum of
#: R rows in any order passes each term through at most R - 1 additions, so ``sequential`` bounds
#: every order: numpy's ``np.sum(axis=0)`` (one running sum down the rows of a C-contiguous array of
#: two or more columns), torch's ``sum(dim=0)`` on the CPU (a cascade) and XLA's. ``blocks`` is a
#: sharper bound a kernel may declare; registry entries declare their own (``KernelSpec``).
USER_ROW_REDUCTION = "sequential"


def is_backward(op: str) -> bool:
    """Whether ``op`` is a gradient op (``OpSpec.forward`` set)."""
    return get_op(op).forward is not None


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
    "range_safety": "right for finite rows outside the accuracy domain, where the declared "
                    "arithmetic leaves float32's range (x*x past 1.8e19, scale * x past FLT_MAX); "
                    "opt-in, else shown as information",
    "accuracy": "within the condition-aware tolerance of the exact result",
    "ratios": "softmax: y_i / y_j = exp(x_i - x_j) within a bound that does not grow with the row",
    "exact_constant": "opt-in: an exactly constant row gives beta (layer norm), a zero row 0 (RMS norm)",
    "sum_to_one": "softmax rows sum to 1 within the bound",
    "bounds": "softmax outputs lie in [0, 1]",
    "argmax": "softmax keeps the argmax",
    "determinism": "two calls on the same input are bitwise equal",
    "batch_invariance": "a row's output is bitwise the same alone, in any batch, at any position",
    "shift_invariance": "adding an exact constant to a row changes nothing (softmax, layer norm); "
                        "attention: a vector u added to every key (q.u to each score of a row)",
    "scale_invariance": "scaling x by 2^k and eps by 4^k changes nothing (norms)",
    "permutation_invariance": "attention: the keys permuted with their values and mask columns "
                              "change the output only within the bound",
    "row_order": "opt-in, gradients: dgamma and dbeta are bitwise the same with the rows in "
                 "another order",
}



#: Properties judged only for a kernel that asks for them (``Target.opt_in``): a contract some
#: users hold and others do not. ``exact_constant``: docs/tolerances.md, "Exactly constant rows".
#: ``range_safety``: the rows outside the accuracy domain (``OpSpec.range_families`` draw them),
#: where the arithmetic an op is declared with must overflow: a norm's squares past |x| of about
#: 1.8e19 unless it scales each row first (PyTorch's, Liger's, QuACK's and the textbook norms do
#: not), a masked softmax's ``scale * x`` past FLT_MAX unless it subtracts the max first (PyTorch's
#: does not). Every other row is judged by every property, in every family.
OPTIONAL = frozenset({"exact_constant", "range_safety", "row_order"})

#: Optional properties hunted all the same when not judged, their findings shown as information
#: ("not range-safe"), never as failures: whether a kernel is range-safe is worth knowing either way.
INFORMATIVE = frozenset({"range_safety"})

#: What a kernel may declare it does not promise: everything but the calling contract, finite
#: outputs for finite results, and ``exact_constant`` (not judged unless asked for). Range safety
#: is both: a softmax may decline it, a norm may ask for it.
IGNORABLE = frozenset(PROPERTIES) - {"contract", "finite", "exact_constant", "row_order"}


#: The properties every op is judged on; an op module adds its own (``OpSpec.properties``).
EVERY_OP = frozenset({"contract", "finite", "nan_propagation", "range_safety", "accuracy",
                      "determinism", "batch_invariance"})


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
