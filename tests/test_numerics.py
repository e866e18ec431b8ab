"""``pytest -m numerics``: hunt every registered kernel, as ``normprops hunt`` does (one policy,
:mod:`normprops.registry_hunt`). Claimed families must come back clean, each hunted for the
profile's examples (under the ci profile, at most its op's ``gate_examples``: docs/ci.md); every
known bug must be caught in the family that shows it, on its own property, within the profile's
examples (at least 100: the ci profile's)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from normprops.engine import gate_config
from normprops.hunt import HuntResult, hunt
from normprops.kernelspec import KernelSpec, KnownBug
from normprops.launch import GPU_BACKENDS, target_from_spec
from normprops.ops import is_backward
from normprops.plugin import HUNT_PROPERTY
from normprops.registry_hunt import caught, registry_cell_text, registry_target
from normprops.regressions import save_findings
from normprops.replay import with_saved_examples
from normprops.specs import KERNELS, kernel_status
from normprops.strategies import families_for

pytestmark = pytest.mark.numerics

#: A known bug must be caught within this many examples (the ci profile's), whatever the seed.
CAUGHT_WITHIN = 100


def _marks(spec: KernelSpec) -> list[pytest.MarkDecorator]:
    return [pytest.mark.gpu] if spec.backend in GPU_BACKENDS else []


# The slowest hunts first, so that pytest-xdist's workers end together instead of waiting on a
# few long ones at the end: XLA compiles every new shape and Inductor every new eps, and a 16-bit
# kernel converts its operands (measured on an H200 at -n 15: JAX and Flax 25-50 s a test,
# torch.compile and Liger 8-24 s, the others 2-12 s). The slow-start backends come first, in this
# order, so that their pools are staffed first (conftest.py); within each, and among the rest, the
# hunts that took longest in the gate's last timed runs (tests/numerics_seconds.json, written by
# `tools/suite_by_backend.py --test-seconds`) come first: a 20-40 s hunt (a cuDNN plan per shape,
# a 256000-class vocabulary) handed out last would end the run 20-40 s after every other worker.
# A hunt not timed yet counts as the median of those that were, its 16-bit twins before float32.
SLOW_BACKENDS = ("flax", "jax", "torch-compile", "liger")
SECONDS: dict[str, float] = json.loads(Path(__file__).with_name("numerics_seconds.json").read_text())
_TYPICAL_SECONDS = statistics.median(SECONDS.values()) if SECONDS else 0.0


def _hunt_id(spec: KernelSpec, family: str) -> str:
    return f"{spec.backend}-{spec.name}-{family}"


def _slowest_first(spec: KernelSpec, family: str) -> tuple[int, float, bool]:
    backend = SLOW_BACKENDS.index(spec.backend) if spec.backend in SLOW_BACKENDS else len(SLOW_BACKENDS)
    return backend, -SECONDS.get(_hunt_id(spec, family), _TYPICAL_SECONDS), spec.dtype == "float32"


CLAIMS = [
    pytest.param(spec, family, id=_hunt_id(spec, family), marks=_marks(spec))
    for spec, family in sorted(((spec, family) for spec in KERNELS for family in families_for(spec.op)
                                if family in spec.claims and spec.bug_in(family) is None),
                               key=lambda claim: _slowest_first(*claim))
]
BUGS = [
    pytest.param(spec, bug, id=f"{spec.backend}-{spec.name}-{bug.family}", marks=_marks(spec))
    for spec in KERNELS
    for bug in spec.bugs
    if bug.detector == "hunt"
]


def _report(result: HuntResult) -> str:
    from normprops.report import format_finding

    if result.passed:
        return f"{result.label} {result.family}: no failure"
    name = result.label.split("[", 1)[1].rstrip("]")
    return ("\n".join(format_finding(f, indent="") for f in result.findings)
            + f"\nreproduce: normprops hunt --kernel {name} --families {result.family} "
              f"--max-examples 300")


def _hunt(target, family: str, config, normprops_options) -> HuntResult:
    if normprops_options.fixtures_dir is not None:
        target = with_saved_examples(target, normprops_options.fixtures_dir)
    result = hunt(target, family=family, config=config)
    if normprops_options.fixtures_dir is not None and result.findings:
        result = save_findings(result, target=target, directory=normprops_options.fixtures_dir)
    return result


def _target(spec: KernelSpec, family: str, normprops_options):
    target = registry_target(spec, family)
    if normprops_options.stress_rows is not None and target.stress_rows:
        target = replace(target, stress_rows=normprops_options.stress_rows)
    return target


def _skip_unselected(spec: KernelSpec, normprops_options) -> None:
    if normprops_options.backends is not None and spec.backend not in normprops_options.backends:
        pytest.skip(f"backend {spec.backend} not selected by --normprops-backend")
    usable, why = kernel_status(spec)
    if not usable:
        pytest.skip(f"{spec.backend} kernel {spec.name} unusable here: {why}")


def _device(spec: KernelSpec) -> int | None:
    """The GPU this worker ran the hunt on (see the plugin's xdist pinning), None for CPU backends."""
    if spec.backend not in GPU_BACKENDS:
        return None
    import cupy

    return cupy.cuda.Device().id


def _record(request: pytest.FixtureRequest, spec: KernelSpec, result: HuntResult, cell: str) -> None:
    request.node.user_properties.append((HUNT_PROPERTY, {
        "backend": spec.backend, "op": spec.op, "kernel": spec.name, "family": result.family,
        "cell": cell, "device": _device(spec)}))


@pytest.mark.parametrize("spec, family", CLAIMS)
def test_claimed_family_is_clean(spec: KernelSpec, family: str, hunt_config, normprops_options,
                                 request: pytest.FixtureRequest) -> None:
    _skip_unselected(spec, normprops_options)
    config = gate_config(hunt_config, op=spec.op)
    result = _hunt(_target(spec, family, normprops_options), family, config, normprops_options)
    _record(request, spec, result, registry_cell_text(spec, result))
    assert result.passed, _report(result)


@pytest.mark.parametrize("spec, bug", BUGS)
def test_known_bug_is_caught(spec: KernelSpec, bug: KnownBug, hunt_config, normprops_options,
                             request: pytest.FixtureRequest) -> None:
    _skip_unselected(spec, normprops_options)
    config = replace(hunt_config, max_examples=max(CAUGHT_WITHIN, hunt_config.max_examples))
    result = _hunt(_target(spec, bug.family, normprops_options), bug.family, config, normprops_options)
    _record(request, spec, result, registry_cell_text(spec, result))
    if result.cut_short and not caught(spec, result):
        pytest.skip(f"the time budget was spent after {result.examples} examples, before the bug")
    assert not result.passed, f"{spec.label}: {bug.summary} not caught in {result.examples} examples"
    assert result.minimal is not None and result.minimal.family == bug.family
    assert caught(spec, result), _report(result)
    # A readable counterexample: shrinking takes it down to a few rows and columns.
    assert is_small(result.minimal, bug), f"not shrunk: {result.minimal!r}"


def is_small(case, bug) -> bool:
    """Shrunk: at most four rows (a masked row's pattern is picked by its position; a family that
    draws more, as the gradients' ``tall`` does, its fewest), and no wider than 64 columns or twice
    the narrowest width that shows ``bug``."""
    from normprops.dy_kinds import GRAD_FAMILIES
    from normprops.ops import get_op

    if get_op(case.op).named is not None:  # attention: at most 32 query rows (B * Hq * Lq)
        return math.prod(case.shape[:3]) <= 32
    family = GRAD_FAMILIES.get(case.family) if is_backward(case.op) else None
    fewest = family.rows[0] if family is not None and family.rows is not None else 4
    return case.rows <= max(4, fewest) and case.cols <= max(64, 2 * bug.shows_from_cols)


def test_the_smallness_check_fails_when_nothing_shrinks() -> None:
    """``is_small`` can fail: a case as drawn, before shrinking, is wider than the bound it checks,
    and the hunt's shrunk counterexample of the same bug is within it. (The drawn case is built from
    parameters rather than taken from a hunt without shrinking: which example fails first depends on
    the modules loaded, since Hypothesis also draws constants found in local source files.)"""
    from normprops.hunt import HuntConfig
    from normprops.strategies import make_case

    spec = next(k for k in KERNELS if (k.backend, k.name) == ("numpy", "layerNormRowOnePass"))
    drawn = make_case(op="layernorm", family=spec.bug.family, rows=2, cols=8395, seed=3,
                      params={"mean": 1e4, "sign": 1.0, "ratio": 1e3})
    shrunk = hunt(target_from_spec(spec), family=spec.bug.family,
                  config=HuntConfig(max_examples=300, seed=3))
    assert not is_small(drawn, spec.bug) and is_small(shrunk.minimal, spec.bug)


def test_a_tall_gradient_case_is_small_at_its_familys_fewest_rows() -> None:
    """The gradients' ``tall`` family draws 64 rows or more: a counterexample of 64 rows is as
    small as it shrinks; 65 rows, or 64 rows of another family, is not."""
    from normprops.strategies import Drawn, make_grad_case

    bug = KnownBug("tall", "a stand-in")

    def tall(rows: int, family: str = "tall"):
        return make_grad_case(op="rmsnorm_backward", family=family, rows=rows, cols=1, seed=0,
                              x=Drawn("ordinary", {"loc": 0.5, "scale": 1.0, "spikes": []}),
                              dy=Drawn("ordinary", {"loc": 0.1, "scale": 1.0}))

    assert is_small(tall(64), bug) and not is_small(tall(65), bug)
    assert not is_small(tall(64, family="ordinary"), bug)
