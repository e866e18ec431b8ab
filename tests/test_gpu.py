"""GPU tests: the launchers' validation, GPU vs numpy agreement, users' own CUDA sources, races.
Every test here needs a usable CUDA GPU and CuPy; without them they skip with the reason."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from normprops.cli import main
from normprops.specs import KERNELS

pytestmark = pytest.mark.gpu
DATA = Path(__file__).parent / "data"
F32 = np.float32


@pytest.fixture(scope="module")
def ck():
    from normprops.cuda import textbook

    return textbook


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("call, error, message", [
    (lambda ck: ck.softmaxRowSafe(np.zeros((2, 3))), TypeError, "x must be float32 but was float64"),
    (lambda ck: ck.softmaxRowSafe(np.zeros(3, F32)), ValueError,
     r"x must be 2-D \(rows, cols\) but had shape \(3,\)"),
    (lambda ck: ck.softmaxRowSafe(np.zeros((2, 0), F32)), ValueError, "at least 1 column"),
    (lambda ck: ck.softmaxRowSafe([[1.0]]), TypeError, "numpy or CuPy array but was list"),
    (lambda ck: ck.rmsNormRow(np.zeros((2, 3), F32), np.ones(4, F32), 1e-5), ValueError,
     r"gamma must have shape \(3,\) to match x's 3 columns but had shape \(4,\)"),
    (lambda ck: ck.layerNormRowTwoPass(np.zeros((2, 3), F32), np.ones(3, F32), np.ones(3), 1e-5),
     TypeError, "beta must be float32 but was float64"),
    (lambda ck: ck.rmsNormRow(np.zeros((2, 3), F32), np.ones(3, F32), float("nan")), ValueError,
     "eps must be a finite non-negative float but was nan"),
])
def test_launchers_validate_before_launching(ck, call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(ck)


def test_empty_and_non_contiguous_inputs(ck) -> None:
    import cupy

    assert ck.softmaxRowSafe(np.zeros((0, 5), F32)).shape == (0, 5)
    x = np.random.default_rng(0).standard_normal((6, 10)).astype(F32)
    view = x[::2]
    np.testing.assert_array_equal(ck.softmaxRowSafe(view), ck.softmaxRowSafe(np.ascontiguousarray(view)))
    on_device = ck.softmaxRowSafe(cupy.asarray(x))
    assert isinstance(on_device, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(on_device), ck.softmaxRowSafe(x))


@pytest.mark.parametrize("spec",
                         [k for k in KERNELS if k.backend == "cuda" and k.name != "softmaxRowNoBarrier"],
                         ids=lambda k: k.name)
def test_gpu_agrees_with_numpy_emulation(spec) -> None:
    from normprops.crosscheck import max_ulp_difference

    ulps = max_ulp_difference(spec.name)
    # Measured: softmax 4-5 ULP (expf), the norms 2 (rsqrtf); docs/performance.md.
    assert ulps <= 8, f"{spec.name}: GPU and numpy emulation differ by {ulps} ULP"


def test_rows_beyond_grid_limits_of_old_indexing(ck) -> None:
    # 70000 rows > 65535 (grid.y/z limit) and size_t offsets: the last row must be right.
    x = np.tile(np.arange(4, dtype=F32), (70_000, 1))
    out = ck.softmaxRowSafe(x)
    np.testing.assert_allclose(out[-1], np.exp(np.arange(4) - 3.0) / np.exp(np.arange(4) - 3.0).sum(),
                               rtol=1e-6)


def test_user_cuda_kernels_end_to_end(tmp_path: Path) -> None:
    source = str(DATA / "user_softmax_good.cu")
    report = tmp_path / "good.json"
    code, out, err = run_cli("hunt", "--op", "softmax", "--cuda-source", source, "--kernel", "softmax_good",
                             "--max-examples", "40", "--seed", "0", "--no-fixtures", "--json", str(report))
    assert code == 0, out + err
    assert json.loads(report.read_text())["failures"] == []
    report = tmp_path / "bad.json"
    code, out, err = run_cli("hunt", "--op", "softmax", "--cuda-source", source, "--kernel",
                             "softmax_dropped_tail", "--families", "ragged,ordinary", "--max-examples", "100",
                             "--seed", "0", "--no-fixtures", "--json", str(report))
    assert code == 1, out
    assert json.loads(report.read_text())["failures"]


@pytest.mark.parametrize("argv, message", [
    (["--cuda-source", str(DATA / "user_broken.cu"), "--kernel", "softmax_broken"], "user_broken.cu:4"),
    (["--cuda-source", str(DATA / "user_softmax_good.cu"), "--kernel", "nope"],
     "--kernel nope: not found"),
    (["--cuda-source", str(DATA / "missing.cu"), "--kernel", "k"], "no such file"),
])
def test_user_cuda_source_errors_exit_2(argv: list[str], message: str) -> None:
    code, out, err = run_cli("hunt", "--op", "softmax", *argv, "--max-examples", "5", "--no-fixtures")
    assert code == 2 and message in err, err


def test_faulting_user_kernel_is_reported_not_hung() -> None:
    # Run in a subprocess: a fault leaves the CUDA context unusable for the rest of the process.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "normprops", "hunt", "--op", "softmax", "--cuda-source",
                           str(DATA / "user_softmax_good.cu"), "--kernel", "softmax_faults",
                           "--max-examples", "5", "--no-fixtures"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "faulted" in proc.stdout and "stopped" in proc.stdout


def test_census_runs_on_the_gpu() -> None:
    code, out, _ = run_cli("census", "--backend", "cuda")
    assert code == 0
    assert "the wide row" in out and "ftz" in out


@pytest.mark.parametrize("name, hazards", [("softmaxRowNoBarrier", True), ("softmaxRowSafe", False),
                                           ("layerNormFastBf16", False), ("addRmsNormFast", False)])
def test_racecheck_flags_only_the_missing_barrier(name: str, hazards: bool) -> None:
    import re
    import shutil
    import subprocess
    import sys

    tool = shutil.which("compute-sanitizer")
    if tool is None:
        pytest.skip("compute-sanitizer not on PATH")
    script = Path(__file__).parents[1] / "tools" / "sanitize.py"
    proc = subprocess.run([tool, "--tool", "racecheck", sys.executable, str(script), "--launch", name],
                          capture_output=True, text=True, timeout=600)
    found = re.search(r"(\d+) hazards? displayed", proc.stdout + proc.stderr)
    assert found, proc.stdout[-2000:]
    assert (int(found.group(1)) > 0) == hazards


def test_our_default_build_keeps_subnormals_and_the_ftz_build_flushes() -> None:
    from normprops.cuda.build import build_flushes

    assert build_flushes("default") is False
    assert build_flushes("ftz") is True


def test_census_counts_subnormals_as_ieee_arithmetic_gives_them() -> None:
    import re

    code, out, _ = run_cli("census", "--backend", "cuda")
    assert code == 0
    counts = {label.strip(): int(sub) for label, sub in
              re.findall(r"^\s+(exact \(float64\)|softmaxRowSafe \w+)\s+normal\s+\d+\s+subnormal\s+(\d+)",
                         out, re.MULTILINE)}
    assert counts["exact (float64)"] > 0
    # expf is faithful, so a value at the subnormal boundary may land either side: within 2.
    assert abs(counts["softmaxRowSafe default"] - counts["exact (float64)"]) <= 2, out
    assert counts["softmaxRowSafe ftz"] == 0, out


def test_a_correct_range_safe_user_kernel_is_not_flagged_in_huge(tmp_path: Path) -> None:
    # It divides the row by its largest magnitude: scaled values may be subnormal, which only a
    # flushing build (CuPy's RawModule appends -ftz=true) turns into a false alarm.
    report = tmp_path / "r.json"
    code, out, err = run_cli("hunt", "--op", "rmsnorm", "--cuda-source", str(DATA / "user_held_out.cu"),
                             "--kernel", "rmsnorm_max_scaled", "--families", "huge,ordinary,ragged",
                             "--max-examples", "200", "--seed", "0", "--no-fixtures", "--json",
                             str(report))
    assert code == 0, out + err
    assert json.loads(report.read_text())["failures"] == []


def test_a_write_past_the_row_is_caught_and_described_with_the_stress_batch(tmp_path: Path) -> None:
    import subprocess
    import sys

    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "normprops", "hunt", "--op", "softmax",
                           "--cuda-source", str(DATA / "user_held_out.cu"), "--kernel",
                           "softmax_writes_past_row", "--families", "ordinary,ragged",
                           "--max-examples", "100", "--seed", "0", "--no-fixtures", "--json",
                           str(report)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    doc = json.loads(report.read_text())
    assert doc["complete"] and doc["failures"]
    assert any(f["minimal_shape"][1] % 2 == 1 for f in doc["failures"])
