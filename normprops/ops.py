"""The ops and their semantics (PyTorch's), the user signature a kernel of each has, and the
properties a kernel of them is judged on."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

__all__ = ["OpSpec", "OPS", "SOFTMAX_OPS", "get_op", "FLOAT32_EPS", "PROPERTIES", "IGNORABLE",
           "check_ignore", "OPTIONAL", "INFORMATIVE", "check_opt_in",
           "BACKWARD_FAMILIES", "is_backward", "ROW_REDUCTIONS", "USER_ROW_REDUCTION", "APPLICABLE"]

#: ``torch.nn.RMSNorm(eps=None)`` uses the machine epsilon of the compute type: float32's.
FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 1.1920929e-07


@dataclass(frozen=True)
class OpSpec:
    """What an op computes (PyTorch semantics) and how a user function for it is called."""

    name: str
    params: tuple[str, ...]
    default_eps: float | None
    formula: str
    # A gradient op: the forward op it differentiates, the arrays it returns (in order) and the
    # families it is hunted on (normprops.backward_strategies draws them). None: a forward op, which
    # returns one array of x's shape and is hunted on normprops.strategies.FAMILIES.
    forward: str | None = None
    outputs: tuple[str, ...] = ("y",)
    families: tuple[str, ...] | None = None
    # The families that draw finite rows outside the accuracy domain, where the arithmetic the op
    # is declared with must leave float32's range on the way (a norm's x*x past 1.8e19, a masked
    # softmax's scale * x past FLT_MAX): range safety is judged there, or shown as information.
    range_families: tuple[str, ...] = ()
    # What overflows on those rows, and how a kernel avoids it: the hint a judged range-safety
    # failure gets.
    range_hint: str | None = None

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
    def has_variance(self) -> bool:
        """Forms a layer norm's variance, which ``variance=`` (--variance) describes."""
        return (self.forward or self.name) == "layernorm"

    @property
    def is_softmax(self) -> bool:
        """Judged as a softmax (row sums, bounds, argmax, ratios)."""
        return self.name in SOFTMAX_OPS


_NORM_RANGE_HINT = ("squares overflow float32 past |x| of about 1.8e19 / sqrt(cols), so a norm is "
                    "range-safe only when it scales each row (by a power of two, say) before squaring")

OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        # Every finite softmax row is in its accuracy domain: x - max x never overflows.
        OpSpec("softmax", ("x",), None, "exp(x - max x) / sum exp(x - max x), over the last axis"),
        OpSpec(
            "layernorm",
            ("x", "gamma", "beta", "eps"),
            1e-5,
            "(x - mean) / sqrt(var + eps) * gamma + beta, population variance",
            range_families=("huge",), range_hint=_NORM_RANGE_HINT,
        ),
        OpSpec("rmsnorm", ("x", "gamma", "eps"), FLOAT32_EPS, "x / sqrt(mean(x^2) + eps) * gamma",
               range_families=("huge",), range_hint=_NORM_RANGE_HINT),
        # PyTorch's scaled_dot_product_attention convention: a True mask entry takes part.
        OpSpec("masked_softmax", ("x", "mask", "scale"), None,
               "softmax(scale * x) over the entries where mask is True, 0 elsewhere, over the last axis",
               range_families=("overflow_logits", "huge"),
               range_hint="scale * x overflows float32 past FLT_MAX, so a masked softmax is "
                          "range-safe only when it subtracts the row max before it scales "
                          "(scale * (x - max x), the min for a negative scale)"),
    )
}

#: The ops judged as a softmax.
SOFTMAX_OPS = frozenset({"softmax", "masked_softmax"})

#: The families a gradient is hunted on, and what each draws: a forward family's x (for softmax,
#: the logits whose softmax is the y the kernel receives) with an upstream gradient dy of its own
#: kind. normprops/backward_strategies.py builds them; docs/tolerances.md, "Gradients".
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

_SOFTMAX_BACKWARD_FAMILIES = ("ordinary", "wide_span", "constant", "tiny", "ragged", "nonfinite",
                              "cancelling_dy", "orthogonal_dy", "one_hot_dy", "dy_scale", "tall")
_NORM_BACKWARD_FAMILIES = ("ordinary", "large_mean", "wide_span", "constant", "tiny", "eps_scale",
                           "huge", "ragged", "nonfinite", "cancelling_dy", "orthogonal_dy",
                           "one_hot_dy", "dy_scale", "tall")

OPS.update({
    op.name: op
    for op in (
        OpSpec("softmax_backward", ("dy", "y"), None,
               "dx = y * (dy - sum(dy * y)) per row, y the softmax output "
               "(PyTorch's _softmax_backward_data)",
               forward="softmax", outputs=("dx",), families=_SOFTMAX_BACKWARD_FAMILIES),
        OpSpec("rmsnorm_backward", ("dy", "x", "gamma", "eps"), FLOAT32_EPS,
               "dx = rstd * (g - xhat * mean(g * xhat)), g = dy * gamma, xhat = x * rstd; "
               "dgamma = sum over rows of dy * xhat",
               forward="rmsnorm", outputs=("dx", "dgamma"), families=_NORM_BACKWARD_FAMILIES,
               range_families=("huge",)),
        OpSpec("layernorm_backward", ("dy", "x", "gamma", "beta", "eps"), 1e-5,
               "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, "
               "xhat = (x - mean) * rstd; dgamma = sum over rows of dy * xhat, dbeta = sum of dy",
               forward="layernorm", outputs=("dx", "dgamma", "dbeta"),
               families=_NORM_BACKWARD_FAMILIES, range_families=("huge",)),
    )
})


#: How a gradient kernel combines its rows into dgamma and dbeta (docs/tolerances.md, "Gradients"):
#: ``blocks`` per-block partials over ``threads`` blocks, each adding its rows in turn, then a tree;
#: ``sequential`` one running sum over the rows; ``tree`` a pairwise sum.
ROW_REDUCTIONS = ("blocks", "sequential", "tree")

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
    "shift_invariance": "adding an exact constant to a row changes nothing (softmax, layer norm)",
    "scale_invariance": "scaling x by 2^k and eps by 4^k changes nothing (norms)",
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


_EVERY_OP = frozenset({"contract", "finite", "nan_propagation", "range_safety", "accuracy",
                       "determinism", "batch_invariance"})
# The softmaxes' own (shift invariance a layer norm shares). A softmax row of -inf only is
# masked: the masked family draws such rows for plain softmax too.
_SOFTMAX_PROPERTIES = frozenset({"ratios", "sum_to_one", "bounds", "argmax", "shift_invariance",
                                 "masked_rows"})

#: The properties the judge can fail a kernel of each op on; the others never apply to it (a norm
#: has no rows that sum to one, only gradients of a gamma have dgamma's row order).
APPLICABLE: dict[str, frozenset[str]] = {
    "softmax": _EVERY_OP | _SOFTMAX_PROPERTIES,
    "masked_softmax": _EVERY_OP | _SOFTMAX_PROPERTIES,
    "layernorm": _EVERY_OP | {"exact_constant", "shift_invariance", "scale_invariance"},
    "rmsnorm": _EVERY_OP | {"exact_constant", "scale_invariance"},
    "softmax_backward": _EVERY_OP,
    "layernorm_backward": _EVERY_OP | {"row_order"},
    "rmsnorm_backward": _EVERY_OP | {"row_order"},
}


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
