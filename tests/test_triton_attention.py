"""A user's own Triton attention kernel hunted from the command line: the correct one passes, the
one with a finite sentinel for -inf (flashinfer#4267) is caught with a readable counterexample.
On a machine without a GPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``,
which Triton reads when the kernel is defined: each hunt runs in its own process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the Triton example takes torch tensors: torch is not installed")
pytest.importorskip("triton", reason="triton is not installed")


def _hunt(kernel: str, families: str, tmp_path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, "-m", "normprops", "hunt", "--op", "attention", "--framework", "torch",
         "--device", "cpu", "--impl", f"normprops.examples.triton_attention:{kernel}",
         "--families", families, "--max-examples", "8", "--seed", "0", "--no-fixtures",
         "--json", str(tmp_path / "report.json")],
        capture_output=True, text=True, env=env, timeout=600)


def test_a_correct_triton_attention_kernel_passes(tmp_path) -> None:
    done = _hunt("attention", "gqa,causal", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean: 2 families, no counterexample." in done.stdout


def test_a_finite_sentinel_in_a_triton_kernel_is_caught(tmp_path) -> None:
    done = _hunt("attention_finite_sentinel", "sentinel,fully_masked", tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "sentinel accuracy: lse[" in done.stdout
    assert "fully_masked masked_rows: out[" in done.stdout
    assert "2 of 2 families failed" in done.stdout
