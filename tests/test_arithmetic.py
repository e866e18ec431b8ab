"""Kernels that compute in bfloat16 (JAX's ops on bfloat16 arrays round every operation to bfloat16):
judged against float32 arithmetic they look inaccurate; declared, they are judged with bfloat16's
unit roundoff, and a real bug still fails."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import normprops
from normprops.errormodel import ErrorModel

BF16 = ml_dtypes.bfloat16
F32 = np.float32


def softmax_in_bfloat16(x):
    """A correct softmax whose every operation rounds to bfloat16 (as jax.nn.softmax on bf16)."""
    d = (x.astype(F32) - x.max(axis=1, keepdims=True).astype(F32)).astype(BF16)
    e = np.exp(d.astype(F32)).astype(BF16)
    s = e.astype(F32).sum(axis=1, keepdims=True).astype(BF16)  # a float32 reduction, rounded once
    return (e.astype(F32) / s.astype(F32)).astype(BF16)


def rms_norm_accumulating_in_bfloat16(x, gamma, eps):
    """Buggy whatever the arithmetic: the running sum of squares is kept in bfloat16, one column
    after another, so it stops growing once it is large (a sequential sum with no tree)."""
    acc = np.zeros((x.shape[0], 1), dtype=BF16)
    for c in range(x.shape[1]):
        acc = (acc.astype(F32) + x[:, c:c + 1].astype(F32) ** 2).astype(BF16)
    r = np.sqrt(acc.astype(F32) / F32(x.shape[1]) + F32(eps))
    return (x.astype(F32) / r * gamma.astype(F32)).astype(BF16)


def test_the_arithmetic_sets_the_unit_roundoff() -> None:
    assert ErrorModel().unit_roundoff == 2.0**-24
    assert ErrorModel(arithmetic="bfloat16").unit_roundoff == 2.0**-8
    with pytest.raises(ValueError, match="arithmetic must be 'float32' or 'bfloat16'"):
        ErrorModel(arithmetic="float8")


def test_bfloat16_arithmetic_is_flagged_as_float32_and_clean_once_declared() -> None:
    kwargs = dict(op="softmax", dtype="bfloat16", families=["ordinary", "ragged"], max_examples=60,
                  seed=0)
    as_float32 = normprops.hunt_kernel(softmax_in_bfloat16, **kwargs)
    assert {f.property for f in as_float32.failures} & {"accuracy", "ratios", "sum_to_one"}
    declared = normprops.hunt_kernel(softmax_in_bfloat16, arithmetic="bfloat16", **kwargs)
    assert declared.passed, [f.message for f in declared.failures]


def test_a_bfloat16_accumulation_bug_fails_under_bfloat16_arithmetic_too() -> None:
    report = normprops.hunt_kernel(rms_norm_accumulating_in_bfloat16, op="rmsnorm", dtype="bfloat16",
                                   arithmetic="bfloat16", families=["ordinary"], max_examples=100,
                                   seed=0)
    assert "accuracy" in {f.property for f in report.failures}


def _bf16(a):
    return np.asarray(a, F32).astype(BF16).astype(F32)


def rms_norm_backward_in_bfloat16(dy, x, gamma, eps):
    """A correct RMS norm backward whose every elementwise operation rounds to bfloat16, subnormals
    kept; sums in float32, rounded once."""
    d, v, g = dy.astype(F32), x.astype(F32), gamma.astype(F32)
    cols = F32(v.shape[1])
    with np.errstate(all="ignore"):
        ms = _bf16(_bf16(_bf16(v * v).sum(axis=1, keepdims=True, dtype=F32)) / cols)
        rstd = _bf16(F32(1) / np.sqrt(_bf16(ms + F32(eps))))
        xhat, gd = _bf16(v * rstd), _bf16(d * g[None, :])
        b = _bf16(_bf16(_bf16(gd * xhat).sum(axis=1, keepdims=True, dtype=F32)) / cols)
        dx = _bf16(rstd * _bf16(gd - _bf16(xhat * b)))
        dgamma = _bf16(_bf16(d * xhat).sum(axis=0, dtype=F32))
    return dx.astype(dy.dtype), dgamma.astype(gamma.dtype)


def test_a_bfloat16_gradient_rounds_its_subnormals_on_bfloat16s_grid() -> None:
    # In tiny, dy xhat falls below FLT_MIN, where bfloat16 rounds on a grid of 2^-133, not
    # float32's 2^-149: dgamma came out one bfloat16 subnormal (9.2e-41) off, over a floor
    # counted in float32's.
    report = normprops.hunt_kernel(rms_norm_backward_in_bfloat16, op="rmsnorm_backward",
                                   dtype="bfloat16", arithmetic="bfloat16",
                                   families=["tiny", "ordinary"], max_examples=200, seed=1)
    assert report.passed, [f.message for f in report.failures]


def test_a_gradient_bug_fails_under_bfloat16_arithmetic_too() -> None:
    from normprops.examples.backward_planted import rmsnorm_backward_no_projection

    report = normprops.hunt_kernel(rmsnorm_backward_no_projection, op="rmsnorm_backward",
                                   dtype="bfloat16", arithmetic="bfloat16", families=["ordinary"],
                                   max_examples=100, seed=0)
    assert "accuracy" in {f.property for f in report.failures}
