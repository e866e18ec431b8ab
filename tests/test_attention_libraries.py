"""FlexAttention and jax.nn.dot_product_attention as registry entries of the attention op: listed by
``normprops kernels``, a small clean hunt of each CPU entry, and what each does that its
declaration rests on (a fully masked row; the compiled CPU kernel across batch sizes)."""

from __future__ import annotations

import importlib.util

import pytest
from cli_harness import run

from normprops.hunt import HuntConfig, hunt
from normprops.launch import target_from_spec
from normprops.ops.attention_families import attention_case
from normprops.properties import evaluate
from normprops.registry_hunt import registry_target
from normprops.specs import KERNELS

NEW_ENTRIES = [
    ("torch-cpu", "flex-f32"), ("torch-cpu", "flex-bf16"),
    ("torch-cpu", "flex-eager-f32"), ("torch-cpu", "flex-eager-bf16"),
    ("torch-cuda", "flex-f32"), ("torch-cuda", "flex-bf16"),
    ("torch-cuda", "flex-eager-f32"), ("torch-cuda", "flex-eager-bf16"),
    ("jax", "jax.attention-f32"), ("jax", "jax.attention-bf16"),
    ("jax", "jax.attention-cudnn-bf16"), ("jax", "jax.attention-cudnn-f16"),
]


def _spec(backend: str, name: str):
    return next(k for k in KERNELS if (k.backend, k.name) == (backend, name))


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: its attention entries cannot run here")


def test_the_entries_are_listed_by_normprops_kernels() -> None:
    code, out, err = run("kernels")
    assert code == 0, err
    rows = {tuple(line.split()[:3]) for line in out.splitlines() if line.strip()}
    missing = [(b, n) for b, n in NEW_ENTRIES if (n, "attention", b) not in rows]
    assert not missing, f"not listed by `normprops kernels`: {missing}"


def _hunt_clean(backend: str, name: str, family: str, examples: int, *, claimed: bool = True) -> None:
    spec = _spec(backend, name)
    assert not claimed or family in spec.claims, f"{spec.label} does not claim {family}"
    result = hunt(registry_target(spec, family), family=family,
                  config=HuntConfig(max_examples=examples, seed=0, derandomize=True))
    assert result.passed, "\n".join(f.verdict.reason for f in result.findings)


@pytest.mark.parametrize("name", ["flex-eager-f32", "flex-eager-bf16"])
@pytest.mark.parametrize("family", ["fully_masked", "gqa"])
def test_flex_eager_on_the_cpu_hunts_clean(name: str, family: str) -> None:
    _needs("torch")
    _hunt_clean("torch-cpu", name, family, 12)


@pytest.mark.parametrize("backend, name", [
    ("torch-cpu", "flex-eager-f32"), ("torch-cpu", "flex-eager-bf16"),
    pytest.param("torch-cuda", "flex-eager-f32", marks=pytest.mark.gpu),
    pytest.param("torch-cuda", "flex-eager-bf16", marks=pytest.mark.gpu)])
def test_flex_eager_untraced_gives_the_traced_bits(backend: str, name: str) -> None:
    """The eager entries call flex_attention's operator without its Dynamo trace (a retrace per
    size specialization made a hunt's 100 examples cost 8-25 s): out and lse must be the traced
    call's bit for bit, on cases of every family, or the gate would hunt another kernel."""
    _needs("torch")
    from dataclasses import replace

    import numpy as np
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from torch.nn.attention import flex_attention as flex_module

    from normprops.backends.torch_flex import flex_eager_traced
    from normprops.ops.attention_families import ATTENTION_FAMILIES, attention_cases

    # without the switch the entry falls back to the traced call, and this would compare it with itself
    switch = "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"
    assert hasattr(flex_module, switch), f"this torch has no {switch}"

    spec = _spec(backend, name)
    untraced = target_from_spec(spec)
    traced = replace(untraced, fn=flex_eager_traced)

    @settings(max_examples=2, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data) -> None:
        for family in ATTENTION_FAMILIES:
            case = data.draw(attention_cases(family, dtypes=(spec.dtype,)), label=family)
            if case.k.shape[2] < spec.op_declaration.min_keys:  # refused loudly by both, not hunted
                continue
            got, want = untraced.run(case), traced.run(case)
            for index, (a, b) in enumerate(zip(got, want, strict=True)):
                assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32)), (
                    f"{spec.label} {family}: output {index} untraced differs from traced [{case!r}]")

    check()


@pytest.mark.parametrize("family", ["ordinary", "gqa"])
def test_jax_xla_hunts_clean(family: str) -> None:
    _needs("jax")
    # Clean on the CPU; claimed nowhere, since on a GPU its scores run in TF32 by default.
    _hunt_clean("jax", "jax.attention-f32", family, 8, claimed=False)


def test_jax_gives_a_fully_masked_row_the_mean_of_v() -> None:
    """Why no family that draws a query row without a kept key is claimed for JAX: its masked
    scores are a large finite negative, so such a row is the mean of v over every key (neither
    zeros nor NaN), and the hunt finds it as a ``masked_rows`` failure."""
    _needs("jax")
    import numpy as np

    spec = _spec("jax", "jax.attention-f32")
    assert "fully_masked" not in spec.claims and "causal" not in spec.claims
    case = attention_case("fully_masked", B=1, Hkv=1, group=1, Lq=2, Lk=33, D=8, seed=3,
                          dtype="float32", layout="dead_rows")
    assert not case.mask.any(axis=-1).all()
    out, _ = spec.load()(*(np.asarray(a) for a in case.inputs()[:3]), case.mask, case.scale)
    empty = ~case.mask[0, 0].any(axis=-1)
    np.testing.assert_allclose(np.asarray(out)[0, 0, empty], np.broadcast_to(
        case.v[0, 0].mean(axis=0), (int(empty.sum()), case.v.shape[3])), rtol=1e-5, atol=1e-6)
    failures = evaluate(target_from_spec(spec), case, metamorphic=False).failures
    assert [v.property for v in failures] == ["masked_rows"], failures


def test_compiled_flex_on_the_cpu_across_batch_sizes() -> None:
    """torch.compile(flex_attention) on the CPU, one query row fully masked, at B = 1 and then B = 2:
    without the batch size kept static the second call fails to compile (Inductor's C++ template,
    'cur_kvSplitSize3' was not declared; torch 2.13). Both must pass, the empty row all zeros."""
    _needs("torch")
    spec = _spec("torch-cpu", "flex-f32")
    target = target_from_spec(spec)
    for b in (1, 2):
        case = attention_case("fully_masked", B=b, Hkv=1, group=2, Lq=3, Lk=33, D=16, seed=b,
                              dtype="float32", layout="dead_rows")
        found = evaluate(target, case, metamorphic=False)
        assert found.passed, f"B={b}: " + "; ".join(v.reason for v in found.failures)


def test_cudnn_entries_live_on_the_gpu_and_claim_what_was_hunted_clean() -> None:
    """cuDNN's attention runs only on a GPU: its entries say so (device "cuda"), the xla ones run
    wherever JAX does. They claim the families hunted clean at 300 examples, seeds 0 and 1 on an
    H100 (docs/ecosystem.md), none that draws a query row with no kept key."""
    clean = {"ordinary", "large_scores", "sentinel", "gqa", "cancelling_v", "ragged", "extreme_lse",
             "head_dims", "outlier_key", "strided"}
    bf16, f16 = _spec("jax", "jax.attention-cudnn-bf16"), _spec("jax", "jax.attention-cudnn-f16")
    assert (bf16.device, f16.device) == ("cuda", "cuda")
    assert bf16.claims == clean and f16.claims == clean
    assert not (bf16.claims | f16.claims) & {"fully_masked", "causal", "sliding_window", "decode"}
    for name in ("jax.attention-f32", "jax.attention-bf16"):
        assert _spec("jax", name).device is None
    for name in ("jax.attention-cudnn.vjp-bf16", "jax.attention-cudnn.vjp-f16"):
        assert _spec("jax", name).device == "cuda"


@pytest.mark.parametrize("gpu", [False, True], ids=["no-gpu", "gpu"])
def test_an_entry_that_needs_a_gpu_is_skipped_where_jax_sees_none(gpu: bool, monkeypatch) -> None:
    """Where JAX sees no GPU, cuDNN's entries are not usable (kernel_status says why), `normprops
    kernels` names them under the jax backend, and a registry hunt skips them in one line (exit 2
    when nothing usable is left); where it sees one, they are usable like any other entry."""
    _needs("jax")
    from normprops.backends import ecosystem
    from normprops.specs import kernel_status

    seen = "jax 0.0 on NVIDIA H200" if gpu else "jax 0.0 sees none here (its devices: cpu)"
    monkeypatch.setattr(ecosystem, "jax_gpu_status", lambda: (gpu, seen))
    cudnn = _spec("jax", "jax.attention-cudnn-bf16")
    usable, why = kernel_status(cudnn)
    assert usable == gpu
    assert gpu or why == "needs a CUDA GPU; jax 0.0 sees none here (its devices: cpu)"
    assert kernel_status(_spec("jax", "jax.attention-f32"))[0]  # xla runs wherever JAX does
    code, out, err = run("kernels")
    assert code == 0, err
    # (other entries may be unusable here for their own reasons: optax's where it is not installed)
    listed = [line for line in out.splitlines() if line.startswith("  not usable here: ") and "cudnn" in line]
    assert bool(listed) != gpu
    assert gpu or (listed[0].startswith("  not usable here: jax.attention-cudnn-bf16, ")
                   and listed[0].endswith(f"({why})") and "jax.attention-f32" not in listed[0])
    if gpu:
        return  # a hunt of cuDNN's entries needs the GPU this test pretends to have
    code, out, err = run("hunt", "--backend", "jax", "--kernel", "jax.attention-cudnn-bf16")
    assert code == 2 and out == ""
    assert "--kernel jax.attention-cudnn-bf16: not usable here (needs a CUDA GPU; " in err
    code, out, err = run("hunt", "--backend", "jax", "--op", "attention", "--families", "sentinel",
                         "--max-examples", "2", "--seed", "0", "--no-fixtures")
    assert code == 0, out + err
    skipped = [line for line in out.splitlines() if "not usable here, not hunted" in line]
    assert skipped == [f"  not usable here, not hunted: jax.attention-cudnn-bf16, "
                       f"jax.attention-cudnn-f16 ({why})"]
    assert "jax.attention-f32 x sentinel" in err and "cudnn" not in err
