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
