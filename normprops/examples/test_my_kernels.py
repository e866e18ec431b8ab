"""What a kernel author's own test file looks like: run it with

    python -m pytest normprops/examples/test_my_kernels.py --hypothesis-profile ci

(profiles from the normprops pytest plugin: ``ci`` 100 derandomized examples per family and property,
``dev`` 300, ``deep`` 10,000). Copy it next to your kernels and point it at them.
"""

from __future__ import annotations

import numpy as np
import pytest

import normprops
from normprops.examples.backward_correct import rmsnorm_backward_f32
from normprops.examples.correct import layernorm_f32, masked_softmax_online, rmsnorm_f32, softmax_f64
from normprops.examples.planted import softmax_no_shift


def test_softmax_is_robust() -> None:
    normprops.assert_robust(softmax_f64, op="softmax")


def test_layer_norm_is_robust() -> None:
    normprops.assert_robust(layernorm_f32, op="layernorm")


def rms_norm_bf16(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """A bfloat16 kernel: reads and writes ml_dtypes.bfloat16, computes in float32."""
    return rmsnorm_f32(x.astype(np.float32), gamma.astype(np.float32), eps).astype(x.dtype)


def test_bfloat16_rms_norm_is_robust() -> None:
    normprops.assert_robust(rms_norm_bf16, op="rmsnorm", dtype="bfloat16")


def test_a_kernel_with_a_width_limit() -> None:
    def softmax_vec4(x: np.ndarray) -> np.ndarray:
        if x.shape[1] % 4:
            raise ValueError("widths must be a multiple of 4")
        return softmax_f64(x)

    normprops.assert_robust(softmax_vec4, op="softmax", cols_multiple_of=4, max_cols=8192)


def test_an_attention_softmax_with_a_mask_and_a_scale() -> None:
    # fn(x, mask, scale): True in the mask takes part; here a chunked online softmax.
    normprops.assert_robust(masked_softmax_online, op="masked_softmax", families=["masked", "ordinary"])


def test_a_gradient() -> None:
    # fn(dy, x, gamma, eps) -> (dx, dgamma); dgamma summed over the rows in per-block partials,
    # declared for a sharper bound than the default (one running sum, as np.sum(axis=0) adds).
    normprops.assert_robust(rmsnorm_backward_f32, op="rmsnorm_backward", row_reduction="blocks",
                            families=["ordinary", "cancelling_dy", "tall"])


def test_the_hunt_catches_a_missing_max_shift() -> None:
    with pytest.raises(AssertionError, match="overflow_logits finite"):
        normprops.assert_robust(softmax_no_shift, op="softmax", families=["overflow_logits"])


def test_torch_rms_norm_in_bfloat16() -> None:
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def rms_norm(x, gamma, eps):
        return F.rms_norm(x, (x.shape[-1],), gamma, eps)

    # PyTorch's F.rms_norm squares in the input's precision: rows past 1.8e19 overflow, so it does
    # not promise range safety (family "huge"); hunt the rest.
    families = [f for f in normprops.families_for("rmsnorm") if f != "huge"]
    normprops.assert_robust(rms_norm, op="rmsnorm", dtype="bfloat16", framework="torch",
                            device=device, families=families)
