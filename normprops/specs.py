"""The registry: every kernel normprops knows how to hunt, joined from the entries each backend
declares beside its code (:mod:`normprops.cuda.entries`, :mod:`normprops.backends.numpy_entries`,
:mod:`normprops.backends.torch_entries`, :mod:`normprops.backends.ecosystem_entries`,
:mod:`normprops.backends.cross_entropy_entries`,
:mod:`normprops.backends.linear_cross_entropy_entries`).

Tests, the CLI and the benchmark iterate over ``KERNELS``; nothing else keeps a list of kernels. An
entry (:class:`normprops.kernelspec.KernelSpec`) says what a kernel computes, where it runs, how its
reduction is shaped (which sets its error bound), which families it claims, and its known bugs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

import numpy as np

from normprops.backends.cross_entropy_entries import CROSS_ENTROPY_KERNELS
from normprops.backends.ecosystem_entries import ECOSYSTEM_GRAD_KERNELS, ECOSYSTEM_KERNELS
from normprops.backends.linear_cross_entropy_entries import LINEAR_CROSS_ENTROPY_KERNELS
from normprops.backends.numpy_entries import NUMPY_EXAMPLE_KERNELS
from normprops.backends.torch_entries import TORCH_GRAD_KERNELS, TORCH_KERNELS
from normprops.cuda.entries import CUDA_ONLY_KERNELS, PROD_KERNELS, TEXTBOOK_KERNELS
from normprops.kernelspec import BACKEND_MODULES, KernelSpec, for_backend

__all__ = ["KERNELS", "backend_status", "kernel_status", "unusable_kernels"]

KERNELS: tuple[KernelSpec, ...] = (
    *(for_backend("numpy", k) for k in TEXTBOOK_KERNELS),
    *NUMPY_EXAMPLE_KERNELS,
    *(for_backend("cuda", k) for k in TEXTBOOK_KERNELS),
    *CUDA_ONLY_KERNELS,
    *PROD_KERNELS,
    *TORCH_KERNELS,
    *ECOSYSTEM_KERNELS,
    *TORCH_GRAD_KERNELS,
    *ECOSYSTEM_GRAD_KERNELS,
    *CROSS_ENTROPY_KERNELS,
    *LINEAR_CROSS_ENTROPY_KERNELS,
)


def backend_status(backend: str) -> tuple[bool, str]:
    """Whether ``backend`` can run here, and why not when it cannot."""
    if backend == "numpy":
        return True, f"numpy {np.__version__}"
    if backend in ("cuda", "cuda-prod", "cuda-cluster"):
        from normprops.cuda.build import cuda_status

        ok, why = cuda_status()
        if ok and backend == "cuda-cluster":
            from normprops.cuda.prod import clusters_supported

            if not clusters_supported():
                return False, f"{why}: thread-block clusters need compute capability 9.0 or later"
        return ok, why
    if backend in ("torch-cuda", "torch-cpu"):
        from normprops.backends.torch_kernels import torch_status

        return torch_status(device=backend.removeprefix("torch-"))
    from normprops.backends.ecosystem import ECOSYSTEM_BACKENDS, ecosystem_status

    if backend in ECOSYSTEM_BACKENDS:
        return ecosystem_status(backend)
    return False, (f"unknown backend {backend!r}; known: "
                   f"{', '.join([*BACKEND_MODULES, *ECOSYSTEM_BACKENDS])}")


def kernel_status(spec: KernelSpec) -> tuple[bool, str]:
    """Whether the entry ``spec`` can run here, and why not when it cannot: its backend's status
    (:func:`backend_status`), the modules it imports beyond its backend's (``spec.imports``), and
    where its arrays must live on a CUDA GPU (``spec.device`` "cuda") that its framework sees one.
    A backend that runs anywhere can hold entries that need a GPU: JAX runs on the CPU, its cuDNN
    attention only on a GPU."""
    ok, why = backend_status(spec.backend)
    if not ok:
        return ok, why
    missing = [m for m in spec.imports if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"needs {', '.join(missing)}, not importable here (pip install {' '.join(missing)})"
    if spec.device is None or not spec.device.startswith("cuda"):
        return ok, why
    if spec.framework == "jax":
        from normprops.backends.ecosystem import jax_gpu_status

        gpu, seen = jax_gpu_status()
    elif spec.framework == "torch":
        import torch  # its backend's status imported it

        gpu, seen = torch.cuda.is_available(), f"torch {torch.__version__} sees none here"
    else:
        from normprops.cuda.build import cuda_status

        gpu, seen = cuda_status()
    return (True, why) if gpu else (False, f"needs a CUDA GPU; {seen}")


def unusable_kernels(specs: Iterable[KernelSpec]) -> dict[str, list[str]]:
    """The entries of ``specs`` that cannot run here (:func:`kernel_status`), their
    names grouped by why, in registry order."""
    grouped: dict[str, list[str]] = {}
    for k in specs:
        ok, why = kernel_status(k)
        if not ok:
            grouped.setdefault(why, []).append(k.name)
    return grouped
