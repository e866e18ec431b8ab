"""FlexAttention's and jax.nn.dot_product_attention's gradients as registry entries of the
attention backward op: listed by ``normprops kernels``, declared as their source computes, a small
clean hunt of what runs on the CPU, and what each does that its declaration rests on (FlexAttention
refusing a CPU backward; its eager backward's bfloat16 group sum; JAX's fully masked rows)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import numpy as np
import pytest
from cli_harness import run
from hypothesis import given, settings

from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_spec
from normprops.ops.attention_backward import ATTENTION_BACKWARD
from normprops.ops.attention_backward_families import attention_backward_cases, with_dout
from normprops.ops.attention_families import attention_case
from normprops.properties import evaluate
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS

NEW_ENTRIES = [
    ("torch-cuda", "flex.backward-f32"), ("torch-cuda", "flex.backward-bf16"),
    ("torch-cuda", "flex-eager.backward-f32"), ("torch-cuda", "flex-eager.backward-bf16"),
    ("jax", "jax.attention.backward-f32"), ("jax", "jax.attention.backward-bf16"),
    ("jax", "jax.attention-cudnn.vjp-bf16"), ("jax", "jax.attention-cudnn.vjp-f16"),
]


def _spec(backend: str, name: str):
    return next(k for k in KERNELS if (k.backend, k.name) == (backend, name))


def _jax_on_the_cpu(name: str):
    """A JAX entry run on JAX's CPU device whatever its first device is: on a GPU its float32
    matmuls run in TF32 by default, which these entries do not claim to survive."""
    return replace(_spec("jax", name), device="cpu")


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: its attention backward entries cannot run here")


def test_the_entries_are_listed_by_normprops_kernels() -> None:
    code, out, err = run("kernels")
    assert code == 0, err
    rows = {tuple(line.split()[:3]) for line in out.splitlines() if line.strip()}
    missing = [(b, n) for b, n in NEW_ENTRIES if (n, "attention_backward", b) not in rows]
    assert not missing, f"not listed by `normprops kernels`: {missing}"


@pytest.mark.parametrize(("name", "online", "p_dtype", "group_sum"), [
    ("flex.backward-f32", True, None, None),
    ("flex.backward-bf16", True, "bfloat16", None),  # Triton: dk, dv summed over the group in float32
    ("flex-eager.backward-f32", False, None, None),
    ("flex-eager.backward-bf16", False, "bfloat16", "bfloat16"),  # repeat_interleave, torch.sum
])
def test_flex_backward_entries_are_declared_as_their_source_computes(name, online, p_dtype, group_sum):
    spec = _spec("torch-cuda", name)
    d = spec.op_declaration
    assert (d.online, d.p_dtype, d.group_sum_dtype, d.empty_row, d.min_keys) == (
        online, p_dtype, group_sum, "zero", 1), d
    assert spec.entry.startswith("normprops.backends.torch_flex:flex_")
    assert not any(k.name == name and k.backend == "torch-cpu" for k in KERNELS)


def test_flex_attention_refuses_a_backward_on_the_cpu() -> None:
    """Why the FlexAttention backward entries are CUDA only: torch refuses any backward on the CPU,
    eager or compiled. Once it stops refusing, CPU entries can be registered."""
    _needs("torch")
    import torch

    from normprops.backends.torch_flex import flex_compiled_backward, flex_eager_backward

    q = torch.ones(1, 1, 2, 8)
    for fn in (flex_eager_backward, flex_compiled_backward):
        with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
            fn(q, q, q, q, None, 0.5)


@pytest.fixture
def lifted_device_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """flex_attention's CPU refusal lifted: its eager backward (sdpa_dense_backward, the code the
    CUDA eager entry runs) then runs on the CPU."""
    _needs("torch")
    import torch.nn.attention.flex_attention as module

    monkeypatch.setattr(module, "_validate_device", lambda *args: None)


def _eager_on_the_cpu(dtype: str):
    from normprops.backends.torch_entries import flex_backward_entry

    return flex_backward_entry("cpu", "flex_eager_backward", "flex-eager.backward", dtype, False, True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", ["fully_masked", "gqa", "cancelling_dout"])
def test_flex_eager_backward_on_the_cpu_hunts_clean(lifted_device_check, dtype: str, family: str) -> None:
    spec = _eager_on_the_cpu(dtype)
    result = hunt(registry_target(spec, family), family=family,
                  config=HuntConfig(max_examples=8, seed=0, derandomize=True))
    assert result.passed, "\n".join(f.verdict.reason for f in result.findings)


def test_flex_eager_backward_needs_its_bfloat16_group_sum_declared(lifted_device_check) -> None:
    """Judged as summing a group's heads in float32, the eager bfloat16 backward is found on GQA
    (measured: 2 of 22 cases with G > 1 over the bound, err/tol up to 1.05); as declared, none."""
    import torch

    from normprops.backends.torch_flex import flex_eager_backward

    declared = _eager_on_the_cpu("bfloat16").op_declaration
    assert declared.group_sum_dtype == "bfloat16"
    as_float32 = replace(declared, group_sum_dtype=None)

    def worst(outs, case, declaration) -> float:
        exact = ATTENTION_BACKWARD.named.exact(case, declaration, "float64")
        return max(float(np.max(np.abs(np.asarray(got, np.float64) - exact.exact[name]) / exact.tol[name]))
                   for name, got in zip(("dq", "dk", "dv"), outs))

    seen: list[tuple[float, float]] = []

    @settings(max_examples=40, derandomize=True, database=None, deadline=None)
    @given(attention_backward_cases("gqa", dtypes=("bfloat16",)))
    def hunt_gqa(case) -> None:
        if case.group == 1:
            return
        args = [torch.from_numpy(a).to(torch.bfloat16) for a in (case.dout, case.q, case.k, case.v)]
        mask = None if case.mask is None else torch.from_numpy(case.mask)
        outs = [o.float().numpy() for o in flex_eager_backward(*args, mask, case.scale)]
        seen.append((worst(outs, case, as_float32), worst(outs, case, declared)))

    hunt_gqa()
    assert seen and any(plain > 1 for plain, _ in seen), seen
    assert all(ratio <= 1 for _, ratio in seen), seen


@pytest.mark.parametrize(("name", "p_dtype"), [
    ("jax.attention.backward-f32", None), ("jax.attention.backward-bf16", "bfloat16"),
    ("jax.attention-cudnn.vjp-bf16", "bfloat16"), ("jax.attention-cudnn.vjp-f16", "float16"),
])
def test_jax_backward_entries_are_declared_as_the_forward(name: str, p_dtype: str | None) -> None:
    spec = _spec("jax", name)
    forward = _spec("jax", name.replace(".backward", "").replace(".vjp", ""))
    d, f = spec.op_declaration, forward.op_declaration
    # cuDNN sums a GQA group's dk and dv in the storage type (every miss of its hunts had Hq > Hkv)
    assert d.model.ftz and d.p_dtype == p_dtype and d.group_sum_dtype == (p_dtype if ".vjp" in name else None)
    assert (d.online, d.equal_head_dims, d.head_dims_multiple_of) == (
        f.online, f.equal_head_dims, f.head_dims_multiple_of)
    # xla's claim nothing until hunted where they run (TF32 on a GPU; 16-bit); cuDNN's what its GPU
    # hunts found clean, as PyTorch's cuDNN backward claims
    want_claims = ({"cancelling_dout", "dout_scale", "gqa"} | ({"orthogonal_dout"} if p_dtype == "bfloat16"
                                                                 else set()) if ".vjp" in name else set())
    assert spec.claims == want_claims
    # cuDNN's backward takes even lengths only (JAX's check_is_flash_attention); its forward any
    assert d.lengths_multiple_of == (2 if ".vjp" in name else 1) and f.lengths_multiple_of == 1
    # cuDNN's NaN gradients (the GPU hunts): known bugs of low_lse and fully_masked, each on the
    # finite property, so a hunt reads "caught" only when a gradient is NaN.
    want = {"low_lse": "finite", "fully_masked": "finite"} if ".vjp" in name else {}
    assert {b.family: b.property for b in spec.bugs} == want
    assert all(spec.expectation(family) == "bug" for family in want)


# Families that draw no query row without a kept key (the backward's ordinary family draws causal
# bottom-right masks with Lq > Lk, whose empty rows JAX spreads over dv by design: see below).
@pytest.mark.parametrize("family", ["dout_scale", "gqa", "low_lse"])
def test_jax_xla_backward_hunts_clean(family: str) -> None:
    _needs("jax")
    spec = _jax_on_the_cpu("jax.attention.backward-f32")
    result = hunt(registry_target(spec, family), family=family,
                  config=HuntConfig(max_examples=8, seed=0, derandomize=True))
    assert result.passed, "\n".join(f.verdict.reason for f in result.findings)


def test_jax_backward_spreads_a_fully_masked_rows_dout_over_dv() -> None:
    """Why no family that draws a query row without a kept key is claimed for JAX's backward: its
    masked scores are a large finite negative, so such a row's P is uniform over every key. Its dq
    is 0 (jnp.where passes no gradient to a masked score), but its dout reaches every key's dv
    through that uniform P (dout / Lk each), where the op's contract adds nothing: the hunt finds it
    as an accuracy failure of dv."""
    _needs("jax")
    import jax

    spec = _jax_on_the_cpu("jax.attention.backward-f32")
    forward = attention_case("fully_masked", B=1, Hkv=1, group=1, Lq=2, Lk=33, D=8, seed=3,
                             dtype="float32", layout="dead_rows")
    empty = ~forward.mask[0, 0].any(axis=-1)
    assert empty.any() and not empty.all()
    case = with_dout(forward, "ordinary", {"loc": 0.0, "size": 1.0, "dout_seed": 1})
    cpu = jax.devices("cpu")[0]

    def grads(dout):
        arrays = [jax.device_put(np.asarray(a), cpu) for a in (dout, *case.args()[1:4])]
        return [np.asarray(g) for g in spec.load()(*arrays, jax.device_put(case.mask, cpu), case.scale)]

    dq, _, dv = grads(case.dout)
    assert np.all(dq[0, 0, empty] == 0)
    # dv less what the kept rows give it: the empty rows' dout over Lk, at every key
    kept_part = dv - grads(np.where(empty[None, None, :, None], np.float32(0), case.dout))[2]
    spread = case.dout[0, 0, empty].sum(axis=0) / forward.k.shape[2]
    np.testing.assert_allclose(np.asarray(kept_part)[0, 0], np.broadcast_to(spread, kept_part.shape[2:]),
                               rtol=1e-5, atol=1e-6)
    failures = evaluate(target_from_spec(spec), case, metamorphic=False).failures
    assert [(v.property, v.output) for v in failures] == [("accuracy", "dv")], failures


def _scaled_dout_case():
    """The case `dout_scale` shrank to on jax.attention.backward-f32 (CPU, seed 0): one query, 58
    keys, scores up to 100, where key 5's dS is 9.0e-38 and scale dS (scale 0.125) 1.1e-38, below
    FLT_MIN."""
    forward = attention_case("large_scores", B=1, Hkv=1, group=1, Lq=1, Lk=58, D=64, seed=0, top=100.0,
                             dtype="float32")
    return with_dout(forward, "scaled", {"exponent": 0.0, "pattern": "normal", "dout_seed": 1})


def test_a_flush_of_the_scaled_ds_is_within_the_bound() -> None:
    """A kernel that multiplies dS by the scale before its products and flushes subnormals (as XLA
    does) loses scale dS below FLT_MIN: FLT_MIN / |scale| of dS, which the bound's floor allows
    (docs/tolerances.md, "Attention backward" (d)). Emulated on the exact gradients."""
    from normprops.ops.attention_backward_math import attention_backward_reference

    case = _scaled_dout_case()
    ref = attention_backward_reference(case.dout, case.q, case.k, case.v, case.mask, case.scale)
    tiny = float(np.finfo(np.float32).tiny)
    scaled = case.scale * ref.ds
    flushed = np.where(np.abs(scaled) < tiny, 0.0, scaled)
    assert (flushed != scaled).any() and (np.abs(ref.ds[flushed != scaled]) >= tiny).any()
    outs = {"dq": flushed @ case.k.astype(np.float64),
            "dk": flushed.swapaxes(-1, -2) @ case.q.astype(np.float64), "dv": ref.dv}
    declared = _spec("jax", "jax.attention.backward-f32").op_declaration
    exact = ATTENTION_BACKWARD.named.exact(case, declared, "float64")
    ratios = {n: float(np.max(np.abs(outs[n] - exact.exact[n]) / exact.tol[n])) for n in outs}
    assert max(ratios.values()) <= 1, ratios
    assert ratios["dk"] > 0.5, ratios  # the flush is what the floor is for, not noise far below it


def test_jax_backward_passes_the_case_its_flush_failed_before() -> None:
    _needs("jax")
    spec = _jax_on_the_cpu("jax.attention.backward-f32")
    found = evaluate(target_from_spec(spec), _scaled_dout_case(), metamorphic=False)
    assert found.passed, "; ".join(v.reason or v.message for v in found.failures)
