"""The three ops and their semantics (PyTorch's), the user signature a kernel of each has, and the
properties a kernel of them is judged on."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["OpSpec", "OPS", "get_op", "FLOAT32_EPS", "PROPERTIES", "IGNORABLE", "check_ignore",
           "OPTIONAL", "check_opt_in"]

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
    )
}


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
    "range_safety": "right for any finite float32 row (rows outside the accuracy domain, family huge)",
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
#: users hold and others do not (docs/tolerances.md, "Exactly constant rows").
OPTIONAL = frozenset({"exact_constant"})

#: What a kernel may declare it does not promise: everything but the calling contract, finite
#: outputs for finite results, and the optional properties (not judged unless asked for).
IGNORABLE = frozenset(PROPERTIES) - {"contract", "finite"} - OPTIONAL


def check_ignore(ignore: object) -> frozenset[str]:
    """``ignore`` (names of properties) validated: a frozenset, or ValueError naming the bad ones."""
    if isinstance(ignore, str):
        ignore = [p.strip() for p in ignore.split(",") if p.strip()]
    try:
        names = frozenset(ignore)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"ignore must be a collection of property names but was {ignore!r}") from None
    unknown = sorted(n for n in names if n not in IGNORABLE)
    if unknown:
        raise ValueError(f"ignore: {', '.join(map(repr, unknown))} cannot be ignored; choose from "
                         f"{', '.join(p for p in PROPERTIES if p in IGNORABLE)}")
    return names




def check_opt_in(opt_in: object) -> frozenset[str]:
    """``opt_in`` (names of optional properties) validated: a frozenset, or ValueError naming the
    bad ones."""
    if isinstance(opt_in, str):
        opt_in = [p.strip() for p in opt_in.split(",") if p.strip()]
    try:
        names = frozenset(opt_in)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"opt_in must be a collection of property names but was {opt_in!r}") from None
    unknown = sorted(n for n in names if n not in OPTIONAL)
    if unknown:
        raise ValueError(f"opt_in: {', '.join(map(repr, unknown))} is not an optional property; "
                         f"choose from {', '.join(sorted(OPTIONAL))}")
    return names
