"""The ecosystem's normalization kernels as registered targets: ``torch.compile``, Liger-Kernel,
QuACK, JAX and Flax.

Each entry point takes and returns its own framework's arrays (torch CUDA tensors, JAX arrays) in the
storage type it is registered with; the registry (:mod:`normprops.specs`) says which framework, and
what each entry promises. Nothing heavy is imported with this module: each library is imported on
first use, and :func:`ecosystem_status` says whether a backend can run here and why not.

The fused add + RMS norm kernels (Liger's ``fused_add_rms_norm``, QuACK's ``rmsnorm`` with a
residual) are hunted as RMS norms, as ours are: x is split exactly into a + b in the storage type
(:func:`normprops.dtypes.split_exact`), the kernel runs on (a, b), its new residual must be x bit
for bit (else a contract failure), and its output is judged as ``rms_norm(x)``.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from normprops.errors import ContractError

__all__ = ["ECOSYSTEM_BACKENDS", "ecosystem_status", "jax_gpu_status", "entry"]

#: backend -> what it needs
ECOSYSTEM_BACKENDS = {
    "torch-compile": "torch with a CUDA device (torch.compile(dynamic=True) of PyTorch's ops)",
    "liger": "Liger-Kernel (Triton) with a CUDA device",
    "quack": "QuACK (CuTe DSL) with a CUDA device",
    "jax": "JAX (its first device: the GPU when jax[cuda] is installed)",
    "flax": "Flax (linen) on JAX",
    "cce": "Cut Cross-Entropy (cut-cross-entropy: Triton, or torch.compile) with a CUDA device",
}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _import_jax() -> Any:
    # JAX takes 75% of the GPU's memory at its first use unless told not to; it shares the GPU with
    # CuPy and torch here.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    return jax


def _cce_status() -> tuple[bool, str]:
    """Cut Cross-Entropy: installed, torch with a CUDA device, its module importing (Triton)."""
    import importlib.metadata
    import importlib.util

    try:
        found = importlib.util.find_spec("cut_cross_entropy") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False, "cut-cross-entropy is not installed (pip install cut-cross-entropy)"
    try:
        version = importlib.metadata.version("cut-cross-entropy")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    try:
        import torch
    except Exception as exc:
        return False, f"cut-cross-entropy {version} needs torch, which is not importable ({_first_line(exc)})"
    if not torch.cuda.is_available():
        return False, f"cut-cross-entropy {version} needs a CUDA device; torch {torch.__version__} sees none"
    try:
        import cut_cross_entropy  # noqa: F401  (imports its Triton kernels)
    except Exception as exc:
        return False, f"cut-cross-entropy {version}: import failed ({_first_line(exc)})"
    return True, f"cut-cross-entropy {version}, Triton, torch {torch.__version__}"


@functools.cache
def ecosystem_status(backend: str) -> tuple[bool, str]:
    """(usable, reason) for one of :data:`ECOSYSTEM_BACKENDS`; never raises."""
    if backend not in ECOSYSTEM_BACKENDS:
        return False, f"unknown backend {backend!r}"
    if backend in ("liger", "quack"):
        from normprops.backends.peers import peer_status

        return peer_status(backend)
    if backend == "cce":
        return _cce_status()
    if backend == "torch-compile":
        try:
            import torch
        except Exception as exc:
            return False, f"torch is not importable ({_first_line(exc)})"
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device"
        return True, f"torch.compile, torch {torch.__version__} on {torch.cuda.get_device_name()}"
    try:
        jax = _import_jax()
    except Exception as exc:
        return False, f"jax is not importable ({_first_line(exc)})"
    device = jax.devices()[0]
    if backend == "jax":
        return True, f"jax {jax.__version__} on {device.platform} ({device.device_kind})"
    try:
        import flax
    except Exception as exc:
        return False, f"flax is not importable ({_first_line(exc)})"
    return True, f"flax {flax.__version__}, jax {jax.__version__} on {device.platform}"


@functools.cache
def jax_gpu_status() -> tuple[bool, str]:
    """(usable, reason): whether JAX sees a CUDA GPU, for the entries whose arrays live there
    (``KernelSpec.device == "cuda"`` on the jax backend: cuDNN's attention). JAX runs wherever it
    imports, on its CPU when jax[cuda] is not installed or finds no GPU; never raises."""
    try:
        jax = _import_jax()
        platforms = sorted({d.platform for d in jax.devices()})
    except Exception as exc:
        return False, f"jax is not importable ({_first_line(exc)})"
    if "gpu" not in platforms:
        return False, f"jax {jax.__version__} sees none here (its devices: {', '.join(platforms)})"
    return True, f"jax {jax.__version__} on {jax.devices('gpu')[0].device_kind}"


# --- torch.compile ---------------------------------------------------------------------------


@functools.cache
def _compiled(op: str) -> Callable[..., Any]:
    import torch
    import torch.nn.functional as F

    eager: dict[str, Callable[..., Any]] = {
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "layernorm": lambda x, gamma, beta, eps: F.layer_norm(x, (x.shape[-1],), gamma, beta, eps),
        "rmsnorm": lambda x, gamma, eps: F.rms_norm(x, (x.shape[-1],), gamma, eps),
    }
    return torch.compile(eager[op], dynamic=True)


def _torch_compile(op: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        import torch

        # F.layer_norm's and F.rms_norm's eps is a Python float, which Dynamo specializes: every new
        # eps (the hunt draws several, and scale invariance multiplies them by 4^k) is a recompile,
        # and past Dynamo's recompile limit (8) the call silently runs eager PyTorch instead. A
        # limit raised for our calls alone keeps every call on the compiled kernel.
        config = torch._dynamo.config
        name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
        limits = {name: 1 << 12}
        if hasattr(config, "accumulated_recompile_limit"):
            limits["accumulated_recompile_limit"] = 1 << 14
        with config.patch(**limits):
            return _compiled(op)(*args)

    return call


# --- Liger-Kernel and QuACK (adapters in normprops.backends.peers) ----------------------------


def _peer(library: str, op: str) -> Callable[..., Any]:
    from normprops.backends.peers import adapter

    if op != "addrmsnorm":
        return lambda *args: adapter(library, op)(*args)

    def rms_norm(x: Any, gamma: Any, eps: float) -> Any:
        return _fused_as_rms_norm(adapter(library, "addrmsnorm"), x, gamma, eps)

    return rms_norm


def _fused_as_rms_norm(add_rms_norm: Callable[..., Any], x: Any, gamma: Any, eps: float) -> Any:
    """rms_norm(x) through a fused add + RMS norm: x = a + b exactly, the kernel's new residual
    must be x bit for bit."""
    import ml_dtypes
    import numpy as np
    import torch

    from normprops.dtypes import split_exact

    dtype = str(x.dtype).removeprefix("torch.")
    host = x.detach().float().cpu().numpy()
    a, b = split_exact(host, dtype)

    def back(v: np.ndarray) -> Any:
        if dtype == "bfloat16":
            bits = v.astype(ml_dtypes.bfloat16).view(np.int16)
            return torch.from_numpy(bits).view(torch.bfloat16).to(x.device)
        return torch.from_numpy(v.astype(np.float16 if dtype == "float16" else np.float32)).to(x.device)

    out, new_residual = add_rms_norm(back(a), back(b), gamma, eps)
    got = new_residual.detach().float().cpu().numpy()
    same = (got.view(np.uint32) == host.view(np.uint32)) | (np.isnan(got) & np.isnan(host))
    if not same.all():
        r, c = np.unravel_index(int(np.argmax(~same)), same.shape)
        raise ContractError(f"the new residual at row {r} col {c} is {got[r, c]!r}; x + residual is "
                            f"{host[r, c]!r} ({a[r, c]!r} + {b[r, c]!r})")
    return out


# --- JAX and Flax ------------------------------------------------------------------------------


# JAX and Flax run as their users run them: under jax.jit (one XLA executable per shape and eps),
# eps a static argument as a Python float is. Eager JAX would compile every primitive per shape
# instead, the hunt's time going to compiles: 2.5x longer on jax.nn.softmax. eps stays static
# although each new eps is a compile: passed as a traced argument it changed jax.nn.standardize's
# float32 result on an H200 (14 of 840 cases, all at 3 columns), so it would hunt another kernel
# than the one users compile with their constant eps.
_STATIC_EPS = {"softmax": (), "layernorm": (3,), "rmsnorm": (2,)}


@functools.cache
def _jax(op: str) -> Callable[..., Any]:
    jax = _import_jax()

    def softmax(x: Any) -> Any:
        return jax.nn.softmax(x, axis=-1)

    def layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        # The layer norm JAX users write: jax.nn.standardize, then the affine.
        return jax.nn.standardize(x, axis=-1, epsilon=eps) * gamma + beta

    if op.startswith("attention_backward_"):
        return _jax_attention_backward(jax, op.removeprefix("attention_backward_"))
    if op.startswith("attention_"):
        return _jax_attention(jax, op.removeprefix("attention_"))
    fn = {"softmax": softmax, "layernorm": layer_norm}[op]
    return jax.jit(fn, static_argnums=_STATIC_EPS[op])


def _jax_attention(jax: Any, implementation: str) -> Callable[..., Any]:
    """``jax.nn.dot_product_attention`` as the attention op's ``fn(q, k, v, mask, scale)``: q, k and v
    in the op's (B, H, L, D) transposed to JAX's (B, L, H, D) and out back, the bool mask (B, 1,
    Lq, Lk) handed over as it is (True: the key takes part; JAX broadcasts it over the heads), the
    scale static (a constant, as users write it). GQA is JAX's own (N query heads a multiple of K
    kv heads).

    The lse (``return_residual=True``) comes back in the storage type (``logsumexp(...).astype(
    key.dtype)`` in JAX's source): a float32 call returns (out, lse), a 16-bit one out alone, since
    the op's lse is float32 and a bfloat16 lse holds 8 bits of it.

    JAX fills masked scores with a large finite negative (about -0.7 FLT_MAX), not -inf, so a query
    row with no kept key is a softmax of equal scores: the mean of v over every key, and its lse
    about -2.4e38 (measured, xla on the CPU, jax 0.10.2). Neither zeros nor NaN: the op's contract
    for such a row does not hold, and the entries claim no family that draws one."""
    jnp = jax.numpy

    def attention(q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
        def bthd(a: Any) -> Any:
            return jnp.swapaxes(a, 1, 2)

        with_lse = q.dtype == jnp.float32
        result = jax.nn.dot_product_attention(bthd(q), bthd(k), bthd(v), mask=mask, scale=scale,
                                              implementation=implementation,
                                              return_residual=with_lse)
        if not with_lse:
            return bthd(result)
        out, lse = result
        return bthd(out), jnp.swapaxes(lse, 1, 2)  # (B, T, N) -> (B, N, T)

    return jax.jit(attention, static_argnums=(4,))


def _jax_attention_backward(jax: Any, implementation: str) -> Callable[..., Any]:
    """The gradients of :func:`_jax_attention`'s out as the attention backward op's ``fn(dout, q, k,
    v, mask, scale) -> (dq, dk, dv)``: ``jax.vjp`` of ``jax.nn.dot_product_attention`` (the same
    (B, H, L, D) <-> (B, L, H, D) transposes and mask) pulled back along ``dout``, the cotangent of
    out, under jax.jit with the scale static. dk and dv come back summed over a kv head's query
    heads by JAX's own GQA (xla: one einsum over the group's heads and rows)."""
    jnp = jax.numpy

    def bthd(a: Any) -> Any:
        return jnp.swapaxes(a, 1, 2)

    def backward(dout: Any, q: Any, k: Any, v: Any, mask: Any, scale: float) -> Any:
        def out(q: Any, k: Any, v: Any) -> Any:
            return bthd(jax.nn.dot_product_attention(bthd(q), bthd(k), bthd(v), mask=mask, scale=scale,
                                                     implementation=implementation))

        _, pullback = jax.vjp(out, q, k, v)
        return pullback(dout)

    return jax.jit(backward, static_argnums=(5,))


@functools.cache
def _flax(op: str) -> Callable[..., Any]:
    jax = _import_jax()
    from flax import linen

    def layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
        # Flax's defaults (use_fast_variance=True among them), with the case's eps and parameters
        # of the storage type.
        module = linen.LayerNorm(epsilon=eps, param_dtype=x.dtype)
        return module.apply({"params": {"scale": gamma, "bias": beta}}, x)

    def rms_norm(x: Any, gamma: Any, eps: float) -> Any:
        module = linen.RMSNorm(epsilon=eps, param_dtype=x.dtype)
        return module.apply({"params": {"scale": gamma}}, x)

    fn = {"layernorm": layer_norm, "rmsnorm": rms_norm}[op]
    return jax.jit(fn, static_argnums=_STATIC_EPS[op])


_FACTORIES: dict[str, Callable[[str], Callable[..., Any]]] = {
    "torch-compile": _torch_compile,
    "liger": functools.partial(_peer, "liger"),
    "quack": functools.partial(_peer, "quack"),
    "jax": _jax,
    "flax": _flax,
}


def entry(backend: str, op: str) -> Callable[..., Any]:
    """The entry point of ``backend``'s kernel for ``op`` ("addrmsnorm": hunted as an RMS norm)."""
    return _FACTORIES[backend](op)


def __getattr__(name: str) -> Callable[..., Any]:
    """``ecosystem.<backend>__<op>``: the registry's entry names (``liger__rmsnorm``)."""
    backend, sep, op = name.partition("__")
    backend = backend.replace("_", "-")
    if sep and backend in _FACTORIES:
        return entry(backend, op)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
