"""CUDA through CuPy: device discovery, and ``kernels.cu`` compiled lazily once per build.

Nothing here imports CuPy at module import; ``cuda_status()`` answers whether a GPU is usable (and
why not) without raising. ``module(build)`` reads the packaged ``kernels.cu`` through
importlib.resources, prefixes a ``#line`` directive so compiler messages point into ``kernels.cu``,
and compiles it with NVRTC once per process and build; a compile failure raises
:class:`KernelCompileError` carrying ``file:line``.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from typing import Any

__all__ = ["SOURCES", "BUILDS", "KernelCompileError", "cuda_status", "module", "compile_source", "source_text"]

#: NVRTC options per build. ``ftz`` flushes subnormal results to zero (what -use_fast_math brings
#: with it); ``fast_math`` is the whole of --use_fast_math (``expf`` becomes ``__expf``).
BUILDS: dict[str, tuple[str, ...]] = {
    # IEEE everywhere, spelled out so no caller's defaults can change it.
    "default": ("-std=c++17", "--ftz=false", "--prec-div=true", "--prec-sqrt=true"),
    "ftz": ("-std=c++17", "--ftz=true", "--prec-div=true", "--prec-sqrt=true"),
    "fast_math": ("-std=c++17", "--use_fast_math"),
}


class KernelCompileError(RuntimeError):
    """NVRTC rejected a CUDA source; ``locations`` lists the ``file:line`` of each error."""

    def __init__(self, message: str, locations: list[str]) -> None:
        super().__init__(message)
        self.locations = locations


@functools.cache
def cuda_status() -> tuple[bool, str]:
    """(usable, reason): a GPU CuPy can launch on, or why there is none."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA failing to load
        return False, f"CuPy is not importable ({type(exc).__name__}: {exc}); install normprops[cuda12] or [cuda13]"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return False, "no CUDA device"
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return True, f"{name}, sm_{props['major']}{props['minor']}, CuPy {cupy.__version__}"


#: The packaged CUDA sources: the seed's kernels and the production ones.
SOURCES = ("kernels.cu", "prod.cu")


def source_text(source: str = "kernels.cu") -> str:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES} but was {source!r}")
    return importlib.resources.files("normprops").joinpath(source).read_text()


_LOCATION = re.compile(r"([\w./-]+\.cu)\((\d+)\)")


def compile_source(code: str, *, filename: str, options: tuple[str, ...]) -> Any:
    """Compile ``code`` into a CuPy RawModule now (not at first launch); errors carry file:line."""
    import cupy

    module = cupy.RawModule(code=f'#line 1 "{filename}"\n{code}', options=options)
    try:
        module.compile()
    except cupy.cuda.compiler.CompileException as exc:
        text = str(exc)
        locations = [f"{f}:{line}" for f, line in _LOCATION.findall(text)]
        errors = [line for line in text.splitlines() if "error" in line]
        where = locations[0] if locations else filename
        summary = errors[0].strip() if errors else text.strip().splitlines()[0]
        raise KernelCompileError(f"{where}: CUDA compile failed: {summary}", locations) from exc
    return module


@functools.cache
def module(build: str = "default", *, source: str = "kernels.cu") -> Any:
    """The RawModule of ``source`` (``kernels.cu`` or ``prod.cu``) for ``build``, compiled once per
    process."""
    if build not in BUILDS:
        raise ValueError(f"build must be one of {sorted(BUILDS)} but was {build!r}")
    return compile_source(source_text(source), filename=source, options=BUILDS[build])
