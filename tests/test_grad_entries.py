"""Registry entries of gradient ops: how a kernel sums its rows reaches the hunt."""

from __future__ import annotations

from dataclasses import replace

from normprops.backward_strategies import make_grad_case
from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.kernelspec import KernelSpec
from normprops.launch import target_from_spec
from normprops.ops import ROW_REDUCTIONS, is_backward
from normprops.properties import evaluate
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS


def test_every_entry_declares_a_known_row_reduction() -> None:
    assert {k.row_reduction for k in KERNELS} <= set(ROW_REDUCTIONS)
    assert {k.row_reduction for k in KERNELS if not is_backward(k.op)} == {"blocks"}


def _running_sum_entry(row_reduction: str) -> KernelSpec:
    return KernelSpec("saved_rstd", "rmsnorm_backward", "numpy",
                      "normprops.examples.backward_correct:rmsnorm_backward_saved_rstd", 3,
                      FOREIGN_ERROR_MODEL, frozenset({"tall"}), "dgamma one running sum over the rows",
                      row_reduction=row_reduction)


def test_the_row_reduction_reaches_the_target_and_its_bounds() -> None:
    """A kernel that sums dgamma row after row, on 1024 rows of the same terms (0.1 * xhat): its
    entry's declaration is what the hunt judges it by, through the registry's own target."""
    case = make_grad_case(op="rmsnorm_backward", family="tall", rows=1024, cols=4, seed=1,
                          x_family="constant",
                          x_params={"pattern": "constant", "value": 3.0, "spike": 0.0, "position": 0},
                          dy_kind="ordinary", dy_params={"loc": 0.1, "scale": 0.0},
                          gamma_kind="random", beta_kind="random", eps=None)
    declared = _running_sum_entry("sequential")
    target = registry_target(declared, "tall")
    assert target.row_reduction == "sequential" == target_from_spec(declared).row_reduction
    assert evaluate(target, case).passed
    undeclared = evaluate(registry_target(replace(declared, row_reduction="blocks"), "tall"), case)
    assert [v.property for v in undeclared.failures] == ["accuracy"]
    assert "dgamma[col" in undeclared.failures[0].message()


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
                          x_family="ordinary", x_params={"loc": 0.5, "scale": 1.0, "spikes": []},
                          dy_kind="ordinary", dy_params={"loc": 0.1, "scale": 1.0},
                          gamma_kind="random", beta_kind="random", eps=None)
    assert evaluate(target, case).passed
    assert len(launched) >= 3 and max(launched) <= case.rows + 1
