"""tools/sweep_prod.py's --check, on the CPU: numpy stands in for CuPy (the check uses only what both
have), and the "kernels" are numpy softmaxes writing bfloat16 bits the way the device does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest


@pytest.fixture
def sweep(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "cupy", np)
    path = Path(__file__).resolve().parents[1] / "tools" / "sweep_prod.py"
    spec = importlib.util.spec_from_file_location("sweep_prod", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).view(np.uint16)


def test_check_marks_a_wrong_softmax_worse_and_a_reordered_one_not(sweep) -> None:
    rows, cols = 12, 3000
    x = _bf16_bits(np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32) * 4)
    out = np.zeros_like(x)
    wide = x.astype(np.uint32) << 16
    v = wide.view(np.float32)

    def softmax(scale: float = 1.0, order: int = 1):
        def launch() -> None:
            e = np.exp(v - v.max(axis=1, keepdims=True))
            s = e[:, ::order].sum(axis=1, keepdims=True, dtype=np.float32)
            out[:] = _bf16_bits(e / s * scale)
        return launch

    found = sweep.check_softmax({"softmax pt64p tpr32 vpt8 c2 base": softmax(),
                                 "softmax pt64p tpr32 vpt8 c2 NP_REVERSED": softmax(order=-1),
                                 "softmax pt64p tpr32 vpt8 c2 NP_OFF": softmax(scale=1.03)},
                                x, out, rows=rows, cols=cols, dtype="bfloat16")
    worse = {f["kernel"].split()[-1]: f["worse"] for f in found}
    assert worse == {"base": False, "NP_REVERSED": False, "NP_OFF": True}
    errors = {f["kernel"].split()[-1]: f["max_rel_err"] for f in found}
    assert errors["base"] <= 2.0 ** -8  # one rounding to bfloat16
    assert errors["NP_OFF"] > 0.02


def test_check_marks_nan_worse(sweep) -> None:
    x = np.random.default_rng(1).standard_normal((3, 64), dtype=np.float32)
    out = np.zeros_like(x)

    def good() -> None:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        out[:] = e / e.sum(axis=1, keepdims=True)

    def nan() -> None:
        good()
        out[1, 5] = np.nan

    found = sweep.check_softmax({"softmax base": good, "softmax NP_NAN": nan}, x, out, rows=3, cols=64,
                                dtype="float32")
    assert [f["worse"] for f in found] == [False, True]


def test_ctas_and_cluster_variants_set_the_cluster_shape(sweep, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.cuda.prod as prod
    from normprops.cuda.shape import Shape

    monkeypatch.setattr(sweep, "largest_cluster", lambda: 16)
    monkeypatch.setattr(prod, "largest_cluster", lambda: 16)
    monkeypatch.setattr(prod, "clusters_supported", lambda: True)
    monkeypatch.setattr(prod, "_device", lambda: 0)
    # the product's shape: the fewest blocks of 256 threads x 8 vectors that hold the row
    product = sweep.SweepKernel("softmax", dtype="bfloat16", defines=())
    assert product._cluster_shape(151936) == Shape(8, 256, 1, 10)
    wide = sweep.SweepKernel("softmax", dtype="bfloat16", defines=("NP_CLUSTER_PUSH", "ctas=16"))
    assert wide._cluster_shape(151936) == Shape(8, 256, 1, 16)
    assert wide._compiled == ("NP_CLUSTER_PUSH",)  # ctas= changes the launch only
    # "cluster": the cluster path where one block holds the row, at ctas=N blocks
    forced = sweep.SweepKernel("softmax", dtype="bfloat16", defines=("cluster", "ctas=2"), path="cluster")
    assert forced.shape(32000) == Shape(8, 256, 1, 2)
    too_few = sweep.SweepKernel("softmax", dtype="bfloat16", defines=("cluster", "ctas=2"), path="cluster")
    with pytest.raises(ValueError, match="cannot take 128256 columns"):
        too_few.shape(128256)
    with pytest.raises(SystemExit, match="ctas=7"):
        sweep.SweepKernel("softmax", dtype="bfloat16", defines=("ctas=7",))._cluster_shape(151936)


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="tools/candidates_on_gpu.sh is a bash script")
def test_candidates_script_runs_every_step_and_says_what_did_not_run(tmp_path: Path) -> None:
    """With a stand-in for Python that records its arguments and no compute-sanitizer on PATH: each
    step runs once with its own output file, and the script says the sanitizer steps did not run
    (exit 1)."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "$@"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub), "PATH": "/usr/bin:/bin", "CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", str(root / "tools" / "candidates_on_gpu.sh"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    steps = [line.split(":")[0] for line in lines if ": exit 0 after" in line]
    assert steps == ["vocab-bf16", "vocab-f32", "bits-shifted-wide", "bits-decode-held", "bits-decode-flat",
                     "bits-decode-cold", "odd-norms", "odd-fused", "decode-splits", "decode-splits-fused"]
    assert lines[-1] == "compute-sanitizer not on PATH: the sanitizer steps did not run"
    vocab = (tmp_path / "out" / "vocab-bf16.txt").read_text()
    assert "--check" in vocab and "--peers torch,liger,quack" in vocab and "NP_CLUSTER_PUSH+ctas=16" in vocab
    assert "--define NP_SHIFTED_WIDE" in (tmp_path / "out" / "bits-shifted-wide.txt").read_text()


def test_split_variant_chooses_the_decode_split_and_refuses_one_without_a_kernel(
        sweep, monkeypatch: pytest.MonkeyPatch) -> None:
    """"split=N" replaces the product's decode_split for the launch it makes, and only for it."""
    import normprops.cuda.prod as prod

    chosen = []

    def launcher(self, *arrays, rows, cols, eps=None, spread=True):
        chosen.append(prod.decode_split(self.shape(cols), dense=True))
        return lambda: None

    monkeypatch.setattr(prod.ProdKernel, "launcher", launcher)
    monkeypatch.setattr(prod, "_device", lambda: 0)
    product_split = prod.decode_split
    k = sweep.SweepKernel("rmsnorm", dtype="bfloat16", defines=("split=4",))
    k.shape = lambda cols: prod.launch_shape(cols, dtype="bfloat16", per_thread=64)  # no GPU to ask
    k.launcher(rows=1, cols=4096)
    assert chosen == [4] and prod.decode_split is product_split
    k.defines = ("split=8",)  # 4096 bfloat16 columns: 64 threads of 8 vectors, 8 x 64 = 512 threads
    k.launcher(rows=1, cols=4096)
    k.defines = ("split=16",)
    with pytest.raises(ValueError, match="split=16"):
        k.launcher(rows=1, cols=4096)
    k.defines = ("split=8",)
    with pytest.raises(ValueError, match="split=8"):  # 2880 columns: 96 threads of 4 vectors
        k.launcher(rows=1, cols=2880)
    assert chosen == [4, 8] and prod.decode_split is product_split


def test_candidates_script_runs_only_the_steps_asked_for(tmp_path: Path) -> None:
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "$@"\n')
    stub.chmod(0o755)
    env = {**os.environ, "PYTHON": str(stub), "PATH": "/usr/bin:/bin", "CACHE_DIR": str(tmp_path / "cache"),
           "STEPS": "vocab-f32 decode-splits"}
    proc = subprocess.run(["bash", str(root / "tools" / "candidates_on_gpu.sh"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=60)
    steps = [line.split(":")[0] for line in proc.stdout.splitlines() if ": exit" in line]
    assert steps == ["vocab-f32", "decode-splits"]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.txt")) == ["decode-splits.txt", "vocab-f32.txt"]
