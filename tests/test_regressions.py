"""Fixtures: exact round trips, atomic deduplicated writes, and replay of every committed fixture
against every kernel of its op that claims its family (and against the kernel that failed it)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from normprops.api import hunt_families
from normprops.case import ShapeConstraints
from normprops.examples.correct import rmsnorm_f32, softmax_f32
from normprops.examples.planted import rmsnorm_unscaled_eps
from normprops.hunt import HuntConfig, hunt
from normprops.launch import GPU_BACKENDS, target_from_callable, target_from_spec
from normprops.regressions import (
    OTHER_DTYPE,
    OTHER_REDUCTION,
    OTHER_WIDTH,
    decode_array,
    dloss_reduction,
    encode_array,
    iter_fixtures,
    list_fixtures,
    load_fixture,
    replay,
    save_findings,
    select_fixtures,
)
from normprops.replay import prune_fixtures, replay_fixtures, saved_examples
from normprops.specs import KERNELS, kernel_status

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


@pytest.mark.parametrize("size", [257, 151936])
def test_large_bfloat16_arrays_take_two_bytes_a_value_and_round_trip(size: int) -> None:
    rng = np.random.default_rng(size)
    a = (rng.standard_normal(size).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    a[:4] = np.array([np.nan, -np.inf, -0.0, 2.0**-133], np.float32)  # all bfloat16 values
    blob = json.loads(json.dumps(encode_array(a)))
    assert set(blob) == {"shape", "bf16le_base64"} and len(blob["bf16le_base64"]) <= 4 * -(-2 * size // 3)
    assert np.array_equal(decode_array(blob).view(np.uint32), a.view(np.uint32))
    a[5] = np.nextafter(a[5], np.float32(np.inf))  # one value off bfloat16's grid: float32 bytes
    assert "f32le_base64" in encode_array(a)
    with pytest.raises(ValueError, match="'bf16le_base64' holds 4 bytes; shape"):
        decode_array({"shape": [3], "bf16le_base64": "AAAAAA=="})


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
    # the worst input is written where it is another input, and read back as None where it is not
    assert "worst" not in doc or doc["worst"] != doc["minimal"]
    assert (fixture.worst is None) == ("worst" not in doc)
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

    # A list, not a dict: PyTorch's CPU and CUDA entries share a name and may share a finding's
    # family and property.
    committed = [(f.impl, f.family, f.property, f.minimal) for f in FIXTURES]
    named = [(k, b) for k in KERNELS for b in k.bugs if b.example]
    assert named
    for spec, bug in named:
        case = known_example(bug.example)
        matches = [m for impl, family, prop, m in committed
                   if (impl, family) == (spec.name, bug.family) and prop == (bug.property or prop)]
        assert any(all(np.array_equal(a, b, equal_nan=True)
                       for a, b in zip(m.float_arrays(), case.float_arrays(), strict=True))
                   for m in matches), bug.example


def _produced(fixture, spec) -> bool:
    """The kernel whose failure the fixture records (numpy and cuda share the textbook kernels)."""
    same_code = {fixture.backend, spec.backend} <= {"numpy", "cuda"} or fixture.backend == spec.backend
    return fixture.impl == spec.name and same_code


def _same_dloss(spec, fixture) -> bool:
    """A loss gradient's fixture replays on the kernels of its reduction, as select_fixtures
    chooses (its dloss is one number for a mean)."""
    reduction = getattr(spec.op_declaration, "reduction", None)
    return bool(select_fixtures([fixture], dtype=fixture.dtype, reduction=reduction).replays)


def _widths_allowed(spec, fixture) -> bool:
    """Every case of ``fixture`` has a width the entry's claims are hunted at (a case of rows; an
    attention case's shapes are the op's own declaration's, not the widths')."""
    return all(spec.constraints.allows(c.cols) for c in fixture.cases() if hasattr(c, "cols"))


FIXTURES = [load_fixture(path) for path in iter_fixtures(COMMITTED)]
REPLAYS = [
    pytest.param(fixture, spec, id=f"{fixture.path.stem}-{spec.name}",
                 marks=[pytest.mark.gpu] if spec.backend in GPU_BACKENDS else [])
    for fixture in FIXTURES
    for spec in KERNELS
    if spec.op == fixture.op and spec.dtype == fixture.dtype
    and (_produced(fixture, spec)
         or (fixture.family in spec.claims and spec.bug_in(fixture.family) is None
             and _widths_allowed(spec, fixture) and _same_dloss(spec, fixture)))
]



@pytest.mark.parametrize("fixture, spec", REPLAYS)
def test_committed_fixture_replays(fixture, spec) -> None:
    usable, why = kernel_status(spec)
    if not usable:
        pytest.skip(f"{spec.backend} kernel {spec.name} unusable here: {why}")
    # Widths outside the ones its claims are hunted at belong to a known bug of its own (QuACK's
    # bfloat16 norms at odd widths), whichever family met them first.
    outside = not _widths_allowed(spec, fixture)
    if _produced(fixture, spec) and (fixture.family not in spec.claims
                                     or spec.bug_in(fixture.family) is not None or outside):
        # Its own bug, judged on every property (including any it does not promise on its claims).
        found = replay(target_from_spec(spec).declared(ignore=frozenset()), fixture)
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


def test_a_loss_gradients_fixture_is_replayed_on_kernels_of_its_reduction() -> None:
    grads = [f for f in FIXTURES if f.op == "cross_entropy_backward" and f.dtype == "bfloat16"]
    mean = [f for f in grads if dloss_reduction(f) == "mean"]
    per_row = [f for f in grads if dloss_reduction(f) == "none"]
    assert mean and per_row and all(f.minimal.dloss.shape == () for f in mean)
    for reduction, kept, left in (("none", per_row, mean), ("mean", mean, per_row)):
        chosen = select_fixtures(grads, dtype="bfloat16", reduction=reduction)
        assert [f for f, _ in chosen.replays] == kept
        assert chosen.skipped_for(OTHER_REDUCTION) == left
        assert all(f"not {reduction!r}" in s.reason for s in chosen.skipped)
    assert len(select_fixtures(grads, dtype="bfloat16").replays) == len(grads)  # None: any
    # not a loss's gradient: never left out for it
    softmax = [f for f in FIXTURES if f.op == "softmax"]
    assert {dloss_reduction(f) for f in softmax} == {None}
    assert not select_fixtures(softmax, dtype="float32", reduction="mean").skipped_for(OTHER_REDUCTION)


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


def test_replay_fixtures_reports_each_fixture_and_whether_the_set_was_complete(tmp_path: Path) -> None:
    shutil.copytree(COMMITTED / "rmsnorm", tmp_path / "rmsnorm")
    (tmp_path / "rmsnorm" / "zz-damaged.json").write_text("{")
    target = target_from_callable(rmsnorm_unscaled_eps, op="rmsnorm", name="unscaled_eps")
    seen = []
    run = replay_fixtures(tmp_path, op="rmsnorm", target=target, on_result=seen.append)
    assert seen == run.replayed and len(run.replayed) == len(run.selection.replays)
    assert {f.path for f, _ in run.selection.replays} | {s.fixture.path for s in run.selection.skipped} \
        == {f.path for f in run.listing.fixtures}
    assert [u.path.name for u in run.listing.unreadable] == ["zz-damaged.json"]
    assert run.failed and all(r.finding() is not None for r in run.failed)
    assert len(run.passed) + len(run.failed) + len(run.not_judged) == len(run.replayed)
    assert not run.complete and run.not_run == () and run.stopped is None


def test_prune_fixtures_removes_only_what_the_function_passes(tmp_path: Path) -> None:
    shutil.copytree(COMMITTED / "rmsnorm", tmp_path / "rmsnorm")
    target = target_from_callable(rmsnorm_f32, op="rmsnorm", name="rmsnorm_f32")
    before = replay_fixtures(tmp_path, op="rmsnorm", target=target)
    assert before.passed  # the registry kernels' findings, which this function passes
    # Another kernel's fixtures are its findings: passing them removes none.
    own = prune_fixtures(tmp_path, op="rmsnorm", target=target)
    assert own.mine == [] and own.removed == [] and all(r.fixture.path.exists() for r in before.passed)
    # Its own fixtures it passes go: one relabelled as a finding of it (a kernel fixed in place).
    mine = before.passed[-1].fixture.path
    doc = json.loads(mine.read_text())
    doc.update(impl=target.name, backend=target.backend)
    doc.pop("source", None)
    mine.write_text(json.dumps(doc))
    own = prune_fixtures(tmp_path, op="rmsnorm", target=target)
    assert [f.path for f in own.removed] == [mine] and not mine.exists()
    before = replay_fixtures(tmp_path, op="rmsnorm", target=target)
    # Named, a kernel's fixtures the function passes go (a kernel fixed under a new name).
    kernel = before.passed[0].fixture.kernel
    theirs = [r.fixture.path for r in before.passed if r.fixture.kernel == kernel]
    dry = prune_fixtures(tmp_path, op="rmsnorm", kernel=kernel, target=target, dry_run=True)
    assert [f.path for f in dry.removed] == theirs and all(p.exists() for p in theirs)
    done = prune_fixtures(tmp_path, op="rmsnorm", kernel=kernel, target=target)
    assert [f.path for f in done.removed] == theirs and not any(p.exists() for p in theirs)
    after = replay_fixtures(tmp_path, op="rmsnorm", target=target)
    assert {r.fixture.path for r in after.passed} == {r.fixture.path for r in before.passed} - set(theirs)


def _saved_at(path: Path, when: str) -> Path:
    doc = json.loads(path.read_text())
    doc["saved"] = when
    path.write_text(json.dumps(doc))
    return path


def test_saved_examples_are_the_kernels_newest_of_each_family_and_property(tmp_path: Path) -> None:
    folder = tmp_path / "softmax"
    folder.mkdir()
    for name in ("nonfinite-1bf5c0601ca6", "nonfinite-43890b9e842d", "ordinary-c3e292b6e2a1"):
        shutil.copy(COMMITTED / "softmax" / f"{name}.json", folder)
    # Two nan_propagation findings of cuda-prod:softmaxStream (2x1025, then 2x2), one of quack's.
    wide = _saved_at(folder / "nonfinite-1bf5c0601ca6.json", "2026-03-02T10:00:00+00:00")
    narrow = _saved_at(folder / "nonfinite-43890b9e842d.json", "2026-03-01T10:00:00+00:00")
    target = replace(target_from_callable(softmax_f32, op="softmax", name="softmaxStream"),
                     backend="cuda-prod")
    found = saved_examples(tmp_path, target=target)
    assert [(p, c.x.shape) for p, c in found] == [("nan_propagation", (2, 1025))]
    assert np.array_equal(found[0][1].x, load_fixture(wide).minimal.x, equal_nan=True)
    # The newest of those the kernel can be handed: its widths, its storage type.
    narrow_target = target.declared(constraints=ShapeConstraints(max_cols=8))
    (only,) = saved_examples(tmp_path, target=narrow_target)
    assert np.array_equal(only[1].x, load_fixture(narrow).minimal.x, equal_nan=True)
    assert saved_examples(tmp_path, target=target.declared(dtype="bfloat16")) == ()
    assert saved_examples(tmp_path, target=replace(target, name="softmaxRowSafe")) == ()


def test_a_rerun_with_a_fixtures_dir_meets_the_saved_failure_on_its_first_example(
        tmp_path: Path) -> None:
    """As Hypothesis replays a test's last failure first, a hunt tries the newest fixture its
    kernel saved: another seed's re-run calls the kernel on that fixture's input first, and finds
    the same failure again."""
    from normprops.examples.planted import softmax_no_shift

    target = target_from_callable(softmax_no_shift, op="softmax")
    first = hunt_families(target, families=["overflow_logits"], fixtures_dir=tmp_path,
                          config=HuntConfig(max_examples=50, seed=0))
    saved = load_fixture(first.results[0].fixture)
    inputs: list[np.ndarray] = []

    def recorded(x: np.ndarray) -> np.ndarray:
        inputs.append(x.copy())
        return softmax_no_shift(x)

    again = hunt_families(replace(target, fn=recorded), families=["overflow_logits"],
                          fixtures_dir=tmp_path, config=HuntConfig(max_examples=50, seed=1))
    assert inputs[0].shape == saved.minimal.x.shape
    assert np.array_equal(inputs[0], saved.minimal.x, equal_nan=True)
    assert again.results[0].properties[0] == saved.property
