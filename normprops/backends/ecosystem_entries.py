"""The registry's entries for other projects' kernels (:mod:`normprops.backends.ecosystem`), and
what the hunt found in them."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib.resources import files

from normprops.backends.peers import get_peer_op
from normprops.case import ShapeConstraints
from normprops.dtypes import get_dtype
from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.kernelspec import NORM_FAMILIES, SOFTMAX_FAMILIES, KernelSpec, KnownBug
from normprops.ops import get_op

__all__ = ["ECOSYSTEM_KERNELS", "ECOSYSTEM_GRAD_KERNELS"]

# Other projects' kernels (normprops/backends/ecosystem.py), present when the library imports. What
# each promises, as its documentation or source says: none promises batch invariance, so none is
# judged on it; none of the norms scales its rows, so none claims "huge" (range safety); Flax's
# LayerNorm defaults to use_fast_variance=True ("faster, but less numerically stable": E[x^2] -
# E[x]^2) and jax.nn.standardize computes E[x^2] - E[x]^2 (its source says so; both clamp it at
# 0). Its error grows like kappa^2 u (kappa = mean|x| / sqrt(var + eps)), not like kappa u, so
# their entries declare variance="one_pass" and are judged with the bound of that formula
# (docs/tolerances.md); under the two-pass bound they failed every family that draws rows of
# moderate kappa (docs/ecosystem.md, findings 6, 7 and 14).
_NOT_PROMISED = frozenset({"batch_invariance"})
_ONE_PASS_VARIANCE = ("jax.nn.standardize", "flax.LayerNorm")  # E[x^2] - E[x]^2
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
_ECOSYSTEM_OPS: tuple[tuple[str, str, str, str, frozenset[str], str], ...] = (
    # backend, entry op, user op, name, claims, how it computes
    ("torch-compile", "softmax", "softmax", "compiled.softmax", SOFTMAX_FAMILIES,
     "torch.compile(dynamic=True) of torch.softmax (Inductor's generated Triton kernel)"),
    ("torch-compile", "layernorm", "layernorm", "compiled.layer_norm", NORM_FAMILIES - {"huge"},
     "torch.compile(dynamic=True) of F.layer_norm"),
    ("torch-compile", "rmsnorm", "rmsnorm", "compiled.rms_norm", NORM_FAMILIES - {"huge"},
     "torch.compile(dynamic=True) of F.rms_norm"),
    ("liger", "softmax", "softmax", "liger.softmax", SOFTMAX_FAMILIES,
     "Liger-Kernel's Triton softmax (float32 inside)"),
    ("liger", "layernorm", "layernorm", "liger.layer_norm", NORM_FAMILIES - {"huge"},
     "Liger-Kernel's Triton layer norm (float32 statistics)"),
    ("liger", "rmsnorm", "rmsnorm", "liger.rms_norm", NORM_FAMILIES - {"huge"},
     "Liger-Kernel's Triton RMS norm, casting mode 'gemma' (float32 inside)"),
    ("liger", "addrmsnorm", "rmsnorm", "liger.fused_add_rms_norm", NORM_FAMILIES - {"huge"},
     "Liger-Kernel's fused add + RMS norm, hunted as rms_norm(x) on an exact split x = a + b"),
    ("quack", "softmax", "softmax", "quack.softmax", SOFTMAX_FAMILIES,
     "QuACK's CuTe DSL online softmax (float32 inside)"),
    ("quack", "layernorm", "layernorm", "quack.layernorm", NORM_FAMILIES - {"huge"},
     "QuACK's CuTe DSL layer norm (float32 gamma and beta)"),
    ("quack", "rmsnorm", "rmsnorm", "quack.rmsnorm", NORM_FAMILIES - {"huge"},
     "QuACK's CuTe DSL RMS norm"),
    ("quack", "addrmsnorm", "rmsnorm", "quack.rmsnorm+residual", NORM_FAMILIES - {"huge"},
     "QuACK's rmsnorm with a residual, hunted as rms_norm(x) on an exact split x = a + b"),
    ("jax", "softmax", "softmax", "jax.nn.softmax", SOFTMAX_FAMILIES,
     "jax.jit of jax.nn.softmax(x, axis=-1)"),
    ("jax", "layernorm", "layernorm", "jax.nn.standardize", NORM_FAMILIES - {"huge"},
     "jax.jit of jax.nn.standardize(x, epsilon=eps) * gamma + beta (variance as E[x^2] - E[x]^2)"),
    ("flax", "layernorm", "layernorm", "flax.LayerNorm", NORM_FAMILIES - {"huge"},
     "jax.jit of flax.linen.LayerNorm with its defaults (use_fast_variance=True)"),
    ("flax", "rmsnorm", "rmsnorm", "flax.RMSNorm", NORM_FAMILIES - {"huge"},
     "jax.jit of flax.linen.RMSNorm with its defaults"),
)


def _ecosystem(backend: str, entry_op: str, op: str, name: str, claims: frozenset[str],
               summary: str, dtype: str) -> KernelSpec:
    framework = "jax" if backend in ("jax", "flax") else "torch"
    constraints = ShapeConstraints()
    if backend in ("liger", "quack"):
        # The widths the library takes, as normprops.backends.peers records them: QuACK's softmax
        # loads 16-byte vectors, Liger's launchers refuse rows wider than 65536 columns (declared,
        # so `long_rows` draws up to that width rather than meeting the refusal).
        peer = get_peer_op(backend, entry_op)
        vector = max(1, peer.col_align_bytes // get_dtype(dtype).itemsize)
        constraints = ShapeConstraints(cols_multiple_of=vector, max_cols=peer.max_cols)
    # JAX computes jax.nn's ops in the arrays' own type (its type promotion rules): on bfloat16
    # arrays every exp, sum and division rounds to bfloat16. Flax's norms take their statistics
    # in float32, as torch and the CUDA libraries do.
    model = FOREIGN_ERROR_MODEL
    if name in _ONE_PASS_VARIANCE:
        model = replace(model, variance="one_pass")
    if backend == "jax" and dtype == "bfloat16":
        model = replace(model, arithmetic="bfloat16")
    if framework == "jax":
        # XLA does not promise subnormals: on the CPU it sets flush-to-zero and denormals-are-zero
        # (JAX's "sharp bits"; measured, jax.jit(lambda x: x + x) of 1.05e-38 gives 0 in float32
        # and bfloat16), and TPUs and some GPUs flush too. jax.nn.standardize in bfloat16 failed
        # `tiny` by flushing a subnormal input: [6.39e-38, 1.05e-38] standardized as if the second
        # were 0 (err/tol 1.7 on the CPU; the same cell failed once on an H200). Judged as flushing.
        model = replace(model, ftz=True)
    if backend == "torch-compile":
        # Inductor's looped reduction: R0_BLOCK lanes each add every R0_BLOCK-th element in turn,
        # then tl.sum folds the lanes. With dynamic=True the block is tuned once, for the size hint
        # of the first shape compiled, and kept for every later width; a process whose first rows
        # are narrow (a hunt's always are) gets R0_BLOCK = 2, so a row of 16385 is two sequential
        # sums of 8193 (the compiled RMS norm's outputs on constant rows match that emulation to
        # 1 ulp at 257-16385 columns, 148-302 ulps from the exact result). T = 2 describes it.
        model = replace(model, threads=2)
    module = "normprops.backends.ecosystem"
    return KernelSpec(f"{name}-{_SHORT[dtype]}", op, backend,
                      f"{module}:{backend.replace('-', '_')}__{entry_op}", 2, model,
                      claims, summary, exempt=_NOT_PROMISED, bench=False, dtype=dtype,
                      framework=framework, device="cuda" if framework == "torch" else None,
                      constraints=constraints)


def _findings() -> tuple[dict[str, tuple[KnownBug, ...]], dict[str, ShapeConstraints]]:
    """What the hunt found in these kernels, as data (ecosystem_findings.json, beside this module;
    docs/ecosystem.md has a reproducer for each): the known bugs of each entry, and the widths its
    claims are hunted at where a bug takes some away (each bug is still hunted at every width)."""
    doc = json.loads(files("normprops.backends").joinpath("ecosystem_findings.json").read_text())
    found: dict[str, tuple[KnownBug, ...]] = {}
    for row in doc["known_bugs"]:
        fields = {k: v for k, v in row.items() if k != "kernel"}
        found[row["kernel"]] = (*found.get(row["kernel"], ()), KnownBug(**fields))
    widths = {name: ShapeConstraints(**w) for name, w in doc["claims_widths"].items()}
    return found, widths


_FOUND, _AROUND_BUGS = _findings()


def _with_findings(spec: KernelSpec) -> KernelSpec:
    if spec.name not in _FOUND:
        return spec
    if spec.name not in _AROUND_BUGS:
        return replace(spec, bugs=_FOUND[spec.name])
    return replace(spec, bugs=_FOUND[spec.name], constraints=_AROUND_BUGS[spec.name],
                   bug_widths=spec.constraints)


ECOSYSTEM_KERNELS: tuple[KernelSpec, ...] = tuple(
    _with_findings(_ecosystem(*row, dtype=dtype))
    for row in _ECOSYSTEM_OPS for dtype in ("float32", "bfloat16"))


# Gradients (normprops.backends.grads, torch CUDA tensors in and out), float32: the backward of
# torch.compile(dynamic=True) of F.rms_norm and F.layer_norm (the registry's compiled forwards, run
# by autograd: the backward kernels Inductor generates with them) and of Liger's Triton autograd
# Functions. Neither promises batch invariance; neither norm is range-safe, so none claims 'huge'.
# The compiled ones are Inductor's looped reductions, tuned once for the first shape compiled, as
# the forwards' are: T = 2. dgamma and dbeta are sums over the rows in an order none of them fixes
# for every batch size (Liger: each of the GPU's multiprocessors adds its share of the rows in turn
# into a partial, then torch.sum folds the partials; Inductor: a reduction over the rows tuned like
# the others), so each declares "sequential", which bounds every order.
_GRAD_OPS: tuple[tuple[str, str, str, str], ...] = (
    # backend, op, name, entry point in normprops.backends.grads
    ("torch-compile", "rmsnorm_backward", "compiled.rms_norm.backward", "compiled_rmsnorm_backward"),
    ("torch-compile", "layernorm_backward", "compiled.layer_norm.backward", "compiled_layernorm_backward"),
    ("liger", "rmsnorm_backward", "liger.rms_norm.backward", "liger_rmsnorm_backward"),
    ("liger", "layernorm_backward", "liger.layer_norm.backward", "liger_layernorm_backward"),
)


def _grad_entry(backend: str, op: str, name: str, attr: str) -> KernelSpec:
    model = replace(FOREIGN_ERROR_MODEL, threads=2) if backend == "torch-compile" else FOREIGN_ERROR_MODEL
    claims = frozenset(get_op(op).families or ()) - {"huge"}
    return KernelSpec(f"{name}-f32", op, backend, f"normprops.backends.grads:{attr}", 3, model, claims,
                      f"the backward of {name.removesuffix('.backward')}, by autograd",
                      exempt=_NOT_PROMISED, bench=False, framework="torch", device="cuda",
                      row_reduction="sequential")


ECOSYSTEM_GRAD_KERNELS: tuple[KernelSpec, ...] = tuple(_with_findings(_grad_entry(*row)) for row in _GRAD_OPS)


# jax.nn.dot_product_attention (normprops.backends.ecosystem, `_jax_attention`), under jax.jit on
# JAX's first device, as the attention op. What its source and a probe on the CPU (jax 0.10.2) say:
# - xla: the scores in float32 (preferred_element_type; 16-bit inputs through BF16_BF16_F32 /
#   F16_F16_F32), a full softmax in float32, P cast to the storage type before P.V: a plain (not
#   online) softmax, P rounded in 16-bit storage. v must have k's shape (Dv = D: declared, a drawn
#   case's narrower head dim widened with zero columns). A query row with no kept key is the mean
#   of v over every key (masked scores are a large finite negative, not -inf): neither zeros nor
#   NaN, so no family that draws such rows (fully_masked; causal and sliding_window, whose
#   bottom-right masks leave the first Lq - Lk rows empty; decode, whose empty kv caches keep no
#   key) is claimed. The lse is returned for float32 only (JAX rounds it
#   to the storage type).
# - xla in bfloat16 under jax.jit on the CPU: small calls fail to compile ("Algorithm not supported
#   by the ElementalIrEmitter: ALG_DOT_BF16_BF16_F32", at B=1, Lq=Lk=1, H=8 but not at B=2, 16
#   queries and keys, 4 heads of 64; jax 0.10.2). JAX asks for that dot algorithm inside a
#   try/except that falls back to the default precision, but under jit the error comes when XLA
#   compiles, after the except has passed. A contract failure on every family's first small case,
#   so the bfloat16 entry claims nothing; on the GPU its outputs look as if the scores were
#   rounded to bfloat16, which JAX's source does not ask for (below: a bug of JAX's GPU path, not
#   yet a known bug of the entry).
# - cudnn: cuDNN's fused attention, GPU only, 16-bit storage only; declared as cuDNN's SDPA backend
#   is (head dims a multiple of 8); a row with no kept key is the mean of v, as xla's.
_JAX_ATTENTION_UNCLAIMED = frozenset({"fully_masked", "causal", "sliding_window", "decode"})


def _jax_attention_entry(implementation: str, dtype: str, claims: frozenset[str]) -> KernelSpec:
    from normprops.ops.attention import FOREIGN_ATTENTION, AttentionDeclaration
    from normprops.ops.attention_math import COMPILED_SHAPE_POOL

    cudnn = implementation == "cudnn"
    model = replace(FOREIGN_ATTENTION.model, ftz=True)  # XLA flushes subnormals, as for softmax
    declared = AttentionDeclaration(model, online=cudnn,
                                    p_dtype=None if dtype == "float32" else dtype,
                                    returns_lse=dtype == "float32", equal_head_dims=True,
                                    head_dims_multiple_of=8 if cudnn else 1,
                                    # jax.jit compiles every new shape
                                    shape_pool=COMPILED_SHAPE_POOL)
    unclaimable = sorted(claims & _JAX_ATTENTION_UNCLAIMED)
    if unclaimable:
        raise ValueError(f"claims must leave out the families that draw a query row with no kept "
                         f"key (JAX gives it the mean of v) but named {', '.join(unclaimable)}")
    suffix = "-cudnn" if cudnn else ""
    # cuDNN's entries need a CUDA GPU (device "cuda": JAX's GPU holds their arrays); where JAX sees
    # none they are not usable (normprops.specs.kernel_status) and are skipped, not failed.
    return KernelSpec(f"jax.attention{suffix}-{_SHORT[dtype]}", "attention", "jax",
                      f"normprops.backends.ecosystem:jax__attention_{implementation}", 4,
                      model, claims,
                      f"jax.jit of jax.nn.dot_product_attention(implementation={implementation!r}), "
                      f"{dtype}{' (a CUDA GPU only)' if cudnn else ''}", exempt=_NOT_PROMISED,
                      bench=False, dtype=dtype, framework="jax", device="cuda" if cudnn else None,
                      op_declaration=declared)


#: What cuDNN's entries were hunted clean on at 300 examples, seeds 0 and 1 (an H100, jax 0.11.2;
#: over 8 shapes a family, the declared pool): every family but the four that draw rows with no
#: kept key.
_JAX_CUDNN_CLEAN = frozenset({"ordinary", "large_scores", "sentinel", "gqa", "cancelling_v", "ragged",
                              "extreme_lse", "head_dims", "outlier_key", "strided"})


ECOSYSTEM_KERNELS += (
    # float32 claims nothing: clean on the CPU in every family without an empty query row, but on
    # a GPU (an H100, jax 0.11.2) its scores run in TF32 by default (jax_default_matmul_precision):
    # lse off by x63 of the float32 bound in gqa. One entry serves both devices.
    _jax_attention_entry("xla", "float32", frozenset()),
    # bfloat16 on the GPU: accuracy and shift_invariance in ordinary and large_scores (err/tol up to
    # 36; keys shifted so that the scores move by 200 give outputs 60 ulp off), as if its scores were
    # rounded to bfloat16. JAX's source asks for float32 scores and the CPU computes them so
    # (docs/reproducers/jax_xla_attention_bf16_scores.py): a bug of the GPU path, not a design to
    # declare; claims nothing (docs/ecosystem.md, "jax.attention-bf16 on the GPU, triaged").
    _jax_attention_entry("xla", "bfloat16", frozenset()),
    # cudnn: clean on _JAX_CUDNN_CLEAN in both types; it claims them where JAX sees a GPU and is
    # skipped elsewhere ("needs a CUDA GPU"), since without cuDNN every call raises.
    _jax_attention_entry("cudnn", "bfloat16", _JAX_CUDNN_CLEAN),
    _jax_attention_entry("cudnn", "float16", _JAX_CUDNN_CLEAN),
)


# Their gradients: jax.vjp of jax.nn.dot_product_attention with dout as the cotangent of out
# (normprops.backends.ecosystem, `_jax_attention_backward`), under jax.jit, as the attention
# backward op, declared as the forward entries are (XLA flushes subnormals; the same shapes; no
# lse). What autodiff of the xla implementation computes (its source, jax 0.10.2): P.V's transpose
# gives dP = dout v^T in the storage type (the einsum's own output type), the softmax's vjp
# dS = P (dP - sum(P dP)) in float32 (the row term from P.dP, not from out), P rounded to the
# storage type before dv = P^T dout, dS before dq and dk; dk and dv summed over a group's heads and
# rows in one einsum (float32 accumulation). A query row with no kept key is a softmax of equal
# scores (see the forward): its dq is 0 (jnp.where passes no gradient to a masked score), but its
# dout reaches every key's dv through that uniform P, which the op's contract does not allow
# (measured on the CPU: an accuracy failure of dv), so the families that draw one are not claimed.
# None claims a family yet: xla float32 runs its matmuls in TF32 on a GPU by default, as the
# forward does (one entry serves both devices), and the 16-bit and cuDNN entries are hunted where
# they run (a GPU) before they claim.
# cuDNN's gradients (jax 0.11.2, an H100, bfloat16 and float16) have PyTorch's cuDNN backward NaN
# (pytorch#196678) without PyTorch: every dq NaN where every score lies 100 or 128 below zero and
# the key length is 64 mod 128, with a mask or without (docs/reproducers/
# jax_cudnn_attention_backward_low_lse_nan.py: 64, 192 and 320 keys NaN, 128 and 256 clean,
# unshifted scores clean; xla's gradients of the same calls finite). A query row with no kept key
# at 64 or 192 keys gets NaN dq too, where xla's are finite. Each is a known bug of its family,
# caught by a 100-example hunt at seeds 0 and 1; fully_masked's shrunk case (2 queries, 192 keys,
# head dim 8) is its explicit example, low_lse's (64 queries, 320 keys, head dim 256) is not
# kept: 2.4 MB a fixture. JAX asks of cuDNN's backward even query and key lengths
# (check_is_flash_attention in jax/_src/cudnn/fused_attention_stablehlo.py: "Unsupported sequence
# length Q 3, KV 1"; on jax 0.11.2 every odd case of the hunts raised it, with a mask and
# without): declared, so a drawn odd length is lengthened by a zero query that keeps every key or
# a zero key that none keeps.
# Hunted again over even lengths with the group sums declared (jax 0.11.2, an H100, 300 examples a
# family at seeds 0 and 1): clean on ordinary, cancelling_dout, dout_scale and gqa in both types and
# orthogonal_dout in bfloat16; claimed as PyTorch's cuDNN backward is. ordinary is left out: its
# causal masks can leave a query row with no kept key, which cuDNN's backward gives NaN dq at 64 mod
# 128 keys (fully_masked). one_hot_dout met the low_lse NaN (a sentinel-masked row at 64 keys), and
# float16's orthogonal_dout a NaN dq where dS passes float16's range, as every float16 backward
# through PyTorch does.
_JAX_CUDNN_BACKWARD_CLEAN = {
    "bfloat16": frozenset({"cancelling_dout", "orthogonal_dout", "dout_scale", "gqa"}),
    "float16": frozenset({"cancelling_dout", "dout_scale", "gqa"}),
}


def _jax_cudnn_backward_nan(dtype: str) -> tuple[KnownBug, ...]:
    return (KnownBug("low_lse", "NaN dq at a key length of 64 mod 128 with every score 100 or 128 "
                     "below zero (as pytorch#196678)", property="finite"),
            KnownBug("fully_masked", "NaN dq for a query row with no kept key at a key length of 64 "
                     "mod 128", property="finite",
                     example=f"jax.attention-cudnn.vjp-{_SHORT[dtype]}-fully_masked.json"))


def _jax_attention_backward_entry(implementation: str, dtype: str) -> KernelSpec:
    from normprops.ops.attention_backward import backward_declaration

    forward = _jax_attention_entry(implementation, dtype, frozenset())
    # cuDNN's backward sums dk and dv over a GQA group in the storage type, as through PyTorch
    # (torch_entries: sdpa-cudnn.backward): over even lengths (jax 0.11.2, an H100, 300 examples a
    # family at seeds 0 and 1) every accuracy miss, err/tol 1.0-1.27 in six families, had Hq > Hkv.
    cudnn = implementation == "cudnn"
    declared = backward_declaration(forward.op_declaration, returns_lse=False,
                                    lengths_multiple_of=2 if cudnn else 1,
                                    group_sum_dtype=dtype if cudnn else None)
    # cuDNN's: .vjp, since "jax.attention-cudnn.backward-bf16" is wider than the kernels table's
    # 100 columns leave its name column (32)
    name = "jax.attention-cudnn.vjp" if implementation == "cudnn" else "jax.attention.backward"
    return replace(forward, name=f"{name}-{_SHORT[dtype]}", op="attention_backward",
                   claims=_JAX_CUDNN_BACKWARD_CLEAN[dtype] if cudnn else frozenset(),
                   entry=f"normprops.backends.ecosystem:jax__attention_backward_{implementation}",
                   op_declaration=declared,
                   bugs=_jax_cudnn_backward_nan(dtype) if implementation == "cudnn" else (),
                   summary=f"jax.jit of jax.vjp of jax.nn.dot_product_attention(implementation="
                           f"{implementation!r}), dout the cotangent of out, {dtype}"
                           f"{' (a CUDA GPU only)' if implementation == 'cudnn' else ''}")


ECOSYSTEM_KERNELS += tuple(_jax_attention_backward_entry(implementation, dtype)
                           for implementation, dtype in (("xla", "float32"), ("xla", "bfloat16"),
                                                         ("cudnn", "bfloat16"), ("cudnn", "float16")))
