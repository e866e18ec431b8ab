"""The production kernels of prod.cu by name, and their register layout: what the launcher
(:mod:`normprops.cuda.prod`) and the registry's error bounds (:mod:`normprops.cuda.entries`) must
agree on."""

from __future__ import annotations

__all__ = ["PROD_PER_THREAD", "PROD_VARIANTS", "prod_layout"]

#: Register path: at most this many elements per thread (normprops.cuda.prod.launch_shape reads it too).
PROD_PER_THREAD = 32


def prod_layout(op: str, dtype: str) -> tuple[int, bool]:
    """(elements per thread, packed 16-bit register storage) of a production kernel, from the
    launch-shape sweeps (tools/sweep_prod.py, docs/performance.md): 16-bit values stay packed two
    per register, 64 of them per thread (twice the bytes in flight of 32, which 16-bit rows need to
    reach the copy floor); the fused kernel holds its two inputs at once while loading, so 32."""
    if dtype == "float32" or op == "rmsnormbf16acc":
        return PROD_PER_THREAD, False
    return (32 if op == "addrmsnorm" else 64), True


#: Every production kernel: name -> (prod.cu op, storage type, path). "stream" forces the
#: streaming path at any width, so the hunt reaches it with small rows.
PROD_VARIANTS: dict[str, tuple[str, str, str]] = {
    **{f"{base}{suffix}": (op, dtype, "auto")
       for base, op in (("softmaxFast", "softmax"), ("layerNormFast", "layernorm"),
                        ("rmsNormFast", "rmsnorm"), ("addRmsNormFast", "addrmsnorm"))
       for suffix, dtype in (("", "float32"), ("Bf16", "bfloat16"), ("F16", "float16"))},
    **{f"{base}Stream": (op, "float32", "stream")
       for base, op in (("softmax", "softmax"), ("layerNorm", "layernorm"), ("rmsNorm", "rmsnorm"),
                        ("addRmsNorm", "addrmsnorm"))},
    "softmaxCluster": ("softmax", "float32", "cluster"),
    "softmaxClusterBf16": ("softmax", "bfloat16", "cluster"),
    "rmsNormBf16Acc": ("rmsnormbf16acc", "bfloat16", "auto"),
}


#: The prod.cu ops with a cluster path (a row spread over the registers of several blocks).
CLUSTER_OPS = frozenset({"softmax"})
#: The prod.cu ops whose narrow-type entry points take exp as ex2.approx.ftz.f32 (expOf), a fast
#: exp that flushes subnormal results.
FAST_EXP_OPS = frozenset({"softmax"})
#: The prod.cu ops that take an eps (every one but the softmax).
EPS_OPS = frozenset({"layernorm", "rmsnorm", "rmsnormbf16acc", "addrmsnorm"})
