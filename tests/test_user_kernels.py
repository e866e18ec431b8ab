"""Hunting a user's own kernel: storage types, frameworks, width limits, per-property hunting and the
Python API (``normprops.hunt_kernel`` / ``assert_robust``)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import normprops
from normprops.cli import main
from normprops.errors import UsageError

BF16 = ml_dtypes.bfloat16


# --- user kernels ------------------------------------------------------------------------------


def rms_norm_16bit(x, gamma, eps):
    """Correct for any storage type: float32 inside, one rounding at the end (like prod.cu)."""
    x32 = x.astype(np.float32)
    scale = np.float32(2.0) ** -np.floor(np.log2(np.maximum(np.abs(x32).max(axis=1, keepdims=True),
                                                             np.float32(2.0**-126))))
    xs = x32 * scale  # exact: a power of two, the row's largest element near 1
    ms = np.mean(xs.astype(np.float64) ** 2, axis=1, keepdims=True)
    out = xs / np.sqrt(ms + np.float64(eps) * scale.astype(np.float64) ** 2) * gamma.astype(np.float64)
    return out.astype(x.dtype)


def rms_norm_bf16_accumulate(x, gamma, eps):
    """Buggy: the sum of squares is kept in bfloat16 (8 significant bits)."""
    acc = np.zeros((x.shape[0], 1), dtype=BF16)
    for c in range(x.shape[1]):
        acc = (acc.astype(np.float32) + x[:, c:c + 1].astype(np.float32) ** 2).astype(BF16)
    ms = acc.astype(np.float32) / np.float32(x.shape[1])
    return (x.astype(np.float32) / np.sqrt(ms + np.float32(eps)) * gamma.astype(np.float32)).astype(x.dtype)


def softmax_vec4(x):
    """A vectorized softmax that only takes widths in multiples of 4 (16-byte float32 vectors)."""
    assert x.shape[1] % 4 == 0, "cols must be a multiple of 4"
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def softmax_vec4_tail_bug(x):
    """Like softmax_vec4, but a width that is not a multiple of 32 drops its last vector from the
    sum (a tail the unrolled loop forgot)."""
    assert x.shape[1] % 4 == 0, "cols must be a multiple of 4"
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    kept = x.shape[1] if x.shape[1] % 32 == 0 else x.shape[1] - 4
    return (e / e[:, :kept].sum(axis=1, keepdims=True)).astype(np.float32)


def layer_norm_batch_dependent_and_inaccurate(x, gamma, beta, eps):
    """Two bugs: the mean is taken in float16 (inaccurate on large means), and the last bit depends
    on the batch size (not batch invariant)."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True).astype(np.float16).astype(np.float64)
    d = x64 - mean
    var = np.mean(d * d, axis=1, keepdims=True)
    out = (d / np.sqrt(var + eps) * gamma + beta).astype(np.float32)
    return np.nextafter(out, np.float32(np.inf)) if x.shape[0] == 1 else out


# --- storage types -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_user_function_receives_and_returns_its_type(dtype: str) -> None:
    seen = []

    def spy(x, gamma, eps):
        seen.append((x.dtype, gamma.dtype, type(eps)))
        return rms_norm_16bit(x, gamma, eps)

    report = normprops.hunt_kernel(spy, op="rmsnorm", dtype=dtype, families=["ordinary", "tiny"],
                                   max_examples=30, seed=0)
    assert report.passed, [f.message for f in report.failures]
    want = np.dtype(BF16) if dtype == "bfloat16" else np.dtype(np.float16)
    assert set(seen) == {(want, want, float)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16bit_correct_kernel_is_clean_everywhere(dtype: str) -> None:
    report = normprops.hunt_kernel(rms_norm_16bit, op="rmsnorm", dtype=dtype, max_examples=40,
                                   seed=1)
    assert report.passed, [f.message for f in report.failures]


def test_bfloat16_accumulation_is_caught() -> None:
    report = normprops.hunt_kernel(rms_norm_bf16_accumulate, op="rmsnorm", dtype="bfloat16",
                                   families=["ordinary"], max_examples=100, seed=0)
    assert not report.passed
    assert report.failures[0].property == "accuracy"
    assert report.failures[0].minimal.dtype == "bfloat16"


def test_returning_float32_from_a_bfloat16_kernel_is_a_contract_failure() -> None:
    def widens(x, gamma, eps):
        return rms_norm_16bit(x, gamma, eps).astype(np.float32)

    report = normprops.hunt_kernel(widens, op="rmsnorm", dtype="bfloat16", families=["ordinary"],
                                   max_examples=5, seed=0)
    (failure,) = report.failures
    assert failure.property == "contract"
    assert "dtype float32" in failure.message and "bfloat16" in failure.message


def test_cli_dtype_flag_and_fixture_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    report = tmp_path / "r.json"
    code = main(["hunt", "--op", "rmsnorm", "--impl", "test_user_kernels:rms_norm_bf16_accumulate",
                 "--dtype", "bfloat16", "--families", "ordinary", "--max-examples", "100",
                 "--seed", "0", "--json", str(report)], out=io.StringIO(), err=io.StringIO())
    assert code == 1
    doc = json.loads(report.read_text())
    assert doc["targets"][0]["dtype"] == "bfloat16"
    fixture = json.loads(Path(doc["failures"][0]["fixture"]).read_text())
    assert fixture["minimal"]["dtype"] == "bfloat16"
    # Replay in bfloat16: the bug is still there, the correct one passes.
    out = io.StringIO()
    assert main(["replay", "--op", "rmsnorm", "--impl", "test_user_kernels:rms_norm_bf16_accumulate",
                 "--dtype", "bfloat16"], out=out, err=io.StringIO()) == 1
    out = io.StringIO()
    assert main(["replay", "--op", "rmsnorm", "--impl", "test_user_kernels:rms_norm_16bit",
                 "--dtype", "bfloat16"], out=out, err=io.StringIO()) == 0, out.getvalue()


def test_assert_robust_names_the_replay_that_takes_its_fixtures(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)  # wherever pytest runs from, the test's folder is elsewhere

    def replay_line() -> str:
        with pytest.raises(AssertionError) as caught:
            normprops.assert_robust(rms_norm_bf16_accumulate, op="rmsnorm", dtype="bfloat16",
                                    families=["ordinary"], max_examples=100, seed=0,
                                    fixtures_dir=tmp_path, max_cols=4096)
        (line,) = [x for x in str(caught.value).splitlines() if x.startswith("replay: ")]
        return line

    monkeypatch.setenv("PYTHONPATH", "elsewhere")  # kept behind the test's folder
    assert replay_line().startswith(f"replay: PYTHONPATH={os.path.relpath(Path(__file__).parent)}"
                                    f":$PYTHONPATH normprops ")
    monkeypatch.delenv("PYTHONPATH")
    line = replay_line()
    assert line.endswith(f"--fixtures-dir {tmp_path} --dtype bfloat16 --max-cols 4096")
    # The kernel lives in this test file, which pytest imported from its own folder: the command
    # says where to import it from.
    prefix = f"replay: PYTHONPATH={os.path.relpath(Path(__file__).parent)} normprops "
    assert line.startswith(prefix), line
    argv = line.removeprefix(prefix).split()
    assert main(argv, out=io.StringIO(), err=io.StringIO()) == 1  # its fixture, replayed


def test_a_kernel_that_cannot_be_imported_by_name_is_told_so(tmp_path: Path) -> None:
    def local_softmax(x):
        e = np.exp(x)  # no max shift
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    with pytest.raises(AssertionError) as caught:
        normprops.assert_robust(local_softmax, op="softmax", families=["overflow_logits"],
                                max_examples=30, seed=0, fixtures_dir=tmp_path)
    (line,) = [x for x in str(caught.value).splitlines() if x.startswith("replay: ")]
    assert "cannot be imported by name" in line and "MODULE:FUNC" not in line, line


# --- width limits ------------------------------------------------------------------------------


def test_width_limited_kernel_is_clean_under_its_constraint() -> None:
    widths = []

    def spy(x):
        widths.append(x.shape[1])
        return softmax_vec4(x)

    report = normprops.hunt_kernel(spy, op="softmax", cols_multiple_of=4, max_cols=4096,
                                   max_examples=40, seed=0)
    assert report.passed, [f.message for f in report.failures]
    assert all(w % 4 == 0 and w <= 4096 for w in widths)
    # Ragged hunting still happens inside the constraint: a vector past a power of two, a last
    # vector alone.
    assert {4, 36} & set(widths) and any(w % 32 == 4 for w in widths)
    assert report.targets[0]["constraints"] == {"cols_multiple_of": 4, "min_cols": 1, "max_cols": 4096}


def test_a_wide_limit_narrows_the_families_and_never_widens_them() -> None:
    """A kernel that takes rows of up to 131072 columns is hunted at each family's own widths:
    `ordinary` at 16385 columns at most, as a kernel without a limit, and `long_rows` from 2^15 - 1
    up to the limit (its own range reaches 2^18 + 1). Before, the limit replaced every family's
    range, so `ordinary` drew rows of up to 131072 columns; and a limit below a family's range still
    narrows it."""
    def spy_with(widths: list[int]):
        def spy(x):
            widths.append(x.shape[1])
            return softmax_vec4(x)
        return spy

    by_family = {}
    for family in ("ordinary", "long_rows"):
        widths: list[int] = []
        report = normprops.hunt_kernel(spy_with(widths), op="softmax", families=[family],
                                       cols_multiple_of=4, max_cols=131072, max_examples=30, seed=1)
        assert report.passed, [f.message for f in report.failures]
        by_family[family] = widths
    assert max(by_family["ordinary"]) <= 16385 and min(by_family["ordinary"]) <= 64
    assert min(by_family["long_rows"]) >= 2**15 - 1 and max(by_family["long_rows"]) <= 131072
    assert max(by_family["long_rows"]) > 65536  # the limit is reached, not only the family's start
    narrow: list[int] = []
    normprops.hunt_kernel(spy_with(narrow), op="softmax", families=["long_rows"], cols_multiple_of=4,
                          max_cols=8192, max_examples=10, seed=1)
    assert narrow and max(narrow) <= 8192


def test_a_wide_limit_never_widens_a_gradients_families() -> None:
    """The same for a gradient kernel: a limit of 131072 columns leaves `ordinary` at 16385."""
    widths: list[int] = []

    def softmax_backward(dy, y):
        widths.append(y.shape[1])
        y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
        return (y64 * (dy64 - (dy64 * y64).sum(-1, keepdims=True))).astype(np.float32)

    normprops.hunt_kernel(softmax_backward, op="softmax_backward", families=["ordinary"],
                          max_cols=131072, max_examples=30, seed=1)
    assert widths and max(widths) <= 16385


def _widths_drawn(target, family: str, config) -> list[int]:
    from hypothesis import HealthCheck, given, settings

    from normprops.hunt import case_strategy

    seen: list[int] = []

    @settings(max_examples=60, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case_strategy(target, family=family, config=config))
    def draw(case) -> None:
        seen.append(case.cols)

    draw()
    return seen


def test_a_gradients_own_families_take_a_limit_too() -> None:
    """A gradient kernel's limit caps its own families as well: `tall` (64 columns at most) and
    `cancelling_dy` are drawn, not refused as families of the forward op."""
    from normprops.case import ShapeConstraints
    from normprops.hunt import HuntConfig
    from normprops.launch import target_from_callable

    target = target_from_callable(lambda dy, y: dy, op="softmax_backward",
                                  constraints=ShapeConstraints(max_cols=131072))
    assert max(_widths_drawn(target, "tall", HuntConfig())) <= 64
    assert max(_widths_drawn(target, "cancelling_dy", HuntConfig())) <= 16385


def test_the_hunts_own_widest_and_the_kernels_limit_the_smaller_wins() -> None:
    """A hunt-level max_cols (HuntConfig, the plugin's hunt_config) wider than the kernel's limit
    never draws past the limit, and a narrower one narrows the draws; a kernel of very wide vectors
    whose `ragged` edges all lie past twice its minimum is hunted up to its own limit there."""
    from normprops.case import ShapeConstraints
    from normprops.hunt import HuntConfig, check_drawable
    from normprops.launch import target_from_callable

    target = target_from_callable(lambda x: x, op="softmax", constraints=ShapeConstraints(max_cols=3000))
    assert max(_widths_drawn(target, "ordinary", HuntConfig(max_cols=8000))) <= 3000
    assert max(_widths_drawn(target, "ordinary", HuntConfig(max_cols=500))) <= 500
    # A hunt of one width draws that width (tools/bench_hunt.py's 4096 columns); a kernel that
    # takes none under the hunt's limit is hunted up to twice its minimum.
    assert set(_widths_drawn(target, "ordinary", HuntConfig(min_cols=2048, max_cols=2048))) == {2048}
    wider = target_from_callable(lambda x: x, op="softmax", constraints=ShapeConstraints(min_cols=600))
    assert {w for w in _widths_drawn(wider, "ordinary", HuntConfig(max_cols=500))} <= set(range(600, 1201))
    wide = target_from_callable(lambda x: x, op="softmax", constraints=ShapeConstraints(
        cols_multiple_of=5000, min_cols=70000, max_cols=300000))
    check_drawable(wide, family="ragged")
    assert all(70000 <= w <= 300000 and w % 5000 == 0 for w in _widths_drawn(wide, "ragged", HuntConfig()))


def test_a_family_with_no_width_in_range_is_refused_before_any_hunting() -> None:
    """From Python as from the CLI: `ragged` draws edge widths only, and none lies in [40000,
    60000], so the call is a UsageError naming the range before `ordinary` is hunted."""
    calls = []

    def spy(x):
        calls.append(x.shape)
        return softmax_vec4(x)

    with pytest.raises(UsageError, match=r"\[40000, 60000\].*leave ragged out"):
        normprops.hunt_kernel(spy, op="softmax", families=["ordinary", "ragged"], min_cols=40000,
                              max_cols=60000, max_examples=5, seed=0)
    assert calls == []


def test_width_limited_kernel_without_its_constraint_fails_the_contract() -> None:
    report = normprops.hunt_kernel(softmax_vec4, op="softmax", families=["ordinary"],
                                   max_examples=20, seed=0)
    assert report.failures[0].property == "contract"
    assert "cols must be a multiple of 4" in report.failures[0].message


def test_tail_bug_inside_the_constraint_is_caught_in_ragged() -> None:
    report = normprops.hunt_kernel(softmax_vec4_tail_bug, op="softmax", families=["ragged"],
                                   cols_multiple_of=4, max_examples=100, seed=0)
    assert not report.passed
    finding = report.failures[0]
    assert finding.family == "ragged" and finding.minimal.cols % 4 == 0
    assert finding.minimal.cols % 32 != 0


def test_cli_reports_the_constraints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    out, report = io.StringIO(), tmp_path / "r.json"
    code = main(["hunt", "--op", "softmax", "--impl", "test_user_kernels:softmax_vec4",
                 "--cols-multiple-of", "4", "--min-cols", "8", "--max-cols", "512",
                 "--families", "ragged", "--max-examples", "20", "--seed", "0", "--no-fixtures",
                 "--json", str(report)], out=out, err=io.StringIO())
    assert code == 0, out.getvalue()
    assert "widths: cols a multiple of 4, cols >= 8, cols <= 512" in out.getvalue()
    assert json.loads(report.read_text())["targets"][0]["constraints"]["min_cols"] == 8


@pytest.mark.parametrize("argv, message", [
    (["--cols-multiple-of", "8", "--min-cols", "9", "--max-cols", "15"], "--max-cols must be at least 16"),
    (["--cols-multiple-of", "0"], "expected a positive integer but got 0"),
    (["--ignore", "finite"], "'finite' cannot be ignored"),
    (["--ignore", "batch"], "'batch' is not a property"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
    (["--framework", "tensorflow"], "invalid choice: 'tensorflow'"),
    (["--device", "cuda"], "device must be 'cpu'"),
    (["--op", "rmsnorm"], "cannot be called as rmsnorm's fn(x, gamma, eps)"),  # a softmax's fn(x)
])
def test_bad_kernel_flags_are_usage_errors(argv: list[str], message: str) -> None:
    err = io.StringIO()
    code = main(["hunt", "--op", "softmax", "--impl", "normprops.examples.correct:softmax_f64", *argv],
                out=io.StringIO(), err=err)
    assert code == 2 and message in err.getvalue() and len(err.getvalue().splitlines()) == 1


def test_registry_hunt_refuses_user_only_flags() -> None:
    err = io.StringIO()
    assert main(["hunt", "--dtype", "bfloat16"], out=io.StringIO(), err=err) == 2
    assert "--dtype applies to --impl" in err.getvalue()


# --- each property hunted on its own -----------------------------------------------------------


def test_every_failing_property_is_reported_not_just_the_first() -> None:
    report = normprops.hunt_kernel(layer_norm_batch_dependent_and_inaccurate, op="layernorm",
                                   families=["large_mean"], max_examples=100, seed=0)
    props = {f.property for f in report.failures}
    assert {"accuracy", "batch_invariance"} <= props
    assert all(f.family == "large_mean" for f in report.failures)
    assert len(props) == len(report.failures)  # one entry per (family, property)


def test_ignored_property_is_neither_judged_nor_reported(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    out, report = io.StringIO(), tmp_path / "r.json"
    code = main(["hunt", "--op", "layernorm", "--impl",
                 "test_user_kernels:layer_norm_batch_dependent_and_inaccurate",
                 "--families", "ordinary,large_mean", "--ignore", "batch_invariance",
                 "--max-examples", "100", "--seed", "0", "--no-fixtures", "--json", str(report)],
                out=out, err=io.StringIO())
    assert code == 1
    doc = json.loads(report.read_text())
    found = {(f["family"], f["property"]) for f in doc["failures"]}
    assert ("large_mean", "accuracy") in found
    assert not any(p == "batch_invariance" for _, p in found)
    assert doc["targets"][0]["ignore"] == ["batch_invariance"]
    assert "not judged: batch_invariance" in out.getvalue()
    # The matrix names the failing properties per cell, and explains itself.
    assert "acc" in out.getvalue().split("legend:")[0].splitlines()[-1]
    assert "acc accuracy" in out.getvalue()


def test_json_failures_have_family_and_property(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    report = tmp_path / "r.json"
    main(["hunt", "--op", "layernorm", "--impl",
          "test_user_kernels:layer_norm_batch_dependent_and_inaccurate", "--families",
          "large_mean", "--max-examples", "100", "--seed", "0", "--no-fixtures", "--json",
          str(report)], out=io.StringIO(), err=io.StringIO())
    doc = json.loads(report.read_text())
    pairs = [(f["family"], f["property"]) for f in doc["failures"]]
    assert ("large_mean", "accuracy") in pairs and ("large_mean", "batch_invariance") in pairs
    assert len(pairs) == len(set(pairs))
    (result,) = doc["results"]
    assert set(result["properties"]) == {p for _, p in pairs}


def rms_norm_wrong_on_big_leads(x, gamma, eps):
    """Wrong (by 5%) on rows that begin with a value above 3, right on the others."""
    x64 = x.astype(np.float64)
    out = x64 / np.sqrt(np.mean(x64 ** 2, axis=1, keepdims=True) + eps) * gamma
    out[x64[:, 0] > 3] *= 1.05
    return out.astype(np.float32)


def test_a_counterexample_keeps_only_the_rows_its_failure_needs() -> None:
    """Hypothesis cannot drop a failing last row (fewer rows of one seed are a prefix of the same
    rows); the hunt then drops the rows the failure does not need itself, as data, and says which
    rows of the drawn case are left. Here only row 4 of 5 fails: 2 rows are kept (the hunt draws
    at least 2), row 4 among them, and the finding's row index is the kept case's own."""
    from dataclasses import replace

    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_callable
    from normprops.strategies import make_case

    drawn = make_case(op="rmsnorm", family="ordinary", rows=5, cols=6, seed=1,
                      params={"loc": 0.0, "scale": 1.0, "spikes": []})
    x = np.clip(drawn.x, -2.5, 2.5)
    x[4, 0] = 4.0
    case = drawn.replace(x=x)
    target = replace(target_from_callable(rms_norm_wrong_on_big_leads, op="rmsnorm"), examples=(case,))
    finding = hunt(target, family="ordinary", config=HuntConfig(max_examples=1, seed=0)).findings[0]
    assert finding.property == "accuracy"
    assert finding.minimal.rows == 2 and finding.minimal.params["rows_kept"] == [0, 4]
    assert finding.minimal.params["rows_drawn"] == 5 and finding.minimal.params["seed"] == 1
    np.testing.assert_array_equal(finding.minimal.x, x[[0, 4]])
    assert finding.verdict.row == 1
    assert "rows_kept=[0, 4], rows_drawn=5" in repr(finding.minimal)


def rms_norm_wrong_and_hanging_on_four_rows(x, gamma, eps):
    """As rms_norm_wrong_on_big_leads, but a batch of 4 rows with a lead of 4 never returns."""
    import time

    if x.shape[0] == 4 and (x[:, 0] == 4.0).any():
        while True:
            time.sleep(0.01)
    return rms_norm_wrong_on_big_leads(x, gamma, eps)


def test_a_target_that_cannot_run_again_while_rows_are_cut_stops_the_hunt() -> None:
    """A hang met while cutting a counterexample's rows is the contract finding it is, and the
    hunt stops there, as one met while hunting does; the finding cut short keeps its rows."""
    from dataclasses import replace

    from normprops.hunt import HuntConfig, hunt
    from normprops.launch import target_from_callable
    from normprops.strategies import make_case

    drawn = make_case(op="rmsnorm", family="ordinary", rows=5, cols=6, seed=1,
                      params={"loc": 0.0, "scale": 1.0, "spikes": []})
    x = np.clip(drawn.x, -2.5, 2.5)
    x[4, 0] = 4.0
    target = replace(target_from_callable(rms_norm_wrong_and_hanging_on_four_rows, op="rmsnorm",
                                          timeout_s=0.5), examples=(drawn.replace(x=x),))
    result = hunt(target, family="ordinary", config=HuntConfig(max_examples=5, seed=0))
    assert result.fatal and [f.property for f in result.findings] == ["contract", "accuracy"]
    hang, wrong = result.findings
    assert hang.minimal.rows == 4 and "did not return within 0.5 s" in hang.message
    assert hang.message.endswith("(input shape (4, 6)); hunt stopped")
    assert wrong.minimal.rows == 5


# --- the Python API ----------------------------------------------------------------------------


def test_api_is_exported_and_import_is_cheap() -> None:
    assert {"hunt_kernel", "assert_robust"} <= set(normprops.__all__)
    code = ("import sys, normprops; heavy = [m for m in ('numpy', 'hypothesis', 'cupy', 'torch', "
            "'jax', 'mpmath') if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_hunt_kernel_report() -> None:
    from normprops.examples.planted import softmax_no_shift

    report = normprops.hunt_kernel(softmax_no_shift, op="softmax", families="overflow_logits",
                                   max_examples=50, seed=0)
    assert not report.passed
    failure = report.failures[0]
    assert (failure.family, failure.property) == ("overflow_logits", "finite")
    assert "softmax[softmax_no_shift] overflow_logits finite" in failure.message
    assert failure.fixture is None  # nothing written unless fixtures_dir is given


def test_hunt_kernel_saves_fixtures_when_asked(tmp_path: Path) -> None:
    from normprops.examples.planted import softmax_no_shift

    report = normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["overflow_logits"],
                                   max_examples=50, seed=0, fixtures_dir=tmp_path)
    assert report.failures[0].fixture.is_file()
    assert report.failures[0].fixture.parent == tmp_path / "softmax"


@pytest.mark.parametrize("kwargs, message", [
    (dict(op="gelu"), "op must be one of"),
    (dict(op="softmax", dtype="float8"), "dtype must be one of"),
    (dict(op="softmax", dtype=np.float16),
     r'but was <class .numpy.float16.> \(pass its name: dtype="float16"\)'),
    (dict(op="softmax", dtype=ml_dtypes.bfloat16), r'\(pass its name: dtype="bfloat16"\)'),
    (dict(op="softmax", framework="mxnet"), "framework must be one of"),
    (dict(op="softmax", families=["eps_scale"]), "not a family of softmax"),
    (dict(op="softmax", families="ordnary"),
     r"families: 'ordnary' not a family of softmax \(did you mean 'ordinary'\?\); choose from ordinary,"),
    (dict(op="softmax", families=" , "), "families: no family named in ' , '; choose from ordinary,"),
    (dict(op="softmax", ignore=["contract"]), "'contract' cannot be ignored"),
    (dict(op="softmax", cols_multiple_of=0), "cols_multiple_of must be an integer of at least 1"),
    (dict(op="softmax", max_examples=0), "max_examples must be an integer of at least 1 but was 0"),
    (dict(op="softmax", max_examples="10"), "max_examples must be an integer of at least 1 but was '10'"),
    (dict(op="softmax", seed=1.5), r"seed must be an integer \(or None: a fresh one\) but was 1.5"),
    (dict(op="softmax", call_timeout="5"),
     r"call_timeout=\) must be a positive number of seconds but was '5'"),
    (dict(op="softmax", ftz="yes"), "ftz must be True or False but was 'yes'"),
    (dict(op="softmax", opt_in="range_sfety"), r"'range_sfety' is not a property \(did you mean"),
    (dict(op="softmax", opt_in=None), "opt_in must be a collection of property names but was None"),
    (dict(op="softmax", threads=True), "threads must be a positive integer but was True"),
    (dict(op="softmax", families=5), "families must be family names .* but was 5"),
    (dict(op="softmax", fixtures_dir=123), r"fixtures_dir must be a folder's path .* but was 123"),
    (dict(op="softmax", fixtures_dir=__file__), "fixtures_dir=.* is a file; name a directory"),
    (dict(op="softmax", fixtures_dir=""), r"fixtures_dir must be a folder's path .* but was ''"),
])
def test_hunt_kernel_argument_errors_name_the_argument(kwargs, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        normprops.hunt_kernel(softmax_vec4, **kwargs)


def test_assert_robust_passes_quietly_on_a_correct_kernel() -> None:
    from normprops.examples.correct import softmax_f64

    assert normprops.assert_robust(softmax_f64, op="softmax", families=["ordinary"],
                                   max_examples=20).passed


def test_assert_robust_in_a_users_test_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mine=textwrap.dedent('''
        import numpy as np
        import normprops

        def my_softmax(x):
            e = np.exp(x)  # forgot the max shift
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

        def test_my_softmax(tmp_path):
            normprops.assert_robust(my_softmax, op="softmax", families=["overflow_logits"],
                                    max_examples=50, fixtures_dir=tmp_path)
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hypothesis-profile", "ci")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "softmax[my_softmax] overflow_logits finite" in text
    assert "input: " in text and "x[0] = [" in text and "fixture: " in text
    assert "replay: normprops replay" in text
    # The helper's own frames are hidden: the traceback ends in the user's test.
    assert "api.py" not in text


def test_a_kernel_that_skips_its_test_skips_it(pytester: pytest.Pytester) -> None:
    """pytest.skip and importorskip end a test through a BaseException: raised in the kernel, they
    skip the test that hunts it, not fail it as a broken contract."""
    pytester.makepyfile(test_skips=textwrap.dedent('''
        import pytest
        import normprops

        def needs_a_library(x):
            pytest.importorskip("a_library_that_is_not_installed")
            return x

        def test_needs_a_library():
            normprops.assert_robust(needs_a_library, op="softmax", families=["ordinary"], max_examples=5)
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*could not import 'a_library_that_is_not_installed'*"])


def test_the_replay_command_judges_as_the_hunt_did(pytester: pytest.Pytester) -> None:
    """A finding made under a call timeout and the table policy fails again when the printed replay
    command is pasted: the command carries both."""
    pytester.makepyfile(test_slow=textwrap.dedent('''
        import time
        import numpy as np
        import normprops

        def slow_softmax(x):
            if x.shape[1] > 100:
                time.sleep(2)
            z = x.astype(np.float64)
            e = np.exp(z - z.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

        def test_slow():
            normprops.assert_robust(slow_softmax, op="softmax", families=["ragged"], max_examples=20,
                                    call_timeout=0.3, seed=1, fixtures_dir="fx")
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--normprops-policy", "table")
    result.assert_outcomes(failed=1)
    # The traceback's line (in a CI environment pytest's summary repeats the message in full).
    line = next(ln for ln in result.stdout.lines if "replay: " in ln)
    command = line.split("replay: ", 1)[1]
    assert "--call-timeout 0.3" in command and "--policy table" in command, command
    replay = subprocess.run(command, shell=True, cwd=pytester.path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(pytester.path),
                                 "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "did not return within 0.3 s" in replay.stdout


# --- frameworks --------------------------------------------------------------------------------


def test_framework_is_imported_only_when_asked() -> None:
    code = ("import sys; import normprops; from normprops.examples.correct import softmax_f64; "
            "normprops.hunt_kernel(softmax_f64, op='softmax', families=['ordinary'], max_examples=3); "
            "print([m for m in ('torch', 'jax', 'cupy') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_missing_framework_is_one_clear_usage_error() -> None:
    err = io.StringIO()
    for name in ("torch", "jax", "cupy"):
        try:
            __import__(name)
        except ImportError:
            code = main(["hunt", "--op", "softmax", "--impl", "normprops.examples.correct:softmax_f64",
                         "--framework", name], out=io.StringIO(), err=err)
            assert code == 2 and f"framework {name} is not importable here" in err.getvalue()
            return
    pytest.skip("torch, jax and cupy are all importable here")


def test_torch_bfloat16_kernel_on_the_cpu() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    def rms(x, gamma, eps):
        assert isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16
        return F.rms_norm(x.float(), (x.shape[-1],), gamma.float(), eps).to(torch.bfloat16)

    report = normprops.hunt_kernel(rms, op="rmsnorm", dtype="bfloat16", framework="torch",
                                   device="cpu", families=["ordinary", "ragged"], max_examples=30,
                                   seed=0)
    assert report.passed, [f.message for f in report.failures]
    assert report.targets[0]["device"] == "cpu"


def test_torch_wrong_dtype_is_named() -> None:
    torch = pytest.importorskip("torch")

    def softmax(x):
        return torch.softmax(x.float(), dim=-1)  # returns float32 for bfloat16 input

    report = normprops.hunt_kernel(softmax, op="softmax", dtype="bfloat16", framework="torch",
                                   device="cpu", families=["ordinary"], max_examples=3)
    assert report.failures[0].property == "contract"
    assert "torch.float32" in report.failures[0].message and "torch.bfloat16" in report.failures[0].message


def test_jax_kernel_on_the_cpu() -> None:
    jax = pytest.importorskip("jax")

    def softmax(x):
        return jax.nn.softmax(x, axis=-1)

    # XLA fuses and vectorizes by the batch's shape: a row's bits may change with the batch (one ulp
    # on an x86 CPU), and JAX does not promise otherwise.
    report = normprops.hunt_kernel(softmax, op="softmax", framework="jax", device="cpu",
                                   families=["ordinary", "overflow_logits"], max_examples=20, seed=0,
                                   ignore=["batch_invariance"])
    assert report.passed, [f.message for f in report.failures]


def test_a_raising_kernel_is_reported_with_its_own_file_and_line() -> None:
    def softmax(x):
        return x[:, [0, 10**6]]  # an index past the row: IndexError inside numpy

    report = normprops.hunt_kernel(softmax, op="softmax", families=["ordinary"], max_examples=3)
    message = report.failures[0].message
    assert "raised IndexError" in message
    assert f"{__file__}:" in message and "in softmax" in message  # this file, not numpy's


def test_findings_that_may_be_a_choice_come_with_the_flag_that_declares_it() -> None:
    def rms_norm_widths_of_8(x, gamma, eps):  # correct, but refuses widths it does not support
        if x.shape[-1] % 8:
            raise ValueError(f"width {x.shape[-1]} not supported")
        with np.errstate(all="ignore"):  # x * x in float32: not range-safe, as most norms
            ms = (x * x).mean(-1, keepdims=True, dtype=np.float64).astype(np.float32)
            return (x / np.sqrt(ms + np.float32(eps)) * gamma).astype(np.float32)

    with pytest.raises(AssertionError) as caught:
        normprops.assert_robust(rms_norm_widths_of_8, op="rmsnorm", families=["ordinary", "huge"],
                                max_examples=10, seed=0)
    # Checked: the same rows at a multiple of 8 columns run, at a multiple of 2 or 4 they raise.
    assert "--cols-multiple-of 8 (cols_multiple_of=8)" in str(caught.value)
    # Declared, the width hint goes; huge is information unless range safety is asked for, and a
    # failure then says why.
    declared = dict(op="rmsnorm", families=["huge"], cols_multiple_of=8, max_examples=10, seed=0)
    assert [f.property for f in normprops.assert_robust(rms_norm_widths_of_8, **declared).information] \
        == ["range_safety"]
    with pytest.raises(AssertionError) as caught:
        normprops.assert_robust(rms_norm_widths_of_8, opt_in=["range_safety"], **declared)
    assert "--cols-multiple-of" not in str(caught.value) and "squares overflow" in str(caught.value)


def test_replay_skips_fixtures_outside_the_widths_given(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    # Hunted before its widths were declared: a contract fixture at a width it refuses.
    assert main(["hunt", "--op", "softmax", "--impl", "test_user_kernels:softmax_vec4",
                 "--families", "ordinary", "--max-examples", "10", "--seed", "0"],
                out=io.StringIO(), err=io.StringIO()) == 1
    replay_argv = ["replay", "--op", "softmax", "--impl", "test_user_kernels:softmax_vec4"]
    assert main(replay_argv, out=io.StringIO(), err=io.StringIO()) == 1
    out = io.StringIO()  # its only fixture is of another width: nothing is left to replay
    assert main([*replay_argv, "--cols-multiple-of", "4"], out=out, err=io.StringIO()) == 5
    assert "wide, outside the widths given (cols a multiple of 4)" in out.getvalue()


def test_the_readme_lists_hunt_kernel_keywords_as_they_are() -> None:
    import inspect
    import re

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    (listed,) = re.findall(r"`hunt_kernel\((.*?)\)`", readme, flags=re.DOTALL)
    items = [item.strip() for item in listed.replace("\n", " ").split(",")]
    params = inspect.signature(normprops.hunt_kernel).parameters
    assert [i.partition("=")[0] for i in items if i != "*"] == list(params)
    for item in items:
        name, given, default = item.partition("=")
        if given:
            assert eval(default) == params[name].default, f"README: {item}, code: {params[name]}"


def test_assert_robust_shows_the_keywords_it_takes() -> None:
    import inspect

    params = inspect.signature(normprops.assert_robust).parameters
    assert list(params) == list(inspect.signature(normprops.hunt_kernel).parameters)
    assert params["op"].kind is inspect.Parameter.KEYWORD_ONLY


def test_assert_robusts_replay_line_judges_the_fixture_as_the_hunt_did(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay command in assert_robust's message carries the declarations the hunt was made
    under: run as printed, it fails the fixture the hunt saved."""
    import shlex

    from normprops import cli

    (tmp_path / "nonrangesafe.py").write_text(textwrap.dedent('''
        import numpy as np

        def rms_norm(x, gamma, eps):
            with np.errstate(all="ignore"):
                ms = (x * x).mean(axis=1, keepdims=True)
                return (x / np.sqrt(ms + np.float32(eps)) * gamma).astype(np.float32)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    from nonrangesafe import rms_norm

    with pytest.raises(AssertionError) as info:
        normprops.assert_robust(rms_norm, op="rmsnorm", families=["huge"], opt_in=["range_safety"],
                                ignore=["batch_invariance"], threads=64, max_examples=30, seed=0,
                                fixtures_dir=tmp_path / "fx")
    line = next(x for x in str(info.value).splitlines() if x.startswith("replay: "))
    argv = shlex.split(line.removeprefix("replay: "))[1:]
    assert {"--check", "range_safety", "--ignore", "batch_invariance", "--threads", "64"} <= set(argv)
    assert cli.main(argv, out=io.StringIO(), err=io.StringIO()) == cli.EXIT_FOUND


def _scales_x_in_place(x: np.ndarray) -> np.ndarray:
    x *= 2
    return np.exp(x - x.max(axis=1, keepdims=True)) / np.exp(x - x.max(axis=1, keepdims=True)).sum(
        axis=1, keepdims=True)


def test_a_kernel_that_changes_its_input_is_caught_on_the_case_and_not_reread_in_stress() -> None:
    """Every example's own call reads its inputs back (a kernel writing into x is a contract
    failure); the stress batches, copies of rows already checked, skip the read-back."""
    from normprops.errors import ContractError
    from normprops.launch import target_from_callable
    from normprops.strategies import make_case

    target = target_from_callable(_scales_x_in_place, op="softmax")
    case = make_case(op="softmax", family="ordinary", rows=2, cols=8, seed=0,
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    with pytest.raises(ContractError, match="modified its input x in place"):
        target.run(case)
    assert target.run(case, check_inputs=False).shape == (2, 8)
    result = normprops.hunt_kernel(_scales_x_in_place, op="softmax", families="ordinary",
                                   max_examples=5)
    assert not result.passed and "modified its input x in place" in str(result)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_torch_kernel_that_changes_its_input_is_caught_where_the_tensors_live(dtype: str) -> None:
    """The torch adapter compares each input with a copy taken before the call, on its device,
    in one round trip; a kernel that scales gamma in place is named, one that leaves its inputs
    alone passes."""
    pytest.importorskip("torch")
    import torch.nn.functional as F

    from normprops.errors import ContractError
    from normprops.launch import target_from_callable
    from normprops.strategies import make_case

    def scales_gamma(x, gamma, eps):
        gamma.mul_(2)
        return F.rms_norm(x.float(), (x.shape[-1],), gamma.float(), eps).to(x.dtype)

    def leaves_it(x, gamma, eps):
        return F.rms_norm(x.float(), (x.shape[-1],), gamma.float(), eps).to(x.dtype)

    case = make_case(op="rmsnorm", family="ordinary", rows=2, cols=8, seed=0, dtype=dtype,
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    bad = target_from_callable(scales_gamma, op="rmsnorm", dtype=dtype, framework="torch", device="cpu")
    with pytest.raises(ContractError, match="modified its input gamma in place"):
        bad.run(case)
    good = target_from_callable(leaves_it, op="rmsnorm", dtype=dtype, framework="torch", device="cpu")
    assert good.run(case).shape == (2, 8)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_torch_adapter_copies_the_inputs_together_and_hands_each_its_own_tensor(dtype: str) -> None:
    """The float inputs go to the device in one copy and the outputs come back in one, with the
    changed-input flags: each input is still its own tensor (not a view of another's memory) with
    the case's values, and a kernel that resizes an input in place is named."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from normprops.errors import ContractError
    from normprops.launch import target_from_callable
    from normprops.strategies import Extras, make_case

    seen = {}

    def records(x, gamma, beta, eps):
        seen.update(x=x, gamma=gamma, beta=beta)
        return F.layer_norm(x.float(), (x.shape[-1],), gamma.float(), beta.float(), eps).to(x.dtype)

    def resizes_beta(x, gamma, beta, eps):
        beta.resize_(1)
        return x.clone()

    case = make_case(op="layernorm", family="ordinary", rows=3, cols=5, seed=1, dtype=dtype,
                     extras=Extras(gamma_kind="random", beta_kind="random"),
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    target = target_from_callable(records, op="layernorm", dtype=dtype, framework="torch", device="cpu")
    out = target.run(case)
    assert out.shape == (3, 5) and out.dtype == np.float32
    for name, want in (("x", case.x), ("gamma", case.gamma), ("beta", case.beta)):
        got = seen[name]
        assert got._base is None and got.untyped_storage().nbytes() == got.numel() * got.element_size()
        assert np.array_equal(got.to(torch.float32).numpy(), want)
    assert len({seen[n].untyped_storage().data_ptr() for n in seen}) == 3
    bad = target_from_callable(resizes_beta, op="layernorm", dtype=dtype, framework="torch", device="cpu")
    with pytest.raises(ContractError, match="changed the shape of its input beta in place"):
        bad.run(case)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_torch_adapter_on_cuda_hands_over_exact_inputs_and_names_a_changed_one(dtype: str) -> None:
    """On CUDA the inputs go up in one asynchronous copy from page-locked memory: a kernel on the
    current stream reads the case's values, and one that changes gamma in place is named."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with a CUDA device")
    import torch.nn.functional as F

    from normprops.errors import ContractError
    from normprops.launch import target_from_callable
    from normprops.strategies import Extras, make_case

    seen = {}

    def records(x, gamma, eps):
        seen.update(x=x.float().cpu().numpy(), gamma=gamma.float().cpu().numpy())
        return F.rms_norm(x.float(), (x.shape[-1],), gamma.float(), eps).to(x.dtype)

    def scales_gamma(x, gamma, eps):
        gamma.mul_(2)
        return x.clone()

    case = make_case(op="rmsnorm", family="ordinary", rows=3, cols=4099, seed=2, dtype=dtype,
                     extras=Extras(gamma_kind="random"), params={"loc": 0.0, "scale": 1.0, "spikes": []})
    good = target_from_callable(records, op="rmsnorm", dtype=dtype, framework="torch", device="cuda")
    assert good.run(case).shape == (3, 4099)
    assert np.array_equal(seen["x"], case.x) and np.array_equal(seen["gamma"], case.gamma)
    bad = target_from_callable(scales_gamma, op="rmsnorm", dtype=dtype, framework="torch", device="cuda")
    with pytest.raises(ContractError, match="modified its input gamma in place"):
        bad.run(case)


def test_a_value_the_storage_type_cannot_hold_is_named_before_the_call() -> None:
    from normprops.dtypes import check_representable

    check_representable(np.array([1.0, np.nan, -0.0, 2.0**-133], np.float32), "bfloat16", name="x")
    with pytest.raises(ValueError, match=r"x\[1\] = 1\.0009765625 is not exactly representable in bfloat16"):
        check_representable(np.array([1.0, 1.0 + 2**-10], np.float32), "bfloat16", name="x")
    with pytest.raises(ValueError, match=r"gamma\[0\] = 65520\.0 is not exactly representable in float16"):
        check_representable(np.array([65520.0], np.float32), "float16", name="gamma")


def test_an_unseeded_hunt_keeps_its_seed_and_that_seed_repeats_it(dev_profile) -> None:
    from normprops.examples.planted import softmax_no_shift

    first = normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["overflow_logits", "ordinary"],
                                  max_examples=20)
    seed = first.settings["seed"]
    assert isinstance(seed, int)
    again = normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["overflow_logits", "ordinary"],
                                  max_examples=20, seed=seed)
    assert [(r.family, r.examples, r.properties) for r, _ in again.results] == \
        [(r.family, r.examples, r.properties) for r, _ in first.results]
    with pytest.raises(AssertionError, match=r"seed \d+: pass seed=\d+ to repeat this hunt"):
        normprops.assert_robust(softmax_no_shift, op="softmax", families=["overflow_logits"],
                                max_examples=20)


def test_a_derandomized_hunt_has_no_seed_and_repeats_without_one(ci_profile) -> None:
    from normprops.examples.planted import softmax_no_shift

    runs = [normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["overflow_logits", "ordinary"],
                                  max_examples=20) for _ in range(2)]
    assert [run.settings["seed"] for run in runs] == [None, None]
    with pytest.raises(AssertionError, match=r"derandomized \(a profile such as ci\): the same call repeats"):
        normprops.assert_robust(softmax_no_shift, op="softmax", families=["overflow_logits"], max_examples=20)
    assert [(r.family, r.examples, r.properties) for r, _ in runs[0].results] == \
        [(r.family, r.examples, r.properties) for r, _ in runs[1].results]


def test_a_call_timeout_as_short_as_the_call_is_a_timeout_or_a_result() -> None:
    # The alarm lands anywhere from its setting to its clearing: each landing must read as the
    # call's timeout (or the call's result), never as the alarm's own exception.
    from normprops.errors import FatalTargetError
    from normprops.launch import target_from_callable
    from normprops.strategies import make_case

    target = target_from_callable(softmax_vec4, op="softmax", timeout_s=1e-6)
    case = make_case(op="softmax", family="ordinary", rows=2, cols=8, seed=0,
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    outcomes = set()
    for _ in range(2000):
        try:
            outcomes.add(target.run(case).shape)
        except FatalTargetError as exc:
            assert "did not return within 1e-06 s" in str(exc)
            outcomes.add("timeout")
    assert outcomes <= {(2, 8), "timeout"}
    report = normprops.hunt_kernel(softmax_vec4, op="softmax", families=["ordinary"], max_examples=30,
                                   cols_multiple_of=4, call_timeout=1e-6, seed=1)
    assert all(f.property == "contract" and "did not return within" in f.message
               for f in report.failures)


def test_a_fixtures_folder_that_cannot_be_looked_at_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # As under a folder the user may not search (root here can search everything: simulated).
    real = Path.exists

    def exists(self, *args, **kwargs):
        if "locked" in self.parts:
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    with pytest.raises(UsageError, match=r"fixtures_dir='/tmp/locked/fx': cannot be looked at \(Permission"):
        normprops.hunt_kernel(softmax_vec4, op="softmax", fixtures_dir="/tmp/locked/fx")


# --- the API as a test author meets it -----------------------------------------------------------


def test_a_call_timeout_is_kept_by_default_as_on_the_command_line() -> None:
    # As --call-timeout's: a kernel that hangs stops the hunt, from Python as from the shell.
    report = normprops.hunt_kernel(softmax_vec4, op="softmax", families=["ordinary"], max_examples=5,
                                   cols_multiple_of=4, seed=0)
    assert report.targets[0]["call_timeout"] == 60.0


def test_a_call_timeout_that_cannot_be_kept_in_a_thread_says_so() -> None:
    import threading
    import warnings

    caught: list[warnings.WarningMessage] = []

    def hunt() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            # Asked for by default or not at all: nothing to say. Asked for by name: said, at the
            # caller's line, through assert_robust too.
            normprops.hunt_kernel(softmax_vec4, op="softmax", families=["ordinary"], max_examples=3,
                                  cols_multiple_of=4, seed=0)
            normprops.hunt_kernel(softmax_vec4, op="softmax", families=["ordinary"], max_examples=3,
                                  cols_multiple_of=4, seed=0, call_timeout=None)
            normprops.assert_robust(softmax_vec4, op="softmax", families=["ordinary"], max_examples=3,
                                    cols_multiple_of=4, seed=0, call_timeout=60)
        caught.extend(seen)

    thread = threading.Thread(target=hunt, name="worker-1")
    thread.start()
    thread.join()
    (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert str(warning.message).startswith(
        "call_timeout=60 cannot be kept here (the hunt runs in thread 'worker-1', not the main thread): "
        "a call of softmax_vec4 that hangs is not stopped; pass call_timeout=None")
    assert warning.filename == __file__  # at the caller's line, not in normprops


def test_a_keyword_typo_names_the_function_called_and_the_keyword_meant() -> None:
    with pytest.raises(TypeError, match=r"^assert_robust\(\) got an unexpected keyword argument "
                                        r"'max_example'; did you mean 'max_examples'\?$"):
        normprops.assert_robust(softmax_vec4, op="softmax", max_example=3)
    with pytest.raises(TypeError, match=r"^hunt_kernel\(\) got an unexpected keyword argument "
                                        r"'famlies'; did you mean 'families'\?$"):
        normprops.hunt_kernel(softmax_vec4, op="softmax", famlies=["tiny"])
    # Every parameter is a keyword, the function's too.
    assert normprops.hunt_kernel(fn=softmax_vec4, op="softmax", families=["tiny"], max_examples=3,
                                 cols_multiple_of=4, seed=0).passed


def test_an_argument_error_is_one_line_at_the_users_call(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_args=textwrap.dedent('''
        import numpy as np
        import normprops

        def softmax(x):
            return x

        def test_dtype():
            normprops.assert_robust(softmax, op="softmax", dtype="fp32")

        def test_family():
            normprops.hunt_kernel(softmax, op="softmax", families=["ordnary"])
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    assert "UsageError: dtype must be one of float32, bfloat16, float16 but was 'fp32'" in text
    assert "UsageError: families: 'ordnary' not a family of softmax" in text
    # Only the test's own lines: none of normprops' frames down to where the argument was checked.
    for frame in ("api.py", "launch.py", "frameworks.py", "def get_adapter", "def _families"):
        assert frame not in text, frame


def test_a_hunt_that_judged_nothing_is_no_pass(monkeypatch: pytest.MonkeyPatch,
                                               pytester: pytest.Pytester) -> None:
    from normprops import call_defaults
    from normprops.examples.planted import softmax_no_shift

    # Outside pytest: an AssertionError that says so (it returned as if the buggy kernel passed).
    monkeypatch.setattr(call_defaults, "_CURRENT", [call_defaults.SessionDefaults()])
    with pytest.raises(AssertionError, match="nothing judged: the time budget was spent before the "
                                             "first example"):
        normprops.assert_robust(softmax_no_shift, op="softmax", time_budget=1e-9, max_examples=20)
    # Under pytest too, with the call's own budget; the session's (--normprops-time-budget) spent
    # skips it, as it skips a hunt that would start after it.
    pytester.makepyfile(test_budget=textwrap.dedent('''
        import normprops
        from normprops.examples.planted import softmax_no_shift

        def test_budget():
            normprops.assert_robust(softmax_no_shift, op="softmax", time_budget=1e-9)
    '''))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: normprops: nothing judged: the time budget was spent "
                                 "before the first example*"])


def test_a_report_prints_as_the_command_line_does() -> None:
    from normprops.examples.planted import softmax_no_shift

    report = normprops.hunt_kernel(softmax_no_shift, op="softmax", families=["ordinary", "overflow_logits"],
                                   max_examples=20, seed=0)
    text = str(report)
    lines = text.splitlines()
    assert lines[0] == "softmax (python)" and lines[2].split() == ["softmax_no_shift", "pass", "finite"]
    assert "softmax[softmax_no_shift] overflow_logits finite: " in text and "x[0] = [" in text
    assert lines[-1].startswith("1 failure (") and len(text) < 2000


def test_families_read_alike_from_the_cli_and_the_api() -> None:
    from normprops.engine import parse_families
    from normprops.strategies import families_for

    allowed = families_for("softmax")
    assert parse_families(None, allowed=allowed, argument="families", op="softmax") == allowed
    assert parse_families(" all ", allowed=allowed, argument="--families", op="softmax") == allowed
    assert parse_families("huge, ordinary,,huge", allowed=allowed, argument="families",
                          op="softmax") == ("huge", "ordinary")
    assert parse_families(["tiny"], allowed=allowed, argument="families", op="softmax") == ("tiny",)
    with pytest.raises(ValueError, match=r"^--families: 'ordnary' not a family of softmax \(did you mean"):
        parse_families("ordnary", allowed=allowed, argument="--families", op="softmax")
