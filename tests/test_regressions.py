"""Fixtures: exact round trips, atomic deduplicated writes, and replay of every committed fixture
against every kernel of its op that claims its family (and against the kernel that failed it)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from normprops.case import ShapeConstraints
from normprops.hunt import HuntConfig, hunt
from normprops.launch import GPU_BACKENDS, target_from_callable, target_from_spec
from normprops.regressions import (
    OTHER_DTYPE,
    OTHER_WIDTH,
    decode_array,
    encode_array,
    iter_fixtures,
    list_fixtures,
    load_fixture,
    replay,
    save_findings,
    select_fixtures,
)
from normprops.specs import KERNELS, backend_status

COMMITTED = Path(__file__).parent / "regressions"
SPECS = {spec.name: spec for spec in KERNELS if spec.backend == "numpy"}


@pytest.mark.parametrize("size", [1, 7, 256, 257, 5000])
def test_arrays_round_trip_exactly(size: int) -> None:
    rng = np.random.default_rng(size)
    a = rng.standard_normal(size).astype(np.float32) * np.float32(1e30)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], np.float32)
    a[: min(size, 6)] = specials[: min(size, 6)]
    b = decode_array(json.loads(json.dumps(encode_array(a))))
    assert b.dtype == np.float32 and b.shape == a.shape
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_small_arrays_are_readable_hex() -> None:
    blob = encode_array(np.array([1.5, -0.25], np.float32))
    assert blob == {"shape": [2], "hex": ["0x1.8000000000000p+0", "-0x1.0000000000000p-2"]}


def test_save_is_deduplicated_and_loads_back(tmp_path: Path) -> None:
    spec = SPECS["softmaxRowNaive"]
    target = target_from_spec(spec)
    config = HuntConfig(max_examples=50, seed=1)
    first = save_findings(hunt(target, family="overflow_logits", config=config), target=target,
                          directory=tmp_path)
    second = save_findings(hunt(target, family="overflow_logits", config=config), target=target,
                           directory=tmp_path)
    assert first.fixture == second.fixture and first.fixture.exists()
    assert iter_fixtures(tmp_path) == sorted(f.fixture for f in first.findings)
    assert not list(tmp_path.rglob(".*"))  # no temporary files left behind
    fixture = load_fixture(first.fixture)
    assert fixture.op == "softmax" and fixture.family == "overflow_logits"
    assert np.array_equal(fixture.minimal.x, first.minimal.x)
    doc = json.loads(first.fixture.read_text())
    assert {"numpy", "hypothesis", "normprops", "python"} <= set(doc["versions"])
    assert doc["impl"] == "softmaxRowNaive" and doc["property"] == first.failure.property
    assert replay(target, fixture)  # the bug is still there
    assert not replay(target_from_spec(SPECS["softmaxRowSafe"]), fixture)


def test_load_rejects_non_fixtures(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a normprops fixture"):
        load_fixture(path)


def test_every_known_bad_kernel_has_a_committed_fixture() -> None:
    impls = {fixture.impl for fixture in FIXTURES}
    missing = [k.label for k in KERNELS
               if any(b.detector == "hunt" for b in k.bugs) and k.name not in impls]
    assert not missing, f"known-bad kernels without a committed fixture: {missing}"


def test_every_known_example_is_a_committed_finding() -> None:
    """A known bug's explicit example (normprops/known/) is the minimal input of a fixture this
    suite replays: the same kernel, family, property and values."""
    from normprops.registry_hunt import known_example

    committed = {(f.impl, f.family, f.property): f.minimal for f in FIXTURES}
    named = [(k, b) for k in KERNELS for b in k.bugs if b.example]
    assert named
    for spec, bug in named:
        case = known_example(bug.example)
        matches = [m for (impl, family, prop), m in committed.items()
                   if (impl, family) == (spec.name, bug.family) and prop == (bug.property or prop)]
        assert any(np.array_equal(m.x, case.x, equal_nan=True) for m in matches), bug.example


def _produced(fixture, spec) -> bool:
    """The kernel whose failure the fixture records (numpy and cuda share the textbook kernels)."""
    same_code = {fixture.backend, spec.backend} <= {"numpy", "cuda"} or fixture.backend == spec.backend
    return fixture.impl == spec.name and same_code


FIXTURES = [load_fixture(path) for path in iter_fixtures(COMMITTED)]
REPLAYS = [
    pytest.param(fixture, spec, id=f"{fixture.path.stem}-{spec.name}",
                 marks=[pytest.mark.gpu] if spec.backend in GPU_BACKENDS else [])
    for fixture in FIXTURES
    for spec in KERNELS
    if spec.op == fixture.op and spec.dtype == fixture.dtype
    and (_produced(fixture, spec)
         or (fixture.family in spec.claims and spec.bug_in(fixture.family) is None
             and all(spec.constraints.allows(c.cols) for c in fixture.cases())))
]



@pytest.mark.parametrize("fixture, spec", REPLAYS)
def test_committed_fixture_replays(fixture, spec) -> None:
    usable, why = backend_status(spec.backend)
    if not usable:
        pytest.skip(f"backend {spec.backend} unusable here: {why}")
    # Widths outside the ones its claims are hunted at belong to a known bug of its own (QuACK's
    # bfloat16 norms at odd widths), whichever family met them first.
    outside = not all(spec.constraints.allows(c.cols) for c in fixture.cases())
    if _produced(fixture, spec) and (fixture.family not in spec.claims
                                     or spec.bug_in(fixture.family) is not None or outside):
        # Its own bug, judged on every property (including any it does not promise on its claims).
        found = replay(replace(target_from_spec(spec), ignore=frozenset()), fixture)
        assert found, f"{spec.label} no longer fails {fixture.path.name}: was the bug fixed?"
        return
    found = replay(target_from_spec(spec), fixture)
    assert not found, found[0].message()


def test_select_fixtures_takes_those_of_the_kernels_storage_type_and_widths() -> None:
    rmsnorm = list_fixtures(COMMITTED, op="rmsnorm").fixtures
    kinds = {f.dtype for f in rmsnorm}
    assert {"float32", "bfloat16", "float16"} <= kinds
    for dtype in sorted(kinds):
        chosen = select_fixtures(rmsnorm, dtype=dtype)
        assert chosen.replays and all(f.dtype == t == dtype for f, t in chosen.replays)
        assert {f.dtype for f in chosen.skipped_for(OTHER_DTYPE)} == kinds - {dtype}
    every = select_fixtures(rmsnorm, all_dtypes=True)
    assert not every.skipped and all(f.dtype == t for f, t in every.replays)
    narrow = select_fixtures(rmsnorm, widths=ShapeConstraints(max_cols=8))
    assert all(c.cols <= 8 for f, _ in narrow.replays for c in f.cases())
    assert narrow.skipped_for(OTHER_WIDTH) and all(
        any(c.cols > 8 for c in f.cases()) for f in narrow.skipped_for(OTHER_WIDTH))
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16, float16 but was 'fp8'"):
        select_fixtures(rmsnorm, dtype="fp8")


def _rms_norm_off_by_scale(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """1% off everywhere (accuracy), and the other way once |x| reaches 4 (scale invariance). Row
    by row: a batch-wide max would fail batch invariance too, found first or not as draws go."""
    z = x.astype(np.float64)
    off = np.where(np.abs(z).max(axis=1, keepdims=True) < 4, 1.01, 0.99)
    return (z / np.sqrt((z * z).mean(axis=1, keepdims=True) + eps) * gamma * off).astype(np.float32)


def test_a_metamorphic_fixture_replays_under_its_own_property(tmp_path: Path) -> None:
    # The hunt finds accuracy first, then scale invariance with accuracy set aside, on an input
    # that fails accuracy too: its fixture must still replay as scale invariance, not accuracy.
    target = target_from_callable(_rms_norm_off_by_scale, op="rmsnorm", name="off_by_scale")
    result = save_findings(hunt(target, family="ordinary", config=HuntConfig(max_examples=50, seed=0)),
                           target=target, directory=tmp_path)
    assert result.properties == ("accuracy", "scale_invariance")
    scale = load_fixture(next(f.fixture for f in result.findings if f.property == "scale_invariance"))
    found = replay(target, scale)
    assert found[0].property == "scale_invariance", [v.message() for v in found]
    assert {"accuracy", "scale_invariance"} <= {v.property for v in found}
