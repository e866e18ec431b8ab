"""QuACK's loss functions as the tests stand them in (QuACK's CuTe DSL needs a GPU): its contract,
computed by PyTorch on the CPU, each call recorded. ``from quack_stand_in import ...`` works from
the tests' folder as ``cli_harness`` does (conftest.py says why)."""

from __future__ import annotations

import sys

import pytest

__all__ = ["quack_cross_entropy", "quack_linear_cross_entropy_func", "stand_in_quack"]


def stand_in_quack(monkeypatch: pytest.MonkeyPatch, module: str, **functions) -> list:
    """``quack.<module>`` in sys.modules holding ``functions``, each recording its calls."""
    import types

    calls: list = []
    package = types.ModuleType("quack")
    package.__path__ = []
    stand_in = types.ModuleType(f"quack.{module}")
    for name, fn in functions.items():
        setattr(stand_in, name, lambda *a, _fn=fn, **kw: _fn(calls, *a, **kw))
    monkeypatch.setitem(sys.modules, "quack", package)
    monkeypatch.setitem(sys.modules, f"quack.{module}", stand_in)
    return calls


def quack_cross_entropy(calls: list, x, target, lse_partial=None, weight=None, ignore_index=-100,
                        reduction="mean", inplace_backward=False):
    """quack.cross_entropy's contract (quack-kernels 0.6.5: its asserts, 0 on an ignored row, the
    mean over the rows not ignored, no odd row of 2-byte values: it copies rows in 4-byte pieces),
    computed by PyTorch on the CPU."""
    import torch
    import torch.nn.functional as F

    assert x.dim() == 2 and target.dim() == 1
    assert x.dtype in (torch.float16, torch.bfloat16, torch.float32)
    assert target.dtype in (torch.int32, torch.int64)
    assert lse_partial is None and weight is None and not inplace_backward
    calls.append((tuple(x.shape), str(x.dtype), ignore_index, reduction))
    if x.element_size() == 2 and x.shape[1] % 2:
        raise RuntimeError("IR verification failed: 'cp_size' only supports (32, 64, 128), but got 16")
    loss = F.cross_entropy(x.float(), target, ignore_index=ignore_index, reduction="none")
    if reduction == "mean":
        return loss.sum() / (target != ignore_index).sum().float()
    return loss.sum() if reduction == "sum" else loss


def quack_linear_cross_entropy_func(calls: list, x, weight, bias, target, ignore_index=-100,
                                    reduction="mean", inplace_backward=False):
    """quack.linear_cross_entropy.linear_cross_entropy_func: F.linear (the logits in the operands'
    type), then quack.cross_entropy's contract."""
    import torch.nn.functional as F

    assert bias is None
    return quack_cross_entropy(calls, F.linear(x, weight), target, ignore_index=ignore_index,
                               reduction=reduction, inplace_backward=inplace_backward)
