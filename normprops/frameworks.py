"""How a kernel receives and returns arrays: numpy, torch, JAX or CuPy, in a storage type, on a device.

The hunt's cases hold float32 values that are exact in the storage type. An :class:`Adapter` turns
each input into the framework's own array of that type on the chosen device, and turns what the
kernel returns back into float32 numpy, checking on the way that it is the framework's array type,
of the storage type, of the input's shape and on the input's device. A masked softmax's boolean
mask becomes the framework's bool array on the same device (``mask_to_native``). Every conversion
is exact: values move as they are (or widen, on the way back), never through float64 and never
rounded.

A framework is imported only when an adapter for it is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from normprops.dtypes import (
    check_representable,
    from_numpy_storage,
    get_dtype,
    numpy_dtype,
    to_numpy_storage,
)
from normprops.errors import ContractError, UsageError
from normprops.flags import spelled

__all__ = ["FRAMEWORKS", "Adapter", "get_adapter", "framework_status", "memory_order", "laid_like",
           "index_to_native"]

FRAMEWORKS = ("numpy", "torch", "jax", "cupy")


@dataclass(frozen=True)
class Adapter:
    """Inputs into a framework's arrays and outputs back, for one storage type and device."""

    framework: str
    dtype: str
    device: str  # where the arrays live, as the framework names it ("cpu", "cuda:0", ...)
    on_gpu: bool
    # (float32 values exact in dtype, argument name, whether to check they are): the stress batches,
    # copies of checked rows, skip the check where it would cost a round trip to the device
    to_native: Callable[[np.ndarray, str, bool], Any]
    # (returned object, the shape it must have, what it is called) -> float32 numpy, or ContractError
    from_native: Callable[[Any, tuple[int, ...], str], np.ndarray]
    # A boolean mask (masked softmax) into the framework's bool array on the device, and back.
    mask_to_native: Callable[[np.ndarray], Any] | None = None
    mask_from_native: Callable[[Any, tuple[int, ...], str], np.ndarray] | None = None
    # Whether a call changed its inputs, judged where they live: ``snapshot`` copies an input
    # before the call, ``changed`` (or ``download``, below) takes (name, input after the call, its
    # snapshot) for each and says how the first changed one changed (None: none did), in one round
    # trip to the device. No snapshot: the inputs are read back to the host and compared there.
    snapshot: Callable[[Any], Any] | None = None
    changed: Callable[[list[tuple[str, Any, Any]]], str | None] | None = None
    # A call's float inputs in one copy to the device, and its outputs (with the changed-input
    # flags) in one copy back: on a GPU every synchronizing copy is a round trip that the hunt's
    # processes queue for. ``upload`` takes (float32 values, name, check) for each input and gives
    # each its own array, as ``to_native`` would; ``download`` takes (returned object, shape, what)
    # for each output and (name, input after the call, snapshot) for each checked input, checks
    # the outputs as ``from_native`` does, and gives the outputs and how an input changed (None:
    # none did). None: one copy per array.
    upload: Callable[[list[tuple[np.ndarray, str, bool]]], list[Any]] | None = None
    download: Callable[[list[tuple[Any, tuple[int, ...], str]], list[tuple[str, Any, Any]]],
                       tuple[list[np.ndarray], str | None]] | None = None

    @property
    def description(self) -> str:
        return f"{self.framework} {self.dtype} on {self.device}"


def _describe(obj: Any) -> str:
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    parts = [kind]
    for attr in ("dtype", "shape", "device"):
        value = getattr(obj, attr, None)
        if value is not None and not callable(value):
            parts.append(f"{attr} {value}")
    return ", ".join(parts)


def _mismatch(obj: Any, what: str, expected: str) -> ContractError:
    return ContractError(f"{what} is {_describe(obj)}; expected {expected}")


# --- strided inputs ----------------------------------------------------------------------------
# A case may hold an input as a permuted view of a contiguous array (attention's q as a (B, H, L, D)
# view of a (B, L, H, D) projection): a kernel receives it with the same order in memory, so that
# one that assumes contiguity reads the wrong elements, as it would in a model.


def memory_order(a: np.ndarray) -> tuple[int, ...]:
    """``a``'s axes from the slowest-varying in memory to the fastest (C order for a contiguous
    array): ``np.ascontiguousarray(a.transpose(order))`` holds its elements in its own memory order."""
    if a.flags.c_contiguous:
        return tuple(range(a.ndim))
    # Axes of length 1 have no meaningful stride: they go last, where they move nothing.
    keys = sorted((-abs(s) if n > 1 else 0, i) for i, (s, n) in enumerate(zip(a.strides, a.shape)))
    return tuple(i for _, i in keys)


def laid_like(a: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``a`` (C-contiguous, ``like``'s shape) as a view with ``like``'s memory order: the same values."""
    order = memory_order(like)
    if order == tuple(range(a.ndim)):
        return a
    return np.ascontiguousarray(a.transpose(order)).transpose(np.argsort(order))


# --- numpy -------------------------------------------------------------------------------------


def _numpy_adapter(dtype: str, device: str | None) -> Adapter:
    if device not in (None, "cpu"):
        raise UsageError(f"device must be 'cpu' (or left out) for framework numpy but was {device!r}")
    want = numpy_dtype(dtype)

    def to_native(a: np.ndarray, name: str, check: bool = True) -> np.ndarray:
        return laid_like(to_numpy_storage(a, dtype, name=name), a)

    def from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        expected = f"a numpy {want.name} array of shape {shape}"
        if not isinstance(obj, np.ndarray) or obj.dtype != want or obj.shape != shape:
            raise _mismatch(obj, what, expected)
        return from_numpy_storage(obj)

    def mask_from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        if not isinstance(obj, np.ndarray) or obj.dtype != np.bool_ or obj.shape != shape:
            raise _mismatch(obj, what, f"a numpy bool array of shape {shape}")
        return obj.copy()

    return Adapter("numpy", dtype, "cpu", False, to_native, from_native,
                   lambda m: np.array(m, dtype=bool, copy=True), mask_from_native)


# --- torch -------------------------------------------------------------------------------------


def _torch_adapter(dtype: str, device: str | None) -> Adapter:
    torch = _import("torch")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UsageError(f"device {device!r} is not a torch device ({exc}); try 'cuda' or 'cpu'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device {device!r}: torch {torch.__version__} sees no CUDA device; "
                             f"use {spelled('device', 'cpu', quoted=True)}")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise UsageError(f"device {device!r}: torch sees {torch.cuda.device_count()} CUDA devices")
    want = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]

    def to_native(a: np.ndarray, name: str, check: bool = True) -> Any:
        return upload([(a, name, check)])[0]

    def upload(items: list[tuple[np.ndarray, str, bool]]) -> list[Any]:
        flats, orders, shapes = [], [], []
        for a, name, check in items:
            # In its own memory order (a permuted view arrives permuted, strides and all).
            order = memory_order(a)
            a = a.transpose(order)
            shapes.append(np.shape(a))  # a 0-d array (a reduced loss's gradient) stays 0-d
            a = np.ascontiguousarray(a, dtype=np.float32)
            if check:  # on the host: a check on the device would cost a round trip of its own
                check_representable(a, dtype, name=name)
            flats.append(a)
            orders.append(tuple(int(i) for i in np.argsort(order)))
        # One copy of every input. On CUDA, from page-locked memory, queued on the current stream
        # without waiting for the device (the host buffer is kept until the copy is done): the
        # inputs arrive as a model's do, and a kernel that launches on a stream of its own must wait
        # for the current one, as it must in a model.
        if dev.type == "cpu":
            # On the host each input is one numpy copy (or conversion) of its own: numpy's copies
            # are single-threaded, where torch's clone and to() start the OpenMP pool, whose
            # threads spin against each other on a machine already busy.
            arrays = [_host_tensor(torch, a.reshape(shape), dtype) for a, shape in zip(flats, shapes)]
            return [own if back == tuple(range(len(shape))) else own.permute(back)
                    for own, back, shape in zip(arrays, orders, shapes)]
        host = torch.from_numpy(np.concatenate([a.reshape(-1) for a in flats]))
        wide = host.pin_memory().to(dev, non_blocking=True)
        arrays, start = [], 0
        for a, back, shape in zip(flats, orders, shapes):
            part = wide[start:start + a.size].view(shape)
            start += a.size
            # Each input its own tensor, as a user's call would pass them (never a view of another
            # input's memory, never the case's own); narrowed where it lives, in microseconds.
            own = part.clone() if dtype == "float32" else part.to(want)
            arrays.append(own if back == tuple(range(len(shape))) else own.permute(back))
        return arrays

    def check_output(obj: Any, shape: tuple[int, ...], what: str) -> None:
        if (not isinstance(obj, torch.Tensor) or obj.dtype != want or tuple(obj.shape) != shape
                or obj.device != dev):
            raise _mismatch(obj, what, f"a torch.Tensor of dtype {want} and shape {shape} on {dev}")

    def from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        return download([(obj, shape, what)], [])[0][0]

    def download(outputs: list[tuple[Any, tuple[int, ...], str]],
                 inputs: list[tuple[str, Any, Any]]) -> tuple[list[np.ndarray], str | None]:
        for obj, shape, what in outputs:
            check_output(obj, shape, what)
        resized = _resized(inputs)
        if resized is not None:
            return [], resized
        if dev.type == "cpu":  # read where they are, widened by numpy (as ``upload`` says why)
            arrays = [_host_float32(obj, dtype) for obj, _, _ in outputs]
            return arrays, next((f"modified its input {name} in place" for name, after, before in inputs
                                 if bool(_torch_changed(after, before))), None)
        # Widened (exactly) where the tensors live, with one flag per checked input, then copied
        # to the host together.
        parts = [obj.detach().to(torch.float32).reshape(-1) for obj, _, _ in outputs]
        if inputs:
            parts.append(torch.stack([_torch_changed(after, before)
                                      for _, after, before in inputs]).to(torch.float32))
        host = torch.cat(parts).cpu().numpy() if parts else np.empty(0, np.float32)
        arrays, start = [], 0
        for _, shape, _ in outputs:
            size = int(np.prod(shape, dtype=np.int64))
            arrays.append(host[start:start + size].reshape(shape))
            start += size
        how = next((f"modified its input {name} in place"
                    for (name, _, _), hit in zip(inputs, host[start:]) if hit), None)
        return arrays, how

    def mask_to_native(m: np.ndarray) -> Any:
        return torch.from_numpy(np.array(m, dtype=bool, copy=True)).to(dev)

    def mask_from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        if (not isinstance(obj, torch.Tensor) or obj.dtype != torch.bool or tuple(obj.shape) != shape
                or obj.device != dev):
            raise _mismatch(obj, what, f"a torch.Tensor of dtype torch.bool and shape {shape} on {dev}")
        return obj.detach().cpu().numpy().copy()

    # The inputs are compared with their snapshots in ``download``, with the outputs.
    return Adapter("torch", dtype, str(dev), dev.type == "cuda", to_native, from_native,
                   mask_to_native, mask_from_native,
                   (lambda t: t.clone()) if dev.type == "cuda" else _host_snapshot, None, upload, download)


def _torch_changed(after: Any, before: Any) -> Any:
    """A 0-d bool tensor: whether ``after`` differs from ``before`` anywhere (NaN equals NaN).

    On the host the bits are compared first, in numpy: equal bits are equal values, NaNs included,
    so the element-wise test runs only where some bit changed (-0 for 0, another NaN). On a GPU
    that answer would cost a round trip of its own, so the test stays a tensor there."""
    if after.device.type == "cpu" and after.shape == before.shape and after.dtype == before.dtype:
        mine, theirs = _host_bits(after), _host_bits(before)
        if mine is not None and theirs is not None and np.array_equal(mine, theirs):
            return after.new_zeros((), dtype=bool)
    if after.is_floating_point():
        return ((after != before) & ~(after.isnan() & before.isnan())).any()
    return (after != before).any()


def _host_bits(t: Any) -> np.ndarray | None:
    """A host tensor's elements as numpy integers of the same width (its bits; booleans and
    integers as they are), sharing its memory and strides; None where numpy cannot view it."""
    import torch

    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}.get(t.element_size())
    try:
        return (t.detach().view(bits) if t.is_floating_point() else t.detach()).numpy()
    except (RuntimeError, TypeError):  # a conjugate or negative view, a layout numpy lacks
        return None


def _host_snapshot(t: Any) -> Any:
    """A host tensor's copy in its own memory order, its bits copied by numpy (torch's clone would
    start the OpenMP pool for it)."""
    import torch

    own = torch.empty_like(t, memory_format=torch.preserve_format)
    mine, theirs = _host_bits(own), _host_bits(t)
    if mine is None or theirs is None:
        return t.clone()
    mine[...] = theirs
    return own


def _host_float32(t: Any, dtype: str) -> np.ndarray:
    """A host tensor of the storage type ``dtype`` as float32 numpy of its own (exact: every value
    widens)."""
    import torch

    bits = _host_bits(t)
    if bits is None:
        return t.detach().to(torch.float32).numpy().copy()
    return from_numpy_storage(bits.view(numpy_dtype(dtype)))


def _host_tensor(torch: Any, a: np.ndarray, dtype: str) -> Any:
    """float32 values ``a`` (exact in the storage type ``dtype``, checked) as a host tensor of that
    type in memory of its own, written by numpy (exact: every value is representable)."""
    own = torch.empty(a.shape, dtype=getattr(torch, dtype))
    bits = _host_bits(own)
    bits[...] = (a if dtype == "float32" else a.astype(numpy_dtype(dtype))).view(bits.dtype)
    return own


# --- JAX ---------------------------------------------------------------------------------------


def _jax_adapter(dtype: str, device: str | None) -> Adapter:
    jax = _import("jax")
    try:
        dev = jax.devices()[0] if device is None else jax.devices(_jax_platform(device))[0]
    except RuntimeError as exc:
        raise UsageError(f"device {device!r}: JAX has no such device ({exc}); try 'cpu' or 'gpu'") from None
    want = numpy_dtype(dtype)  # JAX's bfloat16 is ml_dtypes'

    def to_native(a: np.ndarray, name: str, check: bool = True) -> Any:
        return jax.device_put(to_numpy_storage(a, dtype, name=name), dev)

    def from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        expected = f"a jax.Array of dtype {want.name} and shape {shape} on {dev}"
        if (not isinstance(obj, jax.Array) or np.dtype(obj.dtype) != want or tuple(obj.shape) != shape
                or obj.devices() != {dev}):
            raise _mismatch(obj, what, expected)
        return from_numpy_storage(np.asarray(obj))

    def mask_from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        if (not isinstance(obj, jax.Array) or np.dtype(obj.dtype) != np.bool_
                or tuple(obj.shape) != shape or obj.devices() != {dev}):
            raise _mismatch(obj, what, f"a jax.Array of dtype bool and shape {shape} on {dev}")
        return np.array(obj, dtype=bool)

    def changed(inputs: list[tuple[str, Any, Any]]) -> str | None:
        # A jax.Array cannot change; a kernel can only donate it (jit's donate_argnums), which
        # deletes it under the caller.
        return next((f"donated its input {name} (the array was deleted by the call)"
                     for name, after, _ in inputs if after.is_deleted()), None)

    return Adapter("jax", dtype, str(dev), dev.platform == "gpu", to_native, from_native,
                   lambda m: jax.device_put(np.array(m, dtype=bool), dev), mask_from_native,
                   lambda a: a, changed)


def index_to_native(adapter: Adapter, a: np.ndarray) -> Any:
    """An integer array (cross-entropy's target) as the framework's int64 array on the adapter's
    device, a copy of its own (JAX without x64 keeps int32, its widest)."""
    host = np.array(a, dtype=np.int64, copy=True)
    if adapter.framework == "numpy":
        return host
    if adapter.framework == "torch":
        torch = _import("torch")
        return torch.from_numpy(host).to(adapter.device)
    if adapter.framework == "jax":
        jax = _import("jax")
        return jax.numpy.asarray(host)
    cupy = _import("cupy")
    with cupy.cuda.Device(int(adapter.device.split(":")[1])):
        return cupy.asarray(host)


def _jax_platform(device: str) -> str:
    name = device.split(":")[0]
    return "gpu" if name == "cuda" else name


# --- CuPy --------------------------------------------------------------------------------------


def _cupy_adapter(dtype: str, device: str | None) -> Adapter:
    cupy = _import("cupy")
    index = 0
    if device is not None:
        text = device.removeprefix("cuda:").removeprefix("cuda")
        if not (text == "" or text.isdigit()):
            raise UsageError(f"device must be 'cuda' or 'cuda:N' for framework cupy but was {device!r}")
        index = int(text or 0)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver, no device
        raise UsageError(f"framework cupy needs a CUDA GPU: {type(exc).__name__}: {exc}") from None
    if index >= count:
        raise UsageError(f"device {device!r}: CuPy sees {count} CUDA devices")
    if dtype == "bfloat16" and not hasattr(cupy, "bfloat16"):
        raise UsageError(f"CuPy {cupy.__version__} has no bfloat16 dtype; hunt a bfloat16 kernel "
                         f"through {spelled('framework')} torch or jax")
    want = np.dtype(getattr(cupy, "bfloat16", None) if dtype == "bfloat16" else numpy_dtype(dtype))

    def to_native(a: np.ndarray, name: str, check: bool = True) -> Any:
        with cupy.cuda.Device(index):
            return cupy.asarray(to_numpy_storage(a, dtype, name=name))

    def from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        expected = f"a cupy.ndarray of dtype {want.name} and shape {shape} on cuda:{index}"
        if (not isinstance(obj, cupy.ndarray) or obj.dtype != want or obj.shape != shape
                or obj.device.id != index):
            raise _mismatch(obj, what, expected)
        return from_numpy_storage(cupy.asnumpy(obj))

    def mask_to_native(m: np.ndarray) -> Any:
        with cupy.cuda.Device(index):
            return cupy.asarray(np.array(m, dtype=bool))

    def mask_from_native(obj: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        if (not isinstance(obj, cupy.ndarray) or obj.dtype != np.bool_ or obj.shape != shape
                or obj.device.id != index):
            raise _mismatch(obj, what, f"a cupy.ndarray of dtype bool and shape {shape} on cuda:{index}")
        return cupy.asnumpy(obj)

    def changed(inputs: list[tuple[str, Any, Any]]) -> str | None:
        def hits() -> np.ndarray:
            with cupy.cuda.Device(index):
                return cupy.asnumpy(cupy.stack([
                    ((after != before) & ~(cupy.isnan(after) & cupy.isnan(before))).any()
                    if after.dtype.kind == "f" else (after != before).any()
                    for _, after, before in inputs]))

        return _first_change(inputs, hits)

    return Adapter("cupy", dtype, f"cuda:{index}", True, to_native, from_native, mask_to_native,
                   mask_from_native, lambda a: a.copy(), changed)


def _first_change(inputs: list[tuple[str, Any, Any]], hits: Callable[[], np.ndarray]) -> str | None:
    """How the first of ``inputs`` (name, after the call, snapshot) changed, or None: a new shape
    is read on the host; ``hits`` compares the values where they live, one flag per input, in a
    single copy back."""
    resized = _resized(inputs)
    if resized is not None:
        return resized
    if not inputs:
        return None
    return next((f"modified its input {name} in place"
                 for (name, _, _), hit in zip(inputs, hits()) if hit), None)


def _resized(inputs: list[tuple[str, Any, Any]]) -> str | None:
    """How the first input whose shape the call changed changed, read on the host; None: none."""
    name = next((name for name, after, before in inputs if after.shape != before.shape), None)
    return None if name is None else f"changed the shape of its input {name} in place"


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or a build that fails to load its native libraries
        raise UsageError(f"framework {name} is not importable here ({type(exc).__name__}: {exc}); "
                         f"install it or choose another {spelled('framework')}") from None


_ADAPTERS = {"numpy": _numpy_adapter, "torch": _torch_adapter, "jax": _jax_adapter,
             "cupy": _cupy_adapter}


def get_adapter(framework: str, *, dtype: str = "float32", device: str | None = None) -> Adapter:
    """The adapter for ``framework`` (one of :data:`FRAMEWORKS`) and storage type ``dtype``.

    Raises :class:`~normprops.errors.UsageError` naming what is wrong: an unknown framework, one
    that is not importable, a device it does not have, a dtype it cannot hold."""
    if framework not in _ADAPTERS:
        raise UsageError(f"framework must be one of {', '.join(FRAMEWORKS)} but was {framework!r}")
    try:
        get_dtype(dtype)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return _ADAPTERS[framework](dtype, device)


def framework_status(framework: str) -> tuple[bool, str]:
    """Whether ``framework`` can be used here, and its version or why not (never raises)."""
    try:
        module = _import(framework)
    except UsageError as exc:
        return False, str(exc)
    return True, f"{framework} {getattr(module, '__version__', '?')}"
