"""Targets: anything the hunt can call on a case, with the contract checked on every call.

A target is one of our registered kernels (``KernelSpec``), a user's callable, or a user's CUDA
kernel. Either way it is called with the op's user signature (softmax ``fn(x)``, layernorm
``fn(x, gamma, beta, eps)``, rmsnorm ``fn(x, gamma, eps)``, masked softmax ``fn(x, mask, scale)``)
on fresh copies of the inputs, as arrays
of its framework and storage type (:mod:`normprops.frameworks`), and what comes back must be that
framework's array of the same type, shape and device.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from normprops.case import Case, ShapeConstraints
from normprops.declaration import VARIANCE_OPS, Declaration
from normprops.errormodel import ErrorModel
from normprops.errors import ContractError, FatalTargetError, ImplError, UsageError, a_or_an
from normprops.flags import flag
from normprops.frameworks import Adapter, get_adapter, index_to_native
from normprops.kernelspec import KernelSpec
from normprops.ops import (
    INFORMATIVE,
    OPTIONAL,
    OpSpec,
    get_op,
)
from normprops.timeouts import call_with_timeout

__all__ = ["Target", "defined_at", "kernel_source", "same_source", "VARIANCE_OPS", "WarningLog",
           "GPU_BACKENDS", "GPU_STRESS_ROWS", "target_from_spec", "target_from_callable",
           "target_from_cuda_source"]

GPU_BACKENDS = frozenset({"cuda", "cuda-prod", "cuda-cluster", "torch-cuda", "cuda-user", "torch-compile",
                          "liger", "quack"})
GPU_STRESS_ROWS = 2048


class WarningLog:
    """Warnings a target's own code raised (numpy's RuntimeWarnings, say), counted rather than
    printed: the first message is kept."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def add(self, caught: list[warnings.WarningMessage]) -> None:
        if caught and self.first is None:
            w = caught[0]
            self.first = f"{w.category.__name__}: {w.message}"
        self.count += len(caught)

    def take(self) -> tuple[int, str | None]:
        """The count and first message since the last call, and start afresh."""
        found = self.count, self.first
        self.count, self.first = 0, None
        return found


_NUMPY_FLOAT32 = get_adapter("numpy", dtype="float32")


@dataclass(frozen=True)
class Target:
    name: str
    backend: str
    fn: Callable[..., object]
    # What the kernel declares (its op, arrays, widths, promises, reduction, mask, call timeout):
    # read through the properties below; changed with :meth:`declared`.
    declaration: Declaration
    claims: frozenset[str] | None = None  # None: a foreign target claims nothing in advance
    # GPU targets: determinism and row isolation are also checked on the case's rows tiled into a
    # batch this large, launched twice, so a race has thousands of blocks to show itself in.
    stress_rows: int = 0
    # How the arguments are passed (framework, storage type, device). Our registered kernels take
    # float32 numpy arrays whatever their storage type; a user's kernel takes its own.
    adapter: Adapter = _NUMPY_FLOAT32
    # Cases every hunt of this target tries first, as explicit examples (a known bug's committed
    # finding, so that a hunt meets it whatever the seed).
    examples: tuple[Case, ...] = field(default=(), compare=False, repr=False)
    # Failures its kernel saved earlier, as (property, minimal input): each hunt round that still
    # judges the property tries the input first, after ``examples`` (a re-run meets the last
    # failure at once; replay.with_saved_examples).
    saved: tuple[tuple[str, Case], ...] = field(default=(), compare=False, repr=False)
    warnings: WarningLog = field(default_factory=WarningLog, compare=False, repr=False)
    # Where a user's kernel is defined, MODULE:QUALNAME or FILE:KERNEL (None: a registry entry, whose
    # backend and name are unique): two kernels of one name in two modules keep their fixtures apart.
    source: str | None = None

    def declared(self, **changes: Any) -> Target:
        """This target with ``changes`` to its declaration (``ignore=``, ``error_model=``, ...)."""
        return replace(self, declaration=replace(self.declaration, **changes))

    @property
    def op(self) -> str:
        return self.declaration.op

    @property
    def dtype(self) -> str:
        """Storage type: the hunt's cases hold values exact in it."""
        return self.declaration.dtype

    @property
    def error_model(self) -> ErrorModel:
        return self.declaration.error_model

    @property
    def ignore(self) -> frozenset[str]:
        """Properties the kernel does not promise: never judged."""
        return self.declaration.ignore

    @property
    def opt_in(self) -> frozenset[str]:
        """Optional properties judged too (ops.OPTIONAL)."""
        return self.declaration.opt_in

    @property
    def constraints(self) -> ShapeConstraints:
        return self.declaration.constraints

    @property
    def timeout_s(self) -> float | None:
        """A call that does not return in time stops the hunt."""
        return self.declaration.call_timeout

    @property
    def row_reduction(self) -> str:
        """Gradient ops: how the kernel combines rows into dgamma and dbeta (ops.ROW_REDUCTIONS)."""
        return self.declaration.row_reduction

    @property
    def mask_fill(self) -> float | None:
        """Masked softmax: None, a boolean mask; else the additive mask's fill."""
        return self.declaration.mask_fill

    @property
    def label(self) -> str:
        return f"{self.op}[{self.name}]"

    @property
    def kernel(self) -> str:
        """``backend:name``, as its fixtures record the kernel that failed them."""
        return f"{self.backend}:{self.name}"

    @property
    def unjudged(self) -> frozenset[str]:
        """Properties not judged: those it does not promise, and the optional ones it did not ask
        for."""
        return self.ignore | (OPTIONAL - self.opt_in)

    @property
    def information(self) -> frozenset[str]:
        """Properties hunted though not judged, their findings shown as information (range safety
        for a kernel that does not ask for it); never those it declines with ``ignore``, nor range
        safety for an op none of whose families draws a row outside its accuracy domain."""
        shown = INFORMATIVE if get_op(self.op).range_families else INFORMATIVE - {"range_safety"}
        return (shown & self.unjudged) - self.ignore

    def run(self, case: Case, *, check_inputs: bool = True) -> np.ndarray | tuple[np.ndarray, ...]:
        """Call the target on fresh copies of ``case``'s inputs; the output as float32 numpy (a
        gradient op of several outputs: a tuple of them, in ``OpSpec.outputs`` order).
        ``check_inputs``: check the inputs are exact in the storage type, and raise ContractError
        if the call changed them (the stress batches skip both: they repeat rows whose own launch
        was checked)."""
        if case.op != self.op:
            raise ValueError(f"case is for op {case.op!r} but target {self.label} computes {self.op!r}")
        if case.dtype != self.dtype:
            raise ValueError(f"case holds {case.dtype} values but target {self.label} stores {self.dtype}")
        if case.mask_fill != self.mask_fill:
            raise ValueError(f"case hands its mask over as {case.mask_fill!r} but target "
                             f"{self.label} takes {self.mask_fill!r}")
        spec = get_op(self.op)
        params = spec.params
        args = case.args()
        native = self._natives(params, args, check_inputs, spec)
        arrays = [(name, before, after) for name, before, after in zip(params, args, native)
                  if check_inputs and isinstance(before, np.ndarray)]
        snapshot = self.adapter.snapshot
        snapshots = [snapshot(after) for _, _, after in arrays] if snapshot is not None else []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = call_with_timeout(self.fn, native, self.timeout_s)
        self.warnings.add(caught)
        converted: list[tuple[int, str]] = []  # outputs of another type than the storage type's
        if spec.named is not None:
            outputs, converted = _named_outputs(out, case, spec, self.declaration.op_promises)
        elif spec.forward is not None:
            outputs = _gradient_outputs(out, case, spec)
        else:
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            outputs = [(out, case.x.shape, "the output")]
        if converted:  # lse's float32 beside a 16-bit out: each read by an adapter of its type
            others = {i: get_adapter(self.adapter.framework, dtype=dtype, device=self.adapter.device
                                     ).from_native(*outputs[i]) for i, dtype in converted}
            outputs = [item for i, item in enumerate(outputs) if i not in others]
        else:
            others = {}
        # The outputs and the checks where the inputs live, in one copy back (an adapter that
        # takes no snapshot has its inputs read back and compared on the host, below).
        if self.adapter.download is not None and (snapshot is not None or not arrays):
            changes = [(name, after, snap) for (name, _, after), snap in zip(arrays, snapshots)]
            got, how = self.adapter.download(outputs, changes)
            if how is not None:
                raise ContractError(how)
            got = _merged(got, others)
            return got[0] if len(got) == 1 else tuple(got)
        got = _merged([self.adapter.from_native(*item) for item in outputs], others)
        result = got[0] if len(got) == 1 else tuple(got)
        if snapshot is not None and self.adapter.changed is not None:  # compared where they live
            how = self.adapter.changed([(name, after, snap)
                                        for (name, _, after), snap in zip(arrays, snapshots)])
            if how is not None:
                raise ContractError(how)
            return result
        wide = spec.named.float32_inputs if spec.named is not None else ()
        for name, before, after in arrays:  # read back and compared on the host
            what = f"input {name} after the call"
            if before.dtype == bool:
                now = self.adapter.mask_from_native(after, before.shape, what)
            elif before.dtype.kind in "iu":
                now = np.asarray(after)
            elif name in wide:
                now = self._float32_adapter().from_native(after, before.shape, what)
            else:
                now = self.adapter.from_native(after, before.shape, what)
            if _unchanged(before, now):
                continue
            if not np.array_equal(before, now, equal_nan=before.dtype != bool):
                raise ContractError(f"modified its input {name} in place")
        return result

    def _natives(self, params: tuple[str, ...], args: tuple[object, ...], check: bool,
                 spec: OpSpec) -> tuple[object, ...]:
        """The arguments as the framework's arrays: masks as its bool arrays, integer arrays as its
        int64 arrays, float inputs in one copy where the adapter can (``Adapter.upload``), else
        one at a time; those an op hands over in float32 whatever the storage type
        (``NamedArrays.float32_inputs``) through a float32 adapter."""
        wide = spec.named.float32_inputs if spec.named is not None else ()
        floats = [(a, name, check) for name, a in zip(params, args)
                  if isinstance(a, np.ndarray) and a.dtype.kind == "f" and name not in wide]
        uploaded = iter(self.adapter.upload(floats) if self.adapter.upload is not None and floats
                        else [self.adapter.to_native(*item) for item in floats])

        def native(name: str, a: object) -> object:
            if not isinstance(a, np.ndarray):
                return a
            if a.dtype == bool:
                return self.adapter.mask_to_native(a)
            if a.dtype.kind in "iu":
                return index_to_native(self.adapter, a)
            if name in wide:
                return self._float32_adapter().to_native(a, name, check)
            return next(uploaded)

        return tuple(native(name, a) for name, a in zip(params, args))

    def _float32_adapter(self) -> Adapter:
        if self.adapter.dtype == "float32":
            return self.adapter
        return get_adapter(self.adapter.framework, dtype="float32", device=self.adapter.device)


def _unchanged(before: np.ndarray, now: np.ndarray) -> bool:
    """The same bytes: certainly not modified. A byte comparison costs a tenth of the value
    comparison with NaNs equal, which is left to decide the rare rest (a -0 for a +0 is no change)."""
    return before.dtype == now.dtype and before.shape == now.shape and before.tobytes() == now.tobytes()


def _merged(got: list[np.ndarray], others: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The outputs read in the storage type, with those read in another type put back in place."""
    rest = iter(got)
    return [others[i] if i in others else next(rest) for i in range(len(got) + len(others))]


def _named_outputs(out: object, case: Any, spec: OpSpec, promises: Any
                   ) -> tuple[list[tuple[object, tuple[int, ...], str]], list[tuple[int, str]]]:
    """A named-arrays op's outputs as (returned object, its shape, its name), and the positions
    and types of those not in the storage type (attention's float32 lse); ContractError naming
    what came back when it returned another number of arrays than declared."""
    items = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    try:
        expected = spec.named.outputs(case, promises, len(items))  # type: ignore[union-attr]
    except ValueError as exc:
        raise ContractError(str(exc)) from None
    outputs = [(a, shape, name) for a, (name, shape, _) in zip(items, expected)]
    converted = [(i, dtype) for i, (_, _, dtype) in enumerate(expected) if dtype != case.dtype]
    return outputs, converted


def _gradient_outputs(out: object, case: Case, spec: OpSpec) -> list[tuple[object, tuple[int, ...], str]]:
    """A gradient kernel's outputs as (returned object, its shape, its name): dx of x's shape,
    dgamma and dbeta of gamma's; ContractError naming what came back when it returned another
    number of arrays."""
    names = spec.outputs
    items = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(items) != len(names):
        returns = names[0] if len(names) == 1 else f"({', '.join(names)})"
        raise ContractError(f"returned {len(items)} array{'' if len(items) == 1 else 's'}; "
                            f"{spec.name} returns {returns}")
    shapes = {"dx": case.x.shape, "dgamma": (case.cols,), "dbeta": (case.cols,)}
    return [(a, shapes[n], n) for n, a in zip(names, items)]


def target_from_spec(spec: KernelSpec) -> Target:
    """A registered kernel as a target. Ours take float32 numpy arrays whatever their storage type;
    another project's take its framework's arrays of its storage type."""
    if spec.framework == "numpy":
        adapter = _NUMPY_FLOAT32
    else:
        adapter = get_adapter(spec.framework, dtype=spec.dtype, device=spec.device)
    stress = GPU_STRESS_ROWS if spec.backend in GPU_BACKENDS or adapter.on_gpu else 0
    return Target(spec.name, spec.backend, spec.load(), _on(Declaration.from_spec(spec), adapter),
                  spec.claims, stress_rows=stress, adapter=adapter)


def _on(declaration: Declaration, adapter: Adapter) -> Declaration:
    """``declaration`` with the device its arrays live on as ``adapter`` resolved it (torch's
    default: "cuda" where there is one), which its report records."""
    return replace(declaration, device=adapter.device)


def _check_arity(fn: Callable[..., object], params: tuple[str, ...], op: str) -> None:
    """A function that cannot take the op's arguments is a usage error now, not a contract finding
    in every family. Functions whose signature Python cannot read (some C functions) pass."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*params)
    except TypeError:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise UsageError(f"{name}{signature} cannot be called as {op}'s fn({', '.join(params)}); "
                         f"check the op ({flag('op')}, op=)") from None


def target_from_callable(fn: Callable[..., object], *, op: str | None = None, name: str | None = None,
                         declaration: Declaration | None = None, **keywords: Any) -> Target:
    """A user's function as a target: ``fn`` takes the op's user signature in the declared
    framework's arrays of the declared storage type and returns the same kind of array.

    Either ``declaration`` (a :class:`~normprops.declaration.Declaration`) or ``op`` and the
    keywords of :meth:`Declaration.declare <normprops.declaration.Declaration.declare>` (``dtype``,
    ``framework``, ``device``, ``ignore``, ``opt_in``, ``constraints``, ``threads``,
    ``reduction``, ``row_reduction``, ``arithmetic``, ``ftz``, ``variance``, ``mask``,
    ``mask_fill``, ``call_timeout``, also spelled ``timeout_s``), which :func:`normprops.hunt_kernel`
    documents. Raises :class:`~normprops.errors.UsageError` naming a bad argument."""
    if not callable(fn):
        raise UsageError(f"fn must be callable but was {a_or_an(type(fn).__name__)}")
    if declaration is None:
        if op is None:
            raise TypeError("target_from_callable() needs op= (or a declaration=)")
        try:
            spec = get_op(op)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        _check_arity(fn, spec.params, op)
        if "timeout_s" in keywords:
            keywords["call_timeout"] = keywords.pop("timeout_s")
        declaration = Declaration.declare(op=op, **keywords)
    else:
        if op is not None or keywords:
            raise TypeError("target_from_callable() takes a declaration= or op= and its keywords, "
                            "not both")
        _check_arity(fn, get_op(declaration.op).params, declaration.op)
    adapter = get_adapter(declaration.framework, dtype=declaration.dtype, device=declaration.device)
    source = kernel_source(fn)
    label = name or _source_name(source) or getattr(fn, "__name__", None) or type(fn).__name__
    framework = declaration.framework
    return Target(label, "python" if framework == "numpy" else framework, fn,
                  _on(declaration, adapter), stress_rows=GPU_STRESS_ROWS if adapter.on_gpu else 0,
                  adapter=adapter, source=source)


def defined_at(fn: object) -> str | None:
    """Where ``fn`` is defined, ``MODULE:QUALNAME``, when that path leads back to ``fn`` itself
    (a script's ``__main__`` named as its file is imported); None for a callable it does not name
    (a lambda, a function a factory made or a decorator wrapped without ``functools.wraps``, a
    callable instance, a partial, a bound method)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    found: object = sys.modules.get(module)
    try:
        for part in qualname.split("."):
            found = getattr(found, part)
    except Exception:  # a module whose __getattr__ raises names nothing here
        return None
    return f"{_module_name(module)}:{qualname}" if found is fn else None


def kernel_source(fn: object, *, named: str | None = None) -> str | None:
    """Where a user's kernel lives, ``MODULE:NAME``, to keep it apart from kernels of the same
    name elsewhere and to know it again by another name: where it is defined (:func:`defined_at`);
    else the module that holds it under a name (a factory's function, an instance; a bound
    method by where its object is held); else ``named`` (``--impl`` as typed); else its own
    ``__module__:__qualname__``, which the functions one factory makes inside a function share."""
    found = defined_at(fn)
    if found is not None:
        return found
    held, suffix = fn, ""
    if inspect.ismethod(fn):  # o1.method and o2.method are two kernels
        held, suffix = fn.__self__, "." + fn.__name__
    holders = _holders(held)
    if holders:
        module, attr = holders[0]
        return f"{module}:{attr}{suffix}"
    if named is not None:
        return named
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{_module_name(module)}:{qualname}"
    return None


_MAIN = ("__main__", "__mp_main__")


def _holders(obj: object) -> list[tuple[str, str]]:
    """The (module, name) pairs under which modules hold ``obj``, the likeliest home first. A
    script's own variables count only where no module holds it (a loop's variable holds one
    kernel after another); a package that re-exports it gives way to the module it comes from;
    the modules of its own package (that of the function it wraps, or of its class) come first."""
    pairs = {(name, attr) for name, module in list(sys.modules.items())
             for attr, value in list(_namespace(module).items()) if value is obj}
    if any(module not in _MAIN for module, _ in pairs):
        pairs = {(module, attr) for module, attr in pairs if module not in _MAIN}
    modules = {module for module, _ in pairs}
    pairs = {(m, a) for m, a in pairs if not any(other.startswith(m + ".") for other in modules)}
    home = _package_of(obj)
    ranked = sorted(pairs, key=lambda pair: (pair[0].partition(".")[0] != home, pair))
    return [(_module_name(module), attr) for module, attr in ranked]


def _package_of(obj: object) -> str | None:
    """The top-level package ``obj`` comes from: its function's (through ``__wrapped__``), else
    its class's."""
    try:
        inner = inspect.unwrap(obj) if callable(obj) else obj
    except ValueError:  # a __wrapped__ cycle
        inner = obj
    module = getattr(inner, "__module__", None)
    if not isinstance(module, str) or isinstance(inner, type(sys)):
        module = getattr(type(inner), "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) else None


def _source_name(source: str | None) -> str | None:
    """The kernel's name in ``source`` (``rms_norm`` of ``pkg._impl:rms_norm``, ``Cls.method``),
    None where it is a factory's inner function or a lambda (``make.<locals>.kernel``)."""
    name = None if source is None else source.rpartition(":")[2]
    return name if name and "<" not in name else None


def _namespace(module: object) -> dict[str, Any]:
    """A module's own attributes, read without running anything (a lazily loaded module stays
    unloaded)."""
    if not isinstance(module, type(sys)):
        return {}
    try:
        space = object.__getattribute__(module, "__dict__")
    except Exception:
        return {}
    return space if isinstance(space, dict) else {}


def _module_name(module: str) -> str:
    """``module``, a script run as ``__main__`` named as it is imported (``python -m tools.run``
    is ``tools.run``) or by its file (``python tools/run.py`` is ``tools/run.py``, relative to the
    working directory): two scripts are two places, and neither is a package's module."""
    if module not in _MAIN:
        return module
    main = sys.modules.get(module)
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if isinstance(name, str) and name and name not in _MAIN:
        return name
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return module
    where = Path(path).resolve()
    try:
        return where.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return where.as_posix()


def same_source(a: str, b: str) -> bool:
    """Whether two kernel sources (MODULE:QUALNAME, FILE:KERNEL) name one kernel: the same function,
    in the same module as imported by either name (``tests.kernels`` and ``kernels``) or the same
    file by either path (``src/k.cu`` and ``k.cu``)."""
    (where_a, _, what_a), (where_b, _, what_b) = a.rpartition(":"), b.rpartition(":")
    if what_a != what_b:
        return False
    if where_a == where_b:
        return True
    long, short = (where_a, where_b) if len(where_a) > len(where_b) else (where_b, where_a)
    # A file's path is cut at its folders, a module's dotted name at its packages.
    boundary = "/" if "/" in long or long.endswith(FILE_SUFFIXES) else "."
    return bool(short) and long.endswith(short) and long[-len(short) - 1] == boundary


CUDA_SUFFIXES = (".cu", ".cuh")
FILE_SUFFIXES = (*CUDA_SUFFIXES, ".py")  # a source that names a file (a CUDA source, a script)


def target_from_cuda_source(path: str | Path, *, kernel: str, declaration: Declaration) -> Target:
    """A user's CUDA kernel (standard signature for the declared op, one block of the declared
    threads per row, float32 device pointers)."""
    op, threads = declaration.op, declaration.error_model.threads
    # What the user wrote is checked before the GPU is: a wrong path or flag is theirs to fix on
    # any machine.
    source = Path(path)
    if not source.is_file():
        raise ImplError(f"{flag('cuda_source')} {path}: "
                        f"{'a directory' if source.is_dir() else 'no such file'}; give the .cu file "
                        f"that defines {kernel}")
    from normprops.cuda.build import KernelCompileError, cuda_status

    ok, why = cuda_status()
    if not ok:
        raise ImplError(f"{flag('cuda_source')} needs a usable CUDA GPU: {why}")
    from normprops.cuda.textbook import KernelFault, user_kernel

    try:
        fn = user_kernel(source, name=kernel, op=op, threads=threads)
    except (FileNotFoundError, LookupError, KernelCompileError) as exc:
        raise ImplError(str(exc)) from exc

    def guarded(*args: Any) -> object:
        try:
            return fn(*args)
        except KernelFault as exc:
            raise FatalTargetError(str(exc)) from exc

    return Target(kernel, "cuda-user", guarded, _on(declaration, _NUMPY_FLOAT32),
                  stress_rows=GPU_STRESS_ROWS, source=f"{path}:{kernel}")
