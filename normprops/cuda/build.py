"""CUDA through CuPy: device discovery, and ``kernels.cu`` compiled lazily once per build.

Nothing here imports CuPy at module import; ``cuda_status()`` answers whether a GPU is usable (and
why not) without raising. ``module(build)`` reads the packaged ``kernels.cu`` through
importlib.resources, prefixes a ``#line`` directive so compiler messages point into ``kernels.cu``,
and compiles it with NVRTC once per process and build; a compile failure raises
:class:`KernelCompileError` carrying ``file:line``.

Why not ``cupy.RawModule(code=..., options=...)``: CuPy appends ``-ftz=true`` after the caller's
options on every compile it caches (``cupy/cuda/compiler.py``, ``_compile_with_cache_cuda``; CuPy
issue #9576), for NVRTC and nvcc alike, and both compilers keep an option's last value, so
``--ftz=false`` never took effect: every build flushed float32 subnormals to zero. We call CuPy's
own NVRTC wrapper (``compile_using_nvrtc``, which adds only the ``-arch`` and
``--device-as-default-execution-space``) with CuPy's include directories and exactly our options,
keep the cubin in a content-addressed file (``prod.cu`` takes about a minute to compile), and load
it with ``cupy.RawModule(path=...)``. ``build_flushes(build)`` measures on the GPU whether a build
flushes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.resources
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

__all__ = ["SOURCES", "BUILT_ON", "BUILDS", "KernelCompileError", "cuda_status", "module", "compile_source",
           "source_text", "unit_text", "build_flushes"]

#: NVRTC options per build, passed as they are (see the module docstring: not through
#: ``RawModule(code=...)``, which would append ``-ftz=true``). ``ftz`` flushes subnormal operands and
#: results to zero (what -use_fast_math brings with it); ``fast_math`` is the whole of
#: --use_fast_math (``expf`` becomes ``__expf``).
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
        return False, (f"CuPy is not importable ({type(exc).__name__}: {exc}); "
                       "install normprops[cuda12] or [cuda13]")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no CUDA device ({type(exc).__name__}: {exc})"
    if count < 1:
        return False, "no CUDA device"
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return True, f"{name}, sm_{props['major']}{props['minor']}, CuPy {cupy.__version__}"


#: The packaged CUDA sources: the textbook kernels, the production ones, their decode entry points
#: and the kept-bad kernel (both built on the production templates), and the spin kernel
#: ``normprops bench`` times behind.
SOURCES = ("kernels.cu", "prod.cu", "prod_decode.cu", "prod_kept_bad.cu", "spin_wait.cu")
#: A source compiled after another one's device code, whose templates it instantiates; the other's
#: own kernels are left out (NP_NO_ENTRY_POINTS), so they are not compiled a second time.
BUILT_ON = {"prod_decode.cu": "prod.cu", "prod_kept_bad.cu": "prod.cu"}


def source_text(source: str = "kernels.cu") -> str:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES} but was {source!r}")
    return importlib.resources.files("normprops.cuda").joinpath(source).read_text()


def unit_text(source: str) -> str:
    """The code compiled for ``source``: the file itself, or, for one of :data:`BUILT_ON`, the device
    code it is built on and then the file, each under a ``#line`` naming it."""
    base = BUILT_ON.get(source)
    if base is None:
        return source_text(source)
    return (f'#define NP_NO_ENTRY_POINTS\n#line 1 "{base}"\n{source_text(base)}\n'
            f'#line 1 "{source}"\n{source_text(source)}')


_LOCATION = re.compile(r"([\w./-]+\.cu)\((\d+)\)")


def _kernel_cache_dir() -> Path:
    """Where compiled images are kept: $NORMPROPS_KERNEL_CACHE, else normprops/ in CuPy's cache."""
    root = os.environ.get("NORMPROPS_KERNEL_CACHE")
    if root:
        return Path(root)
    cupy_cache = os.environ.get("CUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cupy",
                                                                  "kernel_cache")
    return Path(cupy_cache) / "normprops"


def _nvrtc_image(code: str, options: tuple[str, ...]) -> Path:
    """A file holding NVRTC's cubin (or PTX, where CuPy would pick PTX) for ``code`` compiled with
    exactly ``options`` plus CuPy's include directories; compiled only when not already cached.
    Raises cupy.cuda.compiler.CompileException."""
    import cupy
    from cupy._core import core  # noqa: PLC2701 -- CuPy's private API, on purpose (see below)
    from cupy.cuda import compiler

    # CuPy's include directories (bundled CCCL, cupy/_core/include, the CUDA headers) around our
    # options, as RawModule(code=...) has them; this adds no -ftz. Only CuPy's private
    # cupy._core.core assembles them (no public function gives them); where a CuPy release lacks
    # assemble_cupy_compiler_options, the fallback is our options alone.
    assemble = getattr(core, "assemble_cupy_compiler_options", None)
    full = tuple(assemble(tuple(options))) if assemble is not None else tuple(options)
    key = "\0".join((cupy.__version__, repr(cupy.cuda.nvrtc.getVersion()),
                      cupy.cuda.Device().compute_capability,
                      os.environ.get("CUPY_COMPILE_WITH_PTX", ""), *full, code))
    directory = _kernel_cache_dir()
    path = directory / (hashlib.sha256(key.encode()).hexdigest() + ".bin")
    if path.is_file():
        return path
    directory.mkdir(parents=True, exist_ok=True)
    # prod.cu takes NVRTC a minute and a half: processes that start together (pytest -n N) wait for
    # the first one's image instead of each compiling it at once.
    with _exclusive(path.with_suffix(".lock")):
        if path.is_file():
            return path
        image, _ = compiler.compile_using_nvrtc(code, options=full, cache_in_memory=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        os.replace(tmp, path)  # atomic: a concurrent process sees the whole file or none
    return path


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (where the OS has flock; elsewhere, no lock)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _flushes(options: tuple[str, ...]) -> bool:
    return any(o.lstrip("-") in ("ftz=true", "use_fast_math") for o in options)


def compile_source(code: str, *, filename: str, options: tuple[str, ...]) -> Any:
    """Compile ``code`` into a CuPy RawModule now (not at first launch); errors carry file:line.

    IEEE builds go through NVRTC with exactly ``options`` (see the module docstring). A build that
    asks for flush-to-zero goes through ``RawModule(code=...)``, CuPy's own path, whose appended
    ``-ftz=true`` is then what was asked for: with NVRTC 13.0 on sm_90, ``--ftz=true`` given to
    NVRTC directly reached the PTX but not the cubin, while CuPy's path flushed."""
    import cupy

    source = f'#line 1 "{filename}"\n{code}'
    try:
        if _flushes(options):
            module = cupy.RawModule(code=source, options=options)
            module.compile()
            return module
        path = _nvrtc_image(source, options)
    except cupy.cuda.compiler.CompileException as exc:
        text = str(exc)
        locations = [f"{f}:{line}" for f, line in _LOCATION.findall(text)]
        errors = [line for line in text.splitlines() if "error" in line]
        where = locations[0] if locations else filename
        summary = errors[0].strip() if errors else text.strip().splitlines()[0]
        raise KernelCompileError(f"{where}: CUDA compile failed: {summary}", locations) from exc
    module = cupy.RawModule(path=str(path))
    try:
        module.compile()  # loads the image now: a damaged cache file fails here, not at launch
    except cupy.cuda.driver.CUDADriverError:
        path.unlink(missing_ok=True)
        raise
    return module


@functools.cache
def module(build: str = "default", *, source: str = "kernels.cu") -> Any:
    """The RawModule of ``source`` (one of :data:`SOURCES`) for ``build``, compiled once per
    process."""
    if build not in BUILDS:
        raise ValueError(f"build must be one of {sorted(BUILDS)} but was {build!r}")
    return compile_source(unit_text(source), filename=source, options=BUILDS[build])


# Two products that are subnormal in IEEE arithmetic and 0 under flush-to-zero: 2^-63 * 2^-64 (a
# subnormal result of normal operands) and 2^-130 * 1 (a subnormal operand). Operands come from
# memory, so nothing is folded at compile time.
_FTZ_PROBE = r"""
extern "C" __global__ void normpropsFtzProbe(const float* in, float* out) {
    out[0] = in[0] * in[1];
    out[1] = in[2] * in[3];
}
"""


@functools.cache
def build_flushes(build: str = "default") -> bool:
    """Whether code compiled for ``build`` flushes float32 subnormals to zero, measured once per
    process by a one-thread kernel compiled exactly as ``module(build)`` is (same options, same
    path). The tolerance's flush allowance is for builds where this is True."""
    if build not in BUILDS:
        raise ValueError(f"build must be one of {sorted(BUILDS)} but was {build!r}")
    import cupy
    import numpy as np

    probe = compile_source(_FTZ_PROBE, filename="ftz_probe.cu", options=BUILDS[build])
    x = cupy.asarray(np.array([2.0**-63, 2.0**-64, 2.0**-130, 1.0], dtype=np.float32))
    out = cupy.full(2, np.nan, dtype=np.float32)
    probe.get_function("normpropsFtzProbe")((1,), (1,), (x, out))
    got = out.get()
    ieee = got[0] == np.float32(2.0**-127) and got[1] == np.float32(2.0**-130)
    if not ieee and not (got[0] == 0.0 and got[1] == 0.0):
        raise RuntimeError(f"flush-to-zero probe for build {build!r} gave {got.tolist()}")
    return not ieee
