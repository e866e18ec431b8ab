"""The opt-in ``exact_constant`` property on our registered numpy kernels and the example designs:
which give beta exactly on an exactly constant row (docs/tolerances.md, "Exactly constant rows").

A fixed battery of constant rows rather than a hunt: which values a seeded hunt draws depends on
the modules imported before it (Hypothesis mixes their literals into its draws), and a record of
who holds the property should not."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from normprops.case import Case
from normprops.examples import correct
from normprops.launch import Target, target_from_callable, target_from_spec
from normprops.ops import IGNORABLE
from normprops.properties import evaluate
from normprops.specs import KERNELS

pytestmark = pytest.mark.numerics

F32 = np.float32
#: Whether each layer norm or RMS norm gives exactly beta (0 for a zero RMS norm row).
HOLDS = {
    "layerNormRowTwoPass": False,  # mean = fl(sum) / C: a constant row's sum rounds
    "layerNormRowWelford": True,  # delta = x - mean is 0 from the first update on
    "layerNormRowOnePass": False,
    "rmsNormRow": True,
    "layernorm_f64": True,  # float64 sums of C <= 2^15 copies of a float32 are exact
    "layernorm_f32": True,  # the mean correction centres a constant row to exactly 0
    "layernorm_welford": True,
    "layernorm_kahan": False,  # the compensated sum is still rounded to float32 once
    "rmsnorm_f32": True,
    "rmsnorm_pairwise": True,
}
VALUES = (0.0, 1.0, 0.1, -1 / 3, 1234.567, -9876.543, 3.3e-5, 7e-20, 2.5e30)
WIDTHS = (1, 3, 7, 100, 1000, 4097, 16385)
EPS = (1e-5, 1e-12)


def _battery(op: str) -> list[Case]:
    rng = np.random.default_rng(0)
    out = []
    for cols, eps in itertools.product(WIDTHS, EPS):
        x = np.array([[v] * cols for v in VALUES], dtype=F32)
        gamma = rng.standard_normal(cols).astype(F32)
        beta = rng.standard_normal(cols).astype(F32) if op == "layernorm" else None
        out.append(Case(op, "constant", x, gamma, beta, float(F32(eps))))
    return out


def _asked(target: Target) -> Target:
    return target.declared(opt_in=frozenset({"exact_constant"}),
                           ignore=IGNORABLE - {"exact_constant"})


def _targets() -> list[pytest.param]:
    out = []
    for spec in KERNELS:
        if spec.backend == "numpy" and spec.name in HOLDS:
            out.append(pytest.param(spec.name, lambda s=spec: target_from_spec(s), id=spec.name))
    for name in HOLDS:
        if hasattr(correct, name):
            op = name.split("_")[0]
            out.append(pytest.param(name, lambda n=name, o=op: target_from_callable(
                getattr(correct, n), op=o), id=name))
    return out


def _exact_constant_failures(target: Target) -> list[str]:
    return [v.message() for case in _battery(target.op)
            for v in evaluate(_asked(target), case, metamorphic=False).failures
            if v.property == "exact_constant"]


@pytest.mark.parametrize("name, make", _targets())
def test_exact_constant_holds_where_recorded(name: str, make) -> None:
    failures = _exact_constant_failures(make())
    if HOLDS[name]:
        assert failures == []
    else:
        assert failures, f"{name}: every constant row came out exact"


def test_exact_constant_is_not_judged_unless_asked() -> None:
    spec = next(k for k in KERNELS if k.backend == "numpy" and k.name == "layerNormRowTwoPass")
    target = target_from_spec(spec).declared(ignore=IGNORABLE - {"exact_constant"})
    assert all(evaluate(target, case, metamorphic=False).passed for case in _battery("layernorm"))


@pytest.mark.parametrize("op, fn", [
    ("softmax", lambda x: x),
    ("masked_softmax", lambda x, mask, scale: x),
    ("layernorm_backward", lambda dy, x, gamma, beta, eps: (dy, gamma, beta)),
])
def test_exact_constant_is_asked_of_the_norms_only(op: str, fn) -> None:
    """Softmax and the gradients have no row whose output is exactly known: asking for the
    property there would read as judged and judge nothing."""
    from normprops.errors import UsageError

    with pytest.raises(UsageError, match=f"applies to layernorm and rmsnorm only; op {op} "):
        target_from_callable(fn, op=op, opt_in=("exact_constant",))
