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
from normprops.errormodel import FOREIGN_ERROR_MODEL, VARIANCES, ErrorModel
from normprops.errors import ContractError, FatalTargetError, ImplError, UsageError, a_or_an
from normprops.frameworks import Adapter, get_adapter
from normprops.kernelspec import KernelSpec
from normprops.masking import MASK_KINDS, mask_fill_value
from normprops.ops import (
    APPLICABLE,
    INFORMATIVE,
    OPTIONAL,
    PROPERTIES,
    ROW_REDUCTIONS,
    USER_ROW_REDUCTION,
    OpSpec,
    check_ignore,
    check_opt_in,
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
    op: str
    backend: str
    fn: Callable[..., object]
    error_model: ErrorModel
    claims: frozenset[str] | None = None  # None: a foreign target claims nothing in advance
    # GPU targets: determinism and row isolation are also checked on the case's rows tiled into a
    # batch this large, launched twice, so a race has thousands of blocks to show itself in.
    stress_rows: int = 0
    ignore: frozenset[str] = frozenset()  # properties the kernel does not promise: never judged
    opt_in: frozenset[str] = frozenset()  # optional properties judged too (ops.OPTIONAL)
    timeout_s: float | None = None  # a call that does not return in time stops the hunt
    dtype: str = "float32"  # storage type: the hunt's cases hold values exact in it
    # How the arguments are passed (framework, storage type, device). Our registered kernels take
    # float32 numpy arrays whatever their storage type; a user's kernel takes its own.
    adapter: Adapter = _NUMPY_FLOAT32
    constraints: ShapeConstraints = ShapeConstraints()
    # Cases every hunt of this target tries first, as explicit examples (a known bug's committed
    # finding, so that a hunt meets it whatever the seed).
    examples: tuple[Case, ...] = field(default=(), compare=False, repr=False)
    # Failures its kernel saved earlier, as (property, minimal input): each hunt round that still
    # judges the property tries the input first, after ``examples`` (a re-run meets the last
    # failure at once; replay.with_saved_examples).
    saved: tuple[tuple[str, Case], ...] = field(default=(), compare=False, repr=False)
    warnings: WarningLog = field(default_factory=WarningLog, compare=False, repr=False)
    # Gradient ops: how the kernel combines rows into dgamma and dbeta (ops.ROW_REDUCTIONS).
    row_reduction: str = "blocks"
    # Masked softmax: None, the mask is handed over as booleans; else as an additive float mask of
    # 0 and this fill (its value in the storage type).
    mask_fill: float | None = None
    # Where a user's kernel is defined, MODULE:QUALNAME or FILE:KERNEL (None: a registry entry, whose
    # backend and name are unique): two kernels of one name in two modules keep their fixtures apart.
    source: str | None = None

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
        for a kernel that does not ask for it); never those it declines with ``ignore``."""
        return (INFORMATIVE & self.unjudged) - self.ignore

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
        native = self._natives(params, args, check_inputs)
        arrays = [(name, before, after) for name, before, after in zip(params, args, native)
                  if check_inputs and isinstance(before, np.ndarray)]
        snapshot = self.adapter.snapshot
        snapshots = [snapshot(after) for _, _, after in arrays] if snapshot is not None else []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = call_with_timeout(self.fn, native, self.timeout_s)
        self.warnings.add(caught)
        if spec.forward is not None:
            outputs = _gradient_outputs(out, case, spec)
        else:
            if isinstance(out, tuple) and len(out) == 1:
                out = out[0]
            outputs = [(out, case.x.shape, "the output")]
        # The outputs and the checks where the inputs live, in one copy back (an adapter that
        # takes no snapshot has its inputs read back and compared on the host, below).
        if self.adapter.download is not None and (snapshot is not None or not arrays):
            changes = [(name, after, snap) for (name, _, after), snap in zip(arrays, snapshots)]
            got, how = self.adapter.download(outputs, changes)
            if how is not None:
                raise ContractError(how)
            return got[0] if len(got) == 1 else tuple(got)
        got = [self.adapter.from_native(*item) for item in outputs]
        result = got[0] if len(got) == 1 else tuple(got)
        if snapshot is not None and self.adapter.changed is not None:  # compared where they live
            how = self.adapter.changed([(name, after, snap)
                                        for (name, _, after), snap in zip(arrays, snapshots)])
            if how is not None:
                raise ContractError(how)
            return result
        for name, before, after in arrays:  # read back and compared on the host
            what = f"input {name} after the call"
            now = (self.adapter.mask_from_native(after, before.shape, what) if before.dtype == bool
                   else self.adapter.from_native(after, before.shape, what))
            if _unchanged(before, now):
                continue
            if not np.array_equal(before, now, equal_nan=before.dtype != bool):
                raise ContractError(f"modified its input {name} in place")
        return result

    def _natives(self, params: tuple[str, ...], args: tuple[object, ...], check: bool) -> tuple[object, ...]:
        """The arguments as the framework's arrays: masks as its bool arrays, float inputs in one
        copy where the adapter can (``Adapter.upload``), else one at a time."""
        floats = [(a, name, check) for name, a in zip(params, args)
                  if isinstance(a, np.ndarray) and a.dtype != bool]
        uploaded = iter(self.adapter.upload(floats) if self.adapter.upload is not None and floats
                        else [self.adapter.to_native(*item) for item in floats])
        return tuple(a if not isinstance(a, np.ndarray)
                     else self.adapter.mask_to_native(a) if a.dtype == bool else next(uploaded)
                     for a in args)


def _unchanged(before: np.ndarray, now: np.ndarray) -> bool:
    """The same bytes: certainly not modified. A byte comparison costs a tenth of the value
    comparison with NaNs equal, which is left to decide the rare rest (a -0 for a +0 is no change)."""
    return before.dtype == now.dtype and before.shape == now.shape and before.tobytes() == now.tobytes()


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
    # Range safety is judged wherever a registered kernel is hunted: its claims say, family by
    # family, what it promises (cuda-prod's norms claim huge), and an unclaimed cell is information.
    opt_in = frozenset({"range_safety"}) - spec.exempt
    return Target(spec.name, spec.op, spec.backend, spec.load(), spec.error_model, spec.claims,
                  stress_rows=stress, ignore=spec.exempt, opt_in=opt_in, dtype=spec.dtype,
                  adapter=adapter, constraints=spec.constraints, row_reduction=spec.row_reduction)


def _check_promises(ignore: object, opt_in: object, op: str) -> tuple[frozenset[str], frozenset[str]]:
    """``ignore`` and ``opt_in`` validated, disjoint, and each optional property one that ``op``
    has: UsageError otherwise."""
    try:
        ignored, asked = check_ignore(ignore), check_opt_in(opt_in)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    both = sorted(ignored & asked)
    if both:
        raise UsageError(f"{', '.join(both)} both ignored and checked (--ignore and --check, ignore= "
                         f"and opt_in=): a kernel promises a property or does not; keep one")
    if "row_order" in asked and get_op(op).forward is None:
        raise UsageError(f"--check row_order (opt_in=) applies to the gradient ops only; op {op} "
                         f"has no dgamma or dbeta")
    if "exact_constant" in asked and op not in ("layernorm", "rmsnorm"):
        raise UsageError(f"--check exact_constant (opt_in=) applies to layernorm and rmsnorm only; op "
                         f"{op} has no row whose output is exactly known")
    for names, flags in ((ignored, "--ignore (ignore=)"), (asked, "--check (opt_in=)")):
        foreign = sorted(names - APPLICABLE[op])
        if foreign:  # a promise about a property the op never has is a mistake, not a no-op
            raise UsageError(f"{flags} {','.join(foreign)}: op {op} is never judged on "
                             f"{'it' if len(foreign) == 1 else 'them'}; its properties: "
                             f"{', '.join(p for p in PROPERTIES if p in APPLICABLE[op])}")
    return ignored, asked


def _check_arithmetic(arithmetic: str, dtype: str) -> None:
    """bfloat16 arithmetic needs 16-bit storage: on float32 storage it would judge float32 outputs
    with bounds 65536 times wider, and pass what float32 arithmetic fails."""
    if arithmetic == "bfloat16" and dtype == "float32":
        raise UsageError("--arithmetic bfloat16 (arithmetic=\"bfloat16\") declares a kernel whose every "
                         "operation rounds to bfloat16, which its float32 storage does not; for a "
                         "kernel that stores bfloat16, add --dtype bfloat16 (dtype=\"bfloat16\")")


#: The ops that compute a variance, which ``variance=`` (--variance) describes.
VARIANCE_OPS = ("layernorm", "layernorm_backward")


def _check_variance(variance: str, op: str) -> None:
    """A variance is layer norm's: declared for another op it would mean nothing."""
    if variance not in VARIANCES:
        raise UsageError(f"--variance (variance=) must be one of {', '.join(VARIANCES)} but was "
                         f"{variance!r}: two_pass for a variance around the mean (or Welford's), "
                         f"one_pass for E[x^2] - E[x]^2")
    if variance != "two_pass" and op not in VARIANCE_OPS:
        raise UsageError(f"--variance (variance=) applies to --op {' and '.join(VARIANCE_OPS)} only; "
                         f"op {op} computes no variance")


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
                         f"check the op (--op, op=)") from None


def target_from_callable(fn: Callable[..., object], *, op: str, name: str | None = None,
                         dtype: str = "float32", framework: str = "numpy",
                         device: str | None = None, ignore: frozenset[str] | tuple[str, ...] = (),
                         constraints: ShapeConstraints = ShapeConstraints(),
                         threads: int | None = None, ftz: bool = False,
                         reduction: str = "sequential", arithmetic: str = "float32",
                         opt_in: frozenset[str] | tuple[str, ...] = (),
                         timeout_s: float | None = None, row_reduction: str | None = None,
                         mask: str = "bool", mask_fill: float | str | None = None,
                         variance: str = "two_pass") -> Target:
    """A user's function as a target: ``fn`` takes the op's user signature in ``framework``'s
    arrays of ``dtype`` on ``device`` and returns the same kind of array.

    ``mask`` (masked softmax): "bool" hands the mask over as booleans; "additive" as a float array
    of 0 and ``mask_fill`` ("-inf", the default; "lowest", the storage type's lowest finite value;
    or a negative number, rounded to the storage type, one past its range taken as its lowest
    finite value), for a kernel computing
    ``softmax(scale * x + mask)``.

    ``threads``: how many threads cooperate on a row (the depth of the error bound's reduction;
    default 32); ``reduction``: "sequential" (each thread adds its share in turn) or "tree"
    (pairwise); ``arithmetic``: the type it computes in ("float32", or "bfloat16" for a kernel
    whose every operation rounds to bfloat16). ``ftz``: the kernel flushes subnormals to zero (the
    tolerance allows for it). ``opt_in``: optional properties it promises too ("exact_constant";
    "range_safety", the rows where the declared arithmetic must overflow, otherwise hunted for
    information only; "row_order" for a
    gradient whose dgamma and dbeta do not depend on the order of the rows). ``row_reduction``: how a
    gradient kernel combines rows into dgamma and dbeta (``ops.ROW_REDUCTIONS``; None, the default:
    ``ops.USER_ROW_REDUCTION``, "sequential", which bounds every order of the rows, np.sum(axis=0)'s
    and torch's sum(dim=0)'s among them; "blocks" for per-block partials over ``threads`` blocks
    joined in a tree, a sharper bound). ``variance``: how a layer norm
    (or its gradient) forms the variance: "two_pass" (around the mean, or Welford's) or
    "one_pass" (``E[x^2] - E[x]^2``, judged with a bound that grows like ``kappa^2``).
    Raises :class:`~normprops.errors.UsageError` naming a bad argument."""
    if not callable(fn):
        raise UsageError(f"fn must be callable but was {a_or_an(type(fn).__name__)}")
    try:
        spec = get_op(op)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_arity(fn, spec.params, op)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UsageError(f"threads must be a positive integer but was {threads!r}")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not timeout_s > 0):
        raise UsageError(f"call timeout (--call-timeout, call_timeout=) must be a positive number of "
                         f"seconds but was {timeout_s!r}")
    if row_reduction is not None and row_reduction not in ROW_REDUCTIONS:
        raise UsageError(f"row_reduction must be one of {', '.join(ROW_REDUCTIONS)} but was "
                         f"{row_reduction!r}")
    if spec.forward is None:  # the row sums below exist in the gradient ops only
        if row_reduction is not None:
            raise UsageError(f"--row-reduction (row_reduction=) applies to the gradient ops only; op "
                             f"{op} sums no rows into dgamma or dbeta: drop it")
        row_reduction = "blocks"  # unread: a forward target sums no rows
    elif row_reduction is None:
        row_reduction = USER_ROW_REDUCTION
    adapter = get_adapter(framework, dtype=dtype, device=device)
    fill = _mask_fill(op, mask, mask_fill, dtype)
    _check_variance(variance, op)
    try:
        model = replace(FOREIGN_ERROR_MODEL, ftz=ftz, reduction=reduction,
                        arithmetic=arithmetic, variance=variance,
                        **({} if threads is None else {"threads": threads}))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _check_arithmetic(arithmetic, dtype)
    ignored, chosen = _check_promises(ignore, opt_in, op)
    source = kernel_source(fn)
    label = name or _source_name(source) or getattr(fn, "__name__", None) or type(fn).__name__
    return Target(label, op, "python" if framework == "numpy" else framework, fn, model,
                  stress_rows=GPU_STRESS_ROWS if adapter.on_gpu else 0,
                  ignore=ignored, opt_in=chosen, timeout_s=timeout_s, dtype=dtype,
                  adapter=adapter, constraints=constraints, row_reduction=row_reduction,
                  mask_fill=fill, source=source)


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


def _mask_fill(op: str, mask: str, mask_fill: float | str | None, dtype: str) -> float | None:
    """The additive mask's fill as the storage type holds it, None for a boolean mask; UsageError
    for a mask convention given to an op without a mask, or a bad fill."""
    if mask not in MASK_KINDS:
        raise UsageError(f"--mask (mask=) must be one of {', '.join(MASK_KINDS)} but was {mask!r}")
    if not get_op(op).has_mask:
        if mask != "bool" or mask_fill is not None:
            given = "--mask-fill (mask_fill=)" if mask == "bool" else "--mask (mask=)"
            raise UsageError(f"{given} applies to --op masked_softmax only; op {op} takes no mask")
        return None
    if mask == "bool":
        if mask_fill is not None:
            raise UsageError(f"--mask-fill {mask_fill} (mask_fill=) needs --mask additive "
                             f"(mask=\"additive\"): a boolean mask has no fill")
        return None
    try:
        return mask_fill_value("-inf" if mask_fill is None else mask_fill, dtype=dtype)
    except ValueError as exc:
        raise UsageError(f"--mask-fill (mask_fill=): {exc}") from None


def target_from_cuda_source(path: str | Path, *, op: str, kernel: str, threads: int = 256,
                            ignore: frozenset[str] | tuple[str, ...] = (),
                            constraints: ShapeConstraints = ShapeConstraints(),
                            ftz: bool = False, reduction: str = "sequential",
                            opt_in: frozenset[str] | tuple[str, ...] = (),
                            variance: str = "two_pass") -> Target:
    """A user's CUDA kernel (standard signature for ``op``, one block of ``threads`` per row)."""
    get_op(op)
    _check_variance(variance, op)
    # What the user wrote is checked before the GPU is: a wrong path or flag is theirs to fix on
    # any machine.
    source = Path(path)
    if not source.is_file():
        raise ImplError(f"--cuda-source {path}: {'a directory' if source.is_dir() else 'no such file'}"
                        f"; give the .cu file that defines {kernel}")
    try:
        model = replace(FOREIGN_ERROR_MODEL, threads=threads, ftz=ftz, reduction=reduction,
                        variance=variance)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ignored, chosen = _check_promises(ignore, opt_in, op)
    from normprops.cuda.build import KernelCompileError, cuda_status

    ok, why = cuda_status()
    if not ok:
        raise ImplError(f"--cuda-source needs a usable CUDA GPU: {why}")
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

    return Target(kernel, op, "cuda-user", guarded, model, stress_rows=GPU_STRESS_ROWS,
                  ignore=ignored, opt_in=chosen, constraints=constraints, source=f"{path}:{kernel}")
