"""The registry's gradient entries (PyTorch's autograd on CUDA and the CPU, ``torch.compile``'s and
Liger-Kernel's backward, the numpy examples): what each declares, and that the declaration reaches
the hunt. The hunts themselves are ``pytest -m numerics`` (tests/test_numerics.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cli_harness import run

from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.kernelspec import KernelSpec
from normprops.launch import target_from_spec
from normprops.ops import ROW_REDUCTIONS, get_op, is_backward
from normprops.properties import evaluate
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS
from normprops.strategies import Drawn, Extras, families_for, make_grad_case

# The row ops' gradients (the fused loss's, of named arrays, is tested in test_linear_cross_entropy.py).
GRAD_ENTRIES = [k for k in KERNELS if is_backward(k.op) and get_op(k.op).named is None]


def test_every_gradient_op_has_pytorchs_entries_on_both_devices() -> None:
    have = {(k.backend, k.op) for k in GRAD_ENTRIES}
    for device in ("torch-cuda", "torch-cpu"):
        assert {(device, op) for op in ("softmax_backward", "rmsnorm_backward",
                                        "layernorm_backward")} <= have
    for backend in ("torch-compile", "liger"):
        assert {(backend, "rmsnorm_backward"), (backend, "layernorm_backward")} <= have
    # One entry per kernel: a name is unique within its backend.
    assert len({(k.backend, k.name) for k in GRAD_ENTRIES}) == len(GRAD_ENTRIES)


@pytest.mark.parametrize("spec", GRAD_ENTRIES, ids=lambda k: f"{k.backend}-{k.name}")
def test_a_gradient_entry_claims_families_of_its_op(spec: KernelSpec) -> None:
    families = set(families_for(spec.op))
    assert spec.claims <= families, sorted(spec.claims - families)
    assert all(bug.family in families for bug in spec.bugs)
    assert "huge" not in spec.claims  # none of these norms scales its rows
    assert callable(spec.load())
    if spec.backend == "numpy":
        # The examples (normprops.examples): numpy arrays, dgamma and dbeta summed over 32 blocks of
        # rows joined in a tree, as their declaration says.
        assert spec.framework == "numpy" and spec.device is None and spec.row_reduction == "blocks"
        return
    # Torch tensors in and out, on the backend's device; imported only when called.
    assert spec.framework == "torch" and spec.device == ("cpu" if spec.backend == "torch-cpu" else "cuda")
    # dgamma and dbeta sum the rows in an order no entry fixes for every batch size: the general
    # declaration. softmax's gradient sums no rows.
    assert spec.row_reduction == ("sequential" if get_op(spec.op).has_gamma else "blocks")


def test_every_entry_declares_a_known_row_reduction() -> None:
    assert {k.row_reduction for k in KERNELS} <= set(ROW_REDUCTIONS)
    assert {k.row_reduction for k in KERNELS if not is_backward(k.op)} == {"blocks"}


def test_the_compiled_gradients_have_the_compiled_forwards_depth() -> None:
    compiled = {k.op: k.error_model.threads for k in KERNELS if k.backend == "torch-compile"}
    assert compiled["rmsnorm_backward"] == compiled["rmsnorm"] == 2
    assert compiled["layernorm_backward"] == compiled["layernorm"] == 2


def _running_sum_entry(row_reduction: str) -> KernelSpec:
    return KernelSpec("saved_rstd", "rmsnorm_backward", "numpy",
                      "normprops.examples.backward_correct:rmsnorm_backward_saved_rstd", 3,
                      FOREIGN_ERROR_MODEL, frozenset({"tall"}), "dgamma one running sum over the rows",
                      row_reduction=row_reduction)


def test_the_row_reduction_reaches_the_target_and_its_bounds() -> None:
    """A kernel that sums dgamma row after row, on 1024 rows of the same terms (0.1 * xhat): its
    entry's declaration is what the hunt judges it by, through the registry's own target."""
    case = make_grad_case(op="rmsnorm_backward", family="tall", rows=1024, cols=4, seed=1,
                          x=Drawn("constant",
                                  {"pattern": "constant", "value": 3.0, "spike": 0.0, "position": 0}),
                          dy=Drawn("ordinary", {"loc": 0.1, "scale": 0.0}),
                          extras=Extras(gamma_kind="random", beta_kind="random", eps=None))
    declared = _running_sum_entry("sequential")
    target = registry_target(declared, "tall")
    assert target.row_reduction == "sequential" == target_from_spec(declared).row_reduction
    assert evaluate(target, case).passed
    undeclared = evaluate(registry_target(replace(declared, row_reduction="blocks"), "tall"), case)
    assert [v.property for v in undeclared.failures] == ["accuracy"]
    assert "dgamma[col" in undeclared.failures[0].message()


def _evaluate_ordinary(spec: KernelSpec):
    """``spec`` as the registry hunts it, on one ordinary case of 3 rows of 33 columns."""
    case = make_grad_case(op=spec.op, family="ordinary", rows=3, cols=33, seed=0,
                          x=Drawn("ordinary", {"loc": 0.5, "scale": 1.0, "spikes": []}),
                          dy=Drawn("ordinary", {"loc": 0.1, "scale": 1.0}),
                          extras=Extras(gamma_kind="random", beta_kind="random",
                                        eps=get_op(spec.op).default_eps))
    return evaluate(registry_target(spec, "ordinary"), case)


def test_pytorchs_cpu_gradients_run_as_registered() -> None:
    """Each torch-cpu entry, as the registry hunts it, on one ordinary case: clean."""
    pytest.importorskip("torch", reason="torch is not installed here")
    for spec in (k for k in GRAD_ENTRIES if k.backend == "torch-cpu"):
        evaluation = _evaluate_ordinary(spec)
        assert evaluation.passed, [v.message() for v in evaluation.failures]
        assert np.isfinite(evaluation.worst_ratio)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch-cuda", "torch-compile", "liger"])
def test_the_gpu_gradients_run_as_registered_and_leave_their_inputs(backend: str) -> None:
    """Each GPU entry of ``backend``, as the registry hunts it, on one ordinary case: clean, its
    inputs untouched (Liger's RMS norm backward writes dx over dy unless told not to)."""
    from normprops.specs import backend_status

    usable, why = backend_status(backend)
    if not usable:
        pytest.skip(why)
    for spec in (k for k in GRAD_ENTRIES if k.backend == backend):
        evaluation = _evaluate_ordinary(spec)
        assert evaluation.passed, [v.message() for v in evaluation.failures]


def test_a_gradient_hunt_launches_no_stress_batch() -> None:
    """Gradient targets on a GPU carry the forward's stress size, but a gradient example calls the
    kernel on its own rows only (determinism, batch invariance: at most one row more), so no
    gradient hunt launches a batch of thousands of rows."""
    from normprops.examples import backward_correct
    from normprops.launch import GPU_STRESS_ROWS, target_from_callable

    launched: list[int] = []

    def recording(dy, x, gamma, eps):
        launched.append(x.shape[0])
        return backward_correct.rmsnorm_backward_f32(dy, x, gamma, eps)

    target = replace(target_from_callable(recording, op="rmsnorm_backward"), stress_rows=GPU_STRESS_ROWS)
    case = make_grad_case(op="rmsnorm_backward", family="ordinary", rows=5, cols=16, seed=0,
                          x=Drawn("ordinary", {"loc": 0.5, "scale": 1.0, "spikes": []}),
                          dy=Drawn("ordinary", {"loc": 0.1, "scale": 1.0}),
                          extras=Extras(gamma_kind="random", beta_kind="random", eps=None))
    assert evaluate(target, case).passed
    assert len(launched) >= 3 and max(launched) <= case.rows + 1


def test_the_kernels_listing_says_how_each_gradient_sums_its_rows() -> None:
    code, out, _ = run("kernels", "--wide")
    assert code == 0
    lines = out.splitlines()
    details = {}  # each kernel's lines under its row
    for line in lines:
        if line.startswith(("F.layer_norm.backward ", "torch.softmax.backward ")):
            details[line] = []
            current = details[line]
        elif line.startswith("  ") and details:
            current.append(line)
        else:
            current = []
    layer = [d for row, d in details.items() if row.startswith("F.layer_norm.backward ")]
    assert len(layer) == 2 and all("    rows summed: sequential" in d for d in layer)
    assert not any("rows summed" in line for row, d in details.items()
                   if row.startswith("torch.softmax.backward ") for line in d)
