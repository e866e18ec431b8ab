"""The bandwidth table on the GPU: the textbook kernels and their predictions, the production kernels against
their peers (PyTorch, Liger-Kernel, QuACK), the RMS-versus-two-pass gates and the targets.

Every kernel is priced at its op's bytes (one read and one write of the row; the fused add + RMS
norm two of each): ``ask GB/s``. Timing is by CUDA events (``cupy.cuda.Event``) around ``reps``
back-to-back launches, after a warm-up per kernel; ``rounds`` interleaved rounds go over every kernel
of a case in turn, and the median and spread of the rounds are reported. We time with our own events
rather than ``cupyx.profiler.benchmark`` because the rounds must interleave across kernels (so clock
and thermal drift hit all kernels alike), which that helper, timing one function at a time, does
not do. A spin kernel keeps the GPU busy while the host enqueues each timed batch, so a time is the
GPU's, not the host's; never a host clock around an asynchronous launch. Peers run on the very
buffers ours do (zero-copy through DLPack).

Floors, measured in the same process: the ``copyFloor`` kernel of kernels.cu (same launch shape as the
kernels) and the device-to-device memcpy (the true floor). Case sets: the textbook's two 64 MiB shapes;
L2-scaled ones (at least 16x the device's L2 each way: 1 GiB on the H200); the decode-sized 64 x
8192; and ``model``: hidden sizes and vocabularies of real models at decode and prefill sizes
(:data:`MODEL_HIDDEN`, :data:`MODEL_VOCAB`). With ``graphs``, the decode cases are timed twice more:
without the spin (what a caller that enqueues one call at a time sees) and as CUDA graph replays.

Needs CuPy and a GPU for measuring; the cases, tables, gates, targets and predictions are plain
functions of the rows (tested without a GPU).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TextIO

import numpy as np

from normprops.specs import KERNELS
from normprops.strategies import get_dtype

__all__ = [
    "BenchCase",
    "BenchRow",
    "BenchError",
    "Gate",
    "LaunchRow",
    "LeadRow",
    "Measurement",
    "Note",
    "Prediction",
    "bench_cases",
    "format_cases",
    "l2_bytes_here",
    "measure",
    "run_bench",
    "gates",
    "targets",
    "lead_table",
    "lead_targets",
    "predictions",
    "format_table",
    "format_lead_table",
    "write_outputs",
    "GATE_RATIO",
    "LEAD_MEMCPY_TARGET",
    "SETS",
    # the building blocks, for scripts/ (sweep_prod, ab_bits, launch_once) and the tests
    "rows_for",
    "random_storage",
    "device_storage",
    "spin_wait",
    "event_ms",
    "SPIN_CYCLES",
]

GATE_RATIO = 1.05  # rmsNormRow may be at most 5% slower than layerNormRowTwoPass
COPY_FLOOR = "copyFloor"
MEMCPY = "memcpy"
TORCH_ADD_RMS = "x+r, F.rms_norm"  # PyTorch's eager add then RMS norm: the fused kernel's peer
SPIN_CYCLES = 4_000_000  # ~2 ms at the H200's clock: longer than enqueueing a timed batch
SEED_CASE_BYTES = 64 << 20
#: The H200's L2 (60 MiB): the case sizes when no GPU can be asked (``--list-cases`` on a laptop).
DEFAULT_L2_BYTES = 60 << 20
L2_MULTIPLE = 16  # a case of at least 16x the L2 each way streams from DRAM: % of memcpy means something


#: Case sets: the textbook's two 64 MiB float32 cases; L2-scaled ones (float32, bfloat16, float16);
#: the decode-sized 64 x 8192 rows (float32 and bfloat16); model-shaped rows (``model``).
SETS = ("seed", "l2", "l2-bf16", "l2-f16", "decode", "model")
DECODE_SHAPE = (64, 8192)
OPS = ("softmax", "layernorm", "rmsnorm", "addrmsnorm")
NORM_OPS = ("layernorm", "rmsnorm", "addrmsnorm")
#: Hidden sizes of current models (Llama 3 8B 4096, 70B 8192; gpt-oss 2880; Mistral 5120; DeepSeek
#: V3 7168; ...), normalized in bfloat16.
MODEL_HIDDEN = (2048, 2880, 4096, 5120, 7168, 8192)
#: Widths no 16-byte vector divides: 4097 leaves a one-element tail, 5121 an odd tail on an odd width.
MODEL_ODD_HIDDEN = (4097, 5121)
#: Vocabularies (Llama 2 32000, Llama 3 128256, Qwen 2 151936): softmax over logits, the widest on
#: the streaming path; in bfloat16 and float32 (logits are often kept in float32 for sampling).
MODEL_VOCAB = (32000, 128256, 151936)
MODEL_VOCAB_DTYPES = ("bfloat16", "float32")
#: Rows at decode: one sequence, then batches.
MODEL_DECODE_ROWS = (1, 8, 64, 256)


class BenchError(RuntimeError):
    """The bench cannot go on (a kernel failed, or a peer left the CUDA context unusable); the
    message is one line naming the case and the kernel."""


@dataclass(frozen=True)
class BenchCase:
    name: str  # "16384x1024", "524288x1024 bf16"
    set: str  # one of SETS
    rows: int
    cols: int
    dtype: str = "float32"
    ops: tuple[str, ...] = ()  # the ops timed on it; () is every op
    decode: bool = False  # decode-sized (a few rows): launch cost matters, graphs are timed (--graphs)
    dram_bound: bool = False  # at least 16x the L2 each way: % of memcpy is a target

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def mib(self) -> float:
        return self.elements * get_dtype(self.dtype).itemsize / 2**20

    def runs(self, op: str) -> bool:
        return not self.ops or op in self.ops


_SUFFIX = {"float32": "", "bfloat16": " bf16", "float16": " f16"}


def _case(set_name: str, total_bytes: int, cols: int, dtype: str = "float32", **kw: Any) -> BenchCase:
    rows = total_bytes // get_dtype(dtype).itemsize // cols
    return BenchCase(f"{rows}x{cols}{_SUFFIX[dtype]}", set_name, rows, cols, dtype, **kw)


def _rows_case(set_name: str, rows: int, cols: int, dtype: str, ops: tuple[str, ...], *, l2_bytes: int,
               decode: bool) -> BenchCase:
    big = rows * cols * get_dtype(dtype).itemsize >= L2_MULTIPLE * l2_bytes
    return BenchCase(f"{rows}x{cols}{_SUFFIX[dtype]}", set_name, rows, cols, dtype, ops, decode=decode,
                     dram_bound=big)


def _model_cases(l2_bytes: int, scaled: int) -> list[BenchCase]:
    """Each width at the decode rows and at prefill: the fewest rows holding ``scaled`` bytes (the
    L2 sets' size, at least 16x the L2)."""
    out = []
    widths = [(c, "bfloat16", NORM_OPS) for c in (*MODEL_HIDDEN, *MODEL_ODD_HIDDEN)]
    widths += [(v, d, ("softmax",)) for d in MODEL_VOCAB_DTYPES for v in MODEL_VOCAB]
    for cols, dtype, ops in widths:
        for rows in MODEL_DECODE_ROWS:
            out.append(_rows_case("model", rows, cols, dtype, ops, l2_bytes=l2_bytes, decode=True))
        prefill = -(-scaled // (cols * get_dtype(dtype).itemsize))
        out.append(_rows_case("model", prefill, cols, dtype, ops, l2_bytes=l2_bytes, decode=False))
    return out


def bench_cases(*, l2_bytes: int, sets: Sequence[str] = ("seed", "l2")) -> list[BenchCase]:
    """The textbook's two 64 MiB cases; cases of 1024, 4096 and 16384 columns whose size each way is the
    smallest power of two at least 16x the L2 (1 GiB for the H200's 60 MiB), in float32 ("l2"),
    bfloat16 ("l2-bf16") or float16 ("l2-f16"); the decode-sized 64 x 8192 ("decode", float32 and
    bfloat16); model-shaped cases ("model": :data:`MODEL_HIDDEN` and :data:`MODEL_ODD_HIDDEN` for the
    norms in bfloat16, :data:`MODEL_VOCAB` for softmax, each at :data:`MODEL_DECODE_ROWS` rows and at
    prefill, the fewest rows of at least that power of two). Every case of the seed and L2 sets moves
    the same bytes. A case named twice (64x8192 bf16 is in "decode" and "model") is kept once, with
    the ops of both."""
    if l2_bytes < 1:
        raise ValueError(f"l2_bytes must be positive but was {l2_bytes}")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise ValueError(f"sets must be among {SETS} but included {unknown}")
    out: list[BenchCase] = []
    scaled = 1 << math.ceil(math.log2(L2_MULTIPLE * l2_bytes))
    for name in sets:
        if name == "seed":
            out += [_case("seed", SEED_CASE_BYTES, 1024), _case("seed", SEED_CASE_BYTES, 4096)]
        elif name.startswith("l2"):
            dtype = {"l2": "float32", "l2-bf16": "bfloat16", "l2-f16": "float16"}[name]
            out += [_case(name, scaled, c, dtype, dram_bound=True) for c in (1024, 4096, 16384)]
        elif name == "decode":
            rows, cols = DECODE_SHAPE
            out += [_case("decode", rows * cols * get_dtype(d).itemsize, cols, d, decode=True)
                    for d in ("float32", "bfloat16")]
        else:
            out += _model_cases(l2_bytes, scaled)
    kept: dict[str, BenchCase] = {}
    for case in out:
        if case.name in kept:  # the same rows, columns and type: time it once, with both sets' ops
            first = kept[case.name]
            ops = () if not first.ops or not case.ops else tuple(dict.fromkeys(first.ops + case.ops))
            kept[case.name] = BenchCase(first.name, first.set, first.rows, first.cols, first.dtype, ops,
                                        decode=first.decode or case.decode,
                                        dram_bound=first.dram_bound or case.dram_bound)
        else:
            kept[case.name] = case
    return list(kept.values())


def l2_bytes_here() -> tuple[int, str]:
    """The L2 size of this machine's GPU, or the H200's where none is usable, with where it came
    from. Never raises: cases can be listed on a machine without a GPU."""
    from normprops.cuda.build import cuda_status

    ok, why = cuda_status()
    if ok:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        return int(props["l2CacheSize"]), f"the GPU's: {why}"
    return DEFAULT_L2_BYTES, f"no usable GPU here, so the H200's 60 MiB is assumed; {why}"


def format_cases(cases: Sequence[BenchCase], *, l2_bytes: int) -> str:
    lines = [f"{'case':20s} {'set':8s} {'rows':>7s} {'cols':>7s} {'dtype':9s} {'MiB':>8s} {'x L2':>6s} "
             f"{'regime':8s} ops"]
    for c in cases:
        bytes_each_way = c.elements * get_dtype(c.dtype).itemsize
        regime = "decode" if c.decode else ("dram" if c.dram_bound else "-")
        lines.append(f"{c.name:20s} {c.set:8s} {c.rows:7d} {c.cols:7d} {c.dtype:9s} {c.mib:8.2f} "
                     f"{bytes_each_way / l2_bytes:6.2f} {regime:8s} {','.join(c.ops) or 'all'}")
    return "\n".join(lines)


@dataclass(frozen=True)
class BenchRow:
    case: str
    set: str
    kernel: str
    touches: int
    ms: float  # median over rounds
    spread: float  # (max - min) / median over rounds
    ask_gbps: float  # the op's bytes (one read and one write; fused add + RMS: two of each) / time
    pct_copy_floor: float  # NaN where the case has no copyFloor (it is float32 only)
    pct_memcpy: float
    dtype: str = "float32"
    op: str = ""  # the op it computes; "" for the floors
    library: str = ""  # "normprops", "normprops-seed", "torch", "liger", "quack"; "" for the floors
    rows: int = 0
    cols: int = 0
    decode: bool = False
    dram_bound: bool = False


def rows_for(case: BenchCase, times: dict[str, list[float]], touches: dict[str, int],
              moved: dict[str, int] | None = None, *, ops: dict[str, str] | None = None,
              libraries: dict[str, str] | None = None) -> list[BenchRow]:
    """Rows of the table; ``moved`` gives a kernel's ask bytes when not one read and one write."""
    medians = {k: statistics.median(v) for k, v in times.items()}
    rw = case.elements * 2 * get_dtype(case.dtype).itemsize
    gbps = {k: (moved or {}).get(k, rw) / (ms * 1e-3) / 1e9 for k, ms in medians.items()}
    floor = gbps.get(COPY_FLOOR, math.nan)
    rows = []
    for kernel, ms in medians.items():
        t = times[kernel]
        rows.append(BenchRow(case.name, case.set, kernel, touches.get(kernel, 2), ms,
                             (max(t) - min(t)) / ms, gbps[kernel], 100 * gbps[kernel] / floor,
                             100 * gbps[kernel] / gbps[MEMCPY], case.dtype,
                             (ops or {}).get(kernel, ""), (libraries or {}).get(kernel, ""),
                             case.rows, case.cols, case.decode, case.dram_bound))
    return rows


@dataclass(frozen=True)
class Note:
    """Something the table's reader must know about one case and contender: a peer that cannot take
    the case, one that failed and was dropped, one that cannot be captured in a graph."""

    case: str
    kernel: str
    text: str

    def line(self) -> str:
        return f"{self.case}: {self.kernel}: {self.text}"


@dataclass
class _Launchers:
    run: dict[str, Callable[[], None]]
    touches: dict[str, int]
    moved: dict[str, int]  # ask bytes where not one read + one write
    ops: dict[str, str] = field(default_factory=dict)
    libraries: dict[str, str] = field(default_factory=dict)
    notes: list[Note] = field(default_factory=list)

    def add(self, name: str, launch: Callable[[], None], *, op: str, library: str, touches: int = 2,
            moved: int | None = None) -> None:
        self.run[name] = launch
        self.touches[name] = touches
        self.ops[name] = op
        self.libraries[name] = library
        if moved is not None:
            self.moved[name] = moved

    def drop(self, name: str) -> None:
        for table in (self.run, self.touches, self.moved, self.ops, self.libraries):
            table.pop(name, None)


def random_storage(rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Standard normal values in the storage type (16-bit types as uint16 bits, truncated)."""
    import cupy

    return device_storage(rng.standard_normal(shape, dtype=cupy.float32), dtype)


def device_storage(x: Any, dtype: str) -> Any:
    """A CuPy float32 array in the storage type: bfloat16 truncated (a timing input needs no
    rounding), float16 rounded by CuPy; both as uint16 bits."""
    import cupy

    if dtype == "float32":
        return x
    if dtype == "bfloat16":
        return (x.view(cupy.uint32) >> 16).astype(cupy.uint16)
    return x.astype(cupy.float16).view(cupy.uint16)


#: Libraries timed beside ours when importable (PyTorch's kernels always are, when torch imports).
PEER_LIBRARIES = ("liger", "quack")
#: Each production op's PyTorch peer in the table.
PEERS = {"softmax": "torch.softmax", "layernorm": "F.layer_norm", "rmsnorm": "F.rms_norm",
         "addrmsnorm": TORCH_ADD_RMS}


def _launchers(case: BenchCase, progress: TextIO | None = None, *,
               peers: Sequence[str] = ()) -> _Launchers:
    """One zero-argument launch per kernel on this case's buffers: the floors, the textbook kernels
    (float32, seed and l2 sets), the production kernels of the case's storage type, PyTorch's when
    importable, and the ``peers`` libraries' kernels that take the case (the others get a note)."""
    import cupy

    from normprops.cuda.build import module
    from normprops.cuda.prod import ProdKernel
    from normprops.cuda.textbook import THREADS
    from normprops.specs import PROD_VARIANTS

    rng = cupy.random.default_rng(0)
    shape = (case.rows, case.cols)
    x = random_storage(rng, shape, case.dtype)
    out = cupy.empty_like(x)
    residual = random_storage(rng, shape, case.dtype)
    gamma = random_storage(rng, (case.cols,), case.dtype)
    beta = random_storage(rng, (case.cols,), case.dtype)
    cols, eps = np.uint64(case.cols), np.float32(1e-5)
    nbytes = x.nbytes
    fused_bytes = 2 * 2 * nbytes  # x and residual read, out and residual written
    launchers = _Launchers({MEMCPY: lambda: out.data.copy_from_device_async(x.data, nbytes)}, {MEMCPY: 2}, {})
    launchers.ops[MEMCPY] = launchers.libraries[MEMCPY] = ""
    if case.dtype == "float32":
        mod = module("default")
        grid, block = (case.rows,), (THREADS,)
        seed_args = {"softmax": (x, out, cols), "layernorm": (x, out, gamma, beta, cols, eps),
                     "rmsnorm": (x, out, gamma, cols, eps)}

        def seed(name: str, op_args: tuple[Any, ...]) -> Callable[[], None]:
            fn = mod.get_function(name)
            return lambda: fn(grid, block, op_args)

        launchers.add(COPY_FLOOR, seed(COPY_FLOOR, (x, out, cols)), op="", library="")
        if case.set in ("seed", "l2"):
            for spec in KERNELS:
                if spec.backend == "cuda" and spec.bench and case.runs(spec.op):
                    launchers.add(spec.name, seed(spec.name, seed_args[spec.op]), op=spec.op,
                                  library="normprops-seed", touches=spec.touches)
    for spec in KERNELS:
        if spec.backend != "cuda-prod" or not spec.bench or spec.dtype != case.dtype:
            continue
        op = PROD_VARIANTS[spec.name][0]
        if not case.runs(op):
            continue
        kernel = ProdKernel(op, dtype=case.dtype)
        arrays = kernel.operands(x=x, out=out, residual=residual, gamma=gamma, beta=beta)
        launchers.add(spec.name, kernel.launcher(*arrays, rows=case.rows, cols=case.cols, eps=1e-5), op=op,
                      library="normprops", touches=spec.touches,
                      moved=fused_bytes if op == "addrmsnorm" else None)
    try:
        import torch
        import torch.nn.functional as F

        kind = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[case.dtype]
        tx, tr, tg, tb = (torch.from_dlpack(a).view(kind) for a in (x, residual, gamma, beta))
    except Exception as exc:  # torch is optional: its rows and the peers' are simply absent
        if progress is not None:
            print(f"  no PyTorch rows for {case.name}: {type(exc).__name__}: {exc}", file=progress)
        return launchers
    torch_launch = {"softmax": lambda: torch.softmax(tx, dim=-1),
                    "layernorm": lambda: F.layer_norm(tx, (case.cols,), tg, tb, 1e-5),
                    "rmsnorm": lambda: F.rms_norm(tx, (case.cols,), tg, 1e-5),
                    "addrmsnorm": lambda: F.rms_norm(tx + tr, (case.cols,), tg, 1e-5)}
    for op, launch in torch_launch.items():
        if case.runs(op):
            launchers.add(PEERS[op], launch, op=op, library="torch", touches=4 if op == "addrmsnorm" else 2,
                          moved=fused_bytes if op == "addrmsnorm" else None)
    _add_peers(case, launchers, peers, tx=tx, tr=tr, tg=tg, tb=tb, fused_bytes=fused_bytes)
    return launchers


def _add_peers(case: BenchCase, launchers: _Launchers, peers: Sequence[str], *, tx: Any, tr: Any, tg: Any,
               tb: Any, fused_bytes: int) -> None:
    """The peer libraries' kernels for this case's ops; a kernel that cannot take the case, or whose
    binding fails, becomes a note instead of a row."""
    from normprops.backends import peers as peer_registry

    for library in peers:
        for peer in peer_registry.peer_ops(library=library):
            if not case.runs(peer.op):
                continue
            why = peer.unsupported(dtype=case.dtype, cols=case.cols)
            if why is not None:
                launchers.notes.append(Note(case.name, peer.name, f"not run: {why}"))
                continue
            try:
                launch = peer_registry.bind(peer, x=tx, gamma=tg, beta=tb, residual=tr, eps=1e-5)
            except Exception as exc:
                launchers.notes.append(Note(case.name, peer.name, f"not run: {_one_line(exc)}"))
                continue
            fused = peer.op == "addrmsnorm"
            launchers.add(peer.name, launch, op=peer.op, library=library, touches=4 if fused else 2,
                          moved=fused_bytes if fused else None)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def spin_wait(cycles: int) -> Callable[[], None]:
    """A launch of prod.cu's ``spinWait`` kernel (one thread busy for ``cycles`` clock cycles)."""
    from normprops.cuda.build import module

    fn = module("default", source="prod.cu").get_function("spinWait")
    return lambda: fn((1,), (1,), (np.int64(cycles),))


def event_ms(launch: Callable[[], None], reps: int, spin: Callable[[], None]) -> float:
    """Milliseconds per call of ``launch``: CUDA events around ``reps`` back-to-back calls enqueued
    behind ``spin``."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    spin()  # keeps the GPU busy while the host enqueues the whole batch
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def _host_paced_ms(launch: Callable[[], None], reps: int) -> float:
    """No spin: the GPU waits on the host between launches whenever the host is the slower, so this
    is what a caller enqueueing one call after another gets (launch cost included)."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.cuda.get_current_stream().synchronize()
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def _healthy() -> str | None:
    """None when the device still takes work; else the (sticky) error that poisoned the context."""
    import cupy

    try:
        cupy.cuda.runtime.deviceSynchronize()
        return None
    except Exception as exc:
        return _one_line(exc)


def _warm(case: BenchCase, launchers: _Launchers, warmup: int) -> None:
    """Warm every kernel (compiles the peers' on first use). A peer that raises is dropped with a
    note; ours, PyTorch's and the floors must not fail (BenchError), nor leave the device unusable."""
    for name, launch in list(launchers.run.items()):
        try:
            for _ in range(warmup):
                launch()
        except Exception as exc:
            if launchers.libraries.get(name) not in PEER_LIBRARIES:
                raise BenchError(f"{name} failed on {case.name}: {_one_line(exc)}") from exc
            library = launchers.libraries[name]
            launchers.notes.append(Note(case.name, name, f"dropped: it raised {_one_line(exc)}"))
            launchers.drop(name)
            poisoned = _healthy()
            if poisoned is not None:
                raise BenchError(f"{name} left the GPU unusable on {case.name} ({poisoned}); rerun with "
                                 f"--peers leaving out {library}") from exc
    poisoned = _healthy()
    if poisoned is not None:
        raise BenchError(f"a kernel faulted during the warm-up of {case.name}: {poisoned}")


def _free_device_memory() -> None:
    """Give each case's buffers back (CuPy's pool and torch's cache keep them otherwise, and the
    prefill cases hold several GiB each)."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


@dataclass(frozen=True)
class LaunchRow:
    """One contender at one decode case, per call: the GPU's time (launches queued behind a spin,
    as in the table), the time when the host issues one launch after another with nothing queued
    (launch cost included), and one CUDA graph replay of ``reps`` calls divided by ``reps``."""

    case: str
    kernel: str
    op: str
    library: str
    device_us: float
    host_paced_us: float
    graph_us: float | None  # None: not capturable (see note)
    note: str = ""


@dataclass(frozen=True)
class Measurement:
    rows: list[BenchRow]
    notes: list[Note]
    launch: list[LaunchRow]


def run_bench(cases: Sequence[BenchCase], *, rounds: int = 7, reps: int = 10, warmup: int = 3,
              peers: Sequence[str] = PEER_LIBRARIES, graphs: bool = False,
              progress: TextIO | None = None) -> Measurement:
    """Time every kernel on every case: warm-up per kernel, then ``rounds`` interleaved rounds.
    ``peers``: the libraries (of :data:`PEER_LIBRARIES`) to time beside ours where they can run here
    (one note for each that cannot). ``graphs``: also time each decode case's contenders host-paced
    and as CUDA graph replays (:class:`LaunchRow`)."""
    if rounds < 3:
        raise ValueError(f"rounds must be at least 3 (a median and a spread) but was {rounds}")
    if reps < 1:
        raise ValueError(f"reps must be at least 1 but was {reps}")
    unknown = [p for p in peers if p not in PEER_LIBRARIES]
    if unknown:
        raise ValueError(f"peers must be among {PEER_LIBRARIES} but included {unknown}")
    from normprops.backends.peers import peer_status

    spin = spin_wait(SPIN_CYCLES)
    rows: list[BenchRow] = []
    notes: list[Note] = []
    launch: list[LaunchRow] = []
    usable = []
    for library in peers:
        ok, why = peer_status(library)
        if ok:
            usable.append(library)
        else:
            notes.append(Note("every case", library, f"not run: {why}"))
    for case in cases:
        launchers = _launchers(case, progress, peers=usable)
        _warm(case, launchers, warmup)
        times: dict[str, list[float]] = {name: [] for name in launchers.run}
        for _ in range(rounds):
            for name, fn in launchers.run.items():
                try:
                    times[name].append(event_ms(fn, reps, spin))
                except Exception as exc:  # after a clean warm-up: nothing to recover, say where
                    raise BenchError(f"{name} failed on {case.name} while timed: {_one_line(exc)}") from exc
        rows += rows_for(case, times, launchers.touches, launchers.moved, ops=launchers.ops,
                          libraries=launchers.libraries)
        if graphs and case.decode:
            launch += _launch_overhead(case, launchers, rounds=rounds, reps=reps)
        notes += launchers.notes
        if progress is not None:
            print(f"  measured {case.name} ({case.mib:.2f} MiB each way, {len(launchers.run)} kernels)",
                  file=progress, flush=True)
        del launchers
        _free_device_memory()
    return Measurement(rows, notes, launch)


def measure(cases: Sequence[BenchCase], *, rounds: int = 7, reps: int = 10, warmup: int = 3,
            progress: TextIO | None = None) -> list[BenchRow]:
    """The table's rows for ``cases``, ours and PyTorch's only (see :func:`run_bench`)."""
    return run_bench(cases, rounds=rounds, reps=reps, warmup=warmup, peers=(), progress=progress).rows


@contextlib.contextmanager
def _on_stream(stream: Any) -> Iterator[None]:
    """CuPy's and, when loaded, torch's current stream set to ``stream``: what ours, PyTorch's,
    Triton's (it launches on torch's current stream) and QuACK's (TVM FFI takes torch's current
    stream) kernels launch on, so one capture sees them all."""
    with stream:
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
                yield
        else:
            yield


#: A graph replay below this fraction of the plain device time is not believed (see _launch_overhead).
GRAPH_PLAUSIBLE = 0.5


def _capture(stream: Any, launch: Callable[[], None], reps: int) -> tuple[Any, str]:
    """(graph of ``reps`` calls, "") or (None, why it could not be captured). The capture is always
    ended, so a failure leaves the stream usable."""
    stream.begin_capture()
    failure: BaseException | None = None
    try:
        for _ in range(reps):
            launch()
    except Exception as exc:
        failure = exc
    try:
        graph = stream.end_capture()
    except Exception as exc:
        graph, failure = None, failure or exc
    if failure is not None:
        return None, f"not capturable: {_one_line(failure)}"
    return graph, ""


def _launch_overhead(case: BenchCase, launchers: _Launchers, *, rounds: int, reps: int) -> list[LaunchRow]:
    """Every contender of a decode case on a side stream: device time behind the spin, host-paced
    time, and graph replay time, interleaved over ``rounds``."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    spin = spin_wait(SPIN_CYCLES)
    device: dict[str, list[float]] = {}
    host: dict[str, list[float]] = {}
    replay: dict[str, list[float]] = {}
    graphs: dict[str, Any] = {}
    why: dict[str, str] = {}
    timed: list[str] = []
    with _on_stream(stream):
        for name, launch in launchers.run.items():
            try:
                launch()  # torch's allocator caches per stream: warm this one before capturing
                stream.synchronize()
            except Exception as exc:
                text = f"no launch-cost row: it raised on a side stream {_one_line(exc)}"
                launchers.notes.append(Note(case.name, name, text))
                continue
            timed.append(name)
            graph, why[name] = _capture(stream, launch, reps)
            if graph is not None:
                try:
                    graph.launch(stream)
                    stream.synchronize()
                    graphs[name] = graph
                except Exception as exc:
                    why[name] = f"not replayable: {_one_line(exc)}"
        poisoned = _healthy()
        if poisoned is not None:
            raise BenchError(f"capturing graphs on {case.name} left the GPU unusable: {poisoned}")
        for _ in range(rounds):
            for name in timed:
                launch = launchers.run[name]
                try:
                    device.setdefault(name, []).append(event_ms(launch, reps, spin))
                    host.setdefault(name, []).append(_host_paced_ms(launch, reps))
                    if name in graphs:
                        g = graphs[name]
                        replay.setdefault(name, []).append(event_ms(lambda: g.launch(stream), 1, spin) / reps)
                except Exception as exc:  # it ran before: nothing to recover, say where
                    raise BenchError(f"{name} failed on {case.name} while timing launch cost: "
                                     f"{_one_line(exc)}") from exc
        stream.synchronize()
    out = []
    for name in timed:
        device_us, host_us = 1e3 * statistics.median(device[name]), 1e3 * statistics.median(host[name])
        graph_us = 1e3 * statistics.median(replay[name]) if name in replay else None
        note = why.get(name, "")
        if graph_us is not None and graph_us < GRAPH_PLAUSIBLE * device_us:
            # The plain time already has launches queued back to back; a graph removes the gaps
            # between kernels, not most of a kernel. Far less means work ran outside the capture (a
            # launch on another stream runs eagerly, uncaptured and untimed).
            note = (f"suspect: a replay took {graph_us / device_us:.2f} of the device time; part of the "
                    f"work may run outside the captured stream")
        out.append(LaunchRow(case.name, name, launchers.ops.get(name, ""), launchers.libraries.get(name, ""),
                             device_us, host_us, graph_us, note))
    return out


@dataclass(frozen=True)
class Gate:
    case: str
    name: str
    value: float
    limit: float
    passed: bool

    def text(self) -> str:
        return (f"{'PASS' if self.passed else 'FAIL'} {self.case}: {self.name} {self.value:.3f} "
                f"(limit {self.limit:.3f})")


def gates(rows: Sequence[BenchRow]) -> list[Gate]:
    """At every case: rmsNormRow time <= 1.05 x layerNormRowTwoPass time (the 5% gate), and
    rmsNormRow ask GB/s >= layerNormRowTwoPass ask GB/s (the bandwidth gate)."""
    by = {(r.case, r.kernel): r for r in rows}
    out = []
    for case in dict.fromkeys(r.case for r in rows):
        rms, two = by.get((case, "rmsNormRow")), by.get((case, "layerNormRowTwoPass"))
        if rms is None or two is None:
            continue
        ratio = rms.ms / two.ms
        out.append(Gate(case, "time rmsNormRow / layerNormRowTwoPass", ratio, GATE_RATIO,
                        ratio <= GATE_RATIO))
        out.append(Gate(case, "ask GB/s rmsNormRow / layerNormRowTwoPass", rms.ask_gbps / two.ask_gbps,
                        1.0, rms.ask_gbps >= two.ask_gbps))
    return out


MEMCPY_TARGET = 90.0  # % of the device memcpy the production kernels must reach at the L2 cases


def targets(rows: Sequence[BenchRow]) -> list[Gate]:
    """The production kernels' first targets: at least 90% of the memcpy floor at the L2-scaled
    cases, and no slower than PyTorch's kernel for the same op at every case where both ran."""
    from normprops.specs import PROD_VARIANTS

    by = {(r.case, r.kernel): r for r in rows}
    out = []
    for r in rows:
        variant = PROD_VARIANTS.get(r.kernel)
        if variant is None or variant[2] != "auto":
            continue
        if r.set.startswith("l2"):
            out.append(Gate(r.case, f"{r.kernel} % of memcpy", r.pct_memcpy, MEMCPY_TARGET,
                            r.pct_memcpy >= MEMCPY_TARGET))
        peer = by.get((r.case, PEERS[variant[0]]))
        if peer is not None:
            ratio = r.ms / peer.ms
            out.append(Gate(r.case, f"{r.kernel} time / {peer.kernel}", ratio, 1.0, ratio <= 1.0))
    return out


#: The lead: ours no slower than the fastest peer at every case, and at least this % of the device
#: memcpy wherever the case streams from DRAM (>= 16x the L2 each way).
LEAD_RATIO = 1.0
LEAD_MEMCPY_TARGET = 96.0
PEER_TABLE_LIBRARIES = ("torch", *PEER_LIBRARIES)


@dataclass(frozen=True)
class LeadRow:
    """Ours against the fastest peer for one op at one case (times in microseconds)."""

    case: str
    set: str
    op: str
    dtype: str
    rows: int
    cols: int
    decode: bool
    dram_bound: bool
    kernel: str  # ours
    us: float
    pct_memcpy: float | None  # None unless dram_bound
    peer_us: dict[str, float]  # library -> its kernel's time, for the peers that ran
    fastest_peer: str | None  # the fastest peer's kernel, None when no peer ran
    ratio: float | None  # our time / the fastest peer's


def lead_table(rows: Sequence[BenchRow]) -> list[LeadRow]:
    """One row per case and op where a production kernel ran: its time, the peers' (PyTorch,
    Liger, QuACK), the ratio to the fastest, and % of memcpy where the case is DRAM-bound."""
    from normprops.specs import PROD_VARIANTS

    out = []
    for r in rows:
        variant = PROD_VARIANTS.get(r.kernel)
        if variant is None or variant[2] != "auto":
            continue
        op = variant[0]
        peers = [p for p in rows if p.case == r.case and p.op == op and p.library in PEER_TABLE_LIBRARIES]
        fastest = min(peers, key=lambda p: p.ms, default=None)
        out.append(LeadRow(r.case, r.set, op, r.dtype, r.rows, r.cols, r.decode, r.dram_bound, r.kernel,
                           1e3 * r.ms, r.pct_memcpy if r.dram_bound else None,
                           {p.library: 1e3 * p.ms for p in peers},
                           None if fastest is None else fastest.kernel,
                           None if fastest is None else r.ms / fastest.ms))
    return out


def lead_targets(rows: Sequence[BenchRow]) -> list[Gate]:
    """The lead at every case: time / the fastest peer's <= 1.00 wherever a peer ran, and >= 96% of
    the device memcpy at every DRAM-bound case (the L2 sets, bfloat16 layer norm at 16384 included,
    and the model set's prefill)."""
    out = []
    for lead in lead_table(rows):
        if lead.ratio is not None:
            out.append(Gate(lead.case, f"{lead.kernel} time / {lead.fastest_peer}", lead.ratio, LEAD_RATIO,
                            lead.ratio <= LEAD_RATIO))
        if lead.pct_memcpy is not None:
            out.append(Gate(lead.case, f"{lead.kernel} % of memcpy", lead.pct_memcpy, LEAD_MEMCPY_TARGET,
                            lead.pct_memcpy >= LEAD_MEMCPY_TARGET))
    return out


@dataclass(frozen=True)
class Prediction:
    text: str
    held: bool
    numbers: str


def predictions(rows: Sequence[BenchRow], *, set_name: str = "seed") -> list[Prediction]:
    """The textbook kernels' predictions, re-read on this card (its third, on the overflow row, is
    ``normprops census``'s): every kernel within 70% of the floor; RMS norm beats two-pass layer
    norm; RMS norm and Welford (both three touches) tie within 5%; the copyFloor kernel is the floor
    (within 10% of the device memcpy)."""
    sel = [r for r in rows if r.set == set_name]
    by = {(r.case, r.kernel): r for r in sel}
    cases = list(dict.fromkeys(r.case for r in sel))
    seed = {k.name for k in KERNELS if k.backend == "cuda"}
    kernels = [r for r in sel if r.kernel in seed]
    out = []
    low = [f"{r.kernel}@{r.case} {r.pct_copy_floor:.0f}%" for r in kernels if r.pct_copy_floor < 70]
    out.append(Prediction("every kernel reaches 70% of the copyFloor floor", not low,
                          ", ".join(low) or "all >= 70%"))
    beats = [(c, by[(c, "rmsNormRow")].ms, by[(c, "layerNormRowTwoPass")].ms) for c in cases
             if (c, "rmsNormRow") in by and (c, "layerNormRowTwoPass") in by]
    out.append(Prediction("rmsNormRow beats layerNormRowTwoPass at every case",
                          all(a < b for _, a, b in beats),
                          "; ".join(f"{c}: {a:.4f} vs {b:.4f} ms" for c, a, b in beats)))
    ties = [(c, by[(c, "rmsNormRow")].ms, by[(c, "layerNormRowWelford")].ms) for c in cases
            if (c, "rmsNormRow") in by and (c, "layerNormRowWelford") in by]
    out.append(Prediction("rmsNormRow and layerNormRowWelford (3 touches each) tie within 5%",
                          all(abs(a / b - 1) <= 0.05 for _, a, b in ties),
                          "; ".join(f"{c}: {a:.4f} vs {b:.4f} ms" for c, a, b in ties)))
    floors = [(c, by[(c, COPY_FLOOR)].pct_memcpy) for c in cases if (c, COPY_FLOOR) in by]
    out.append(Prediction("copyFloor is the floor: within 10% of the device memcpy",
                          all(p >= 90 for _, p in floors),
                          "; ".join(f"{c}: copyFloor at {p:.0f}% of memcpy" for c, p in floors)))
    return out


def format_table(rows: Sequence[BenchRow]) -> str:
    lines = [f"{'case':18s} {'kernel':20s} {'touches':>7s} {'ms':>9s} {'spread':>7s} {'ask GB/s':>9s} "
             f"{'% floor':>8s} {'% memcpy':>8s}"]
    for r in rows:
        floor = "-" if math.isnan(r.pct_copy_floor) else f"{r.pct_copy_floor:.1f}"
        lines.append(f"{r.case:18s} {r.kernel:20s} {r.touches:7d} {r.ms:9.4f} {100 * r.spread:6.1f}% "
                     f"{r.ask_gbps:9.1f} {floor:>8s} {r.pct_memcpy:8.1f}")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def format_lead_table(lead: Sequence[LeadRow], *, notes: Sequence[Note] = (),
                      launch: Sequence[LaunchRow] = ()) -> str:
    """The lead table (times in microseconds; ratio: ours / the fastest peer), then its notes: peers
    that could not take a case, and with graphs, the launch cost of every contender at decode."""
    lines = [f"{'case':20s} {'op':10s} {'ours':20s} {'us':>8s} {'torch':>8s} {'liger':>8s} {'quack':>8s} "
             f"{'fastest peer':24s} {'ratio':>6s} {'% memcpy':>8s}"]
    for r in lead:
        peers = " ".join(f"{_us(r.peer_us.get(lib)):>8s}" for lib in PEER_TABLE_LIBRARIES)
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        pct = "-" if r.pct_memcpy is None else f"{r.pct_memcpy:.1f}"
        lines.append(f"{r.case:20s} {r.op:10s} {r.kernel:20s} {_us(r.us):>8s} {peers} "
                     f"{r.fastest_peer or '-':24s} {ratio:>6s} {pct:>8s}")
    if notes:
        lines += ["", "notes:"] + [f"  {n.line()}" for n in notes]
    if launch:
        lines += ["", "launch cost at decode, us per call (device: queued behind a spin, as in the table; "
                      "host-paced: one call after another, nothing queued; graph: a CUDA graph replay):"]
        for r in launch:
            lines.append(f"  {r.case:18s} {r.kernel:26s} device {_us(r.device_us):>7s}  host-paced "
                         f"{_us(r.host_paced_us):>7s}  graph {_us(r.graph_us):>7s}"
                         + (f"  ({r.note})" if r.note else ""))
    return "\n".join(lines)


def _lead_csv_rows(lead: Sequence[LeadRow]) -> list[dict[str, Any]]:
    out = []
    for r in lead:
        row: dict[str, Any] = {k: v for k, v in asdict(r).items() if k != "peer_us"}
        for lib in PEER_TABLE_LIBRARIES:
            row[f"{lib}_us"] = r.peer_us.get(lib)
        row["ratio_met"] = None if r.ratio is None else r.ratio <= LEAD_RATIO
        row["memcpy_met"] = None if r.pct_memcpy is None else r.pct_memcpy >= LEAD_MEMCPY_TARGET
        out.append(row)
    return out


def write_outputs(rows: Sequence[BenchRow], *, json_path: Path | None = None,
                  csv_path: Path | None = None, png_path: Path | None = None,
                  lead_csv_path: Path | None = None, lead_png_path: Path | None = None,
                  notes: Sequence[Note] = (), launch: Sequence[LaunchRow] = (),
                  meta: dict[str, Any] | None = None) -> None:
    """JSON (everything), CSV of the rows, the bar chart of % of memcpy, and the lead table as CSV
    (one line per case and op, with its targets' verdicts) and as a chart."""
    lead = lead_table(rows)
    if json_path is not None:
        doc = {"meta": meta or {}, "rows": [asdict(r) for r in rows],
               "gates": [asdict(g) for g in gates(rows)],
               "targets": [asdict(g) for g in targets(rows)],
               "predictions": [asdict(p) for p in predictions(rows)],
               "lead": [asdict(r) for r in lead],
               "lead_targets": [asdict(g) for g in lead_targets(rows)],
               "notes": [asdict(n) for n in notes],
               "launch": [asdict(r) for r in launch]}
        json_path.write_text(json.dumps(doc, indent=1) + "\n")
    if csv_path is not None:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
            writer.writeheader()
            writer.writerows(asdict(r) for r in rows)
    if lead_csv_path is not None:
        table = _lead_csv_rows(lead)
        if not table:
            raise ValueError("lead_csv_path: no production kernel ran, so there is no lead table to write")
        with open(lead_csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
    if png_path is not None:
        _plot(rows, png_path)
    if lead_png_path is not None:
        _plot_lead(lead, lead_png_path)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("the PNG needs matplotlib: pip install 'normprops[plot]'") from exc
    return plt


def _plot_lead(lead: Sequence[LeadRow], path: Path) -> None:
    """One panel per op: each peer's time over ours per case (above 1: ours leads), log scale, with
    ours' % of memcpy written over the DRAM-bound cases."""
    if not lead:
        raise ValueError("lead_png_path: no production kernel ran, so there is no lead table to plot")
    plt = _pyplot()
    ops = [op for op in OPS if any(r.op == op for r in lead)]
    widest = max(sum(r.op == op for r in lead) for op in ops)
    fig, axes = plt.subplots(len(ops), 1, figsize=(max(10, 0.45 * widest), 3.4 * len(ops)), squeeze=False)
    width = 0.8 / len(PEER_TABLE_LIBRARIES)
    for ax, op in zip(axes[:, 0], ops):
        mine = [r for r in lead if r.op == op]
        for i, lib in enumerate(PEER_TABLE_LIBRARIES):
            xs = [j + i * width for j, r in enumerate(mine) if lib in r.peer_us]
            ys = [r.peer_us[lib] / r.us for r in mine if lib in r.peer_us]
            ax.bar(xs, ys, width, label=lib)
        ratios = [v / r.us for r in mine for v in r.peer_us.values()] or [1.0]
        top = 1.8 * max(max(ratios), 1.0)
        ax.set_yscale("log")
        ax.set_ylim(0.8 * min(min(ratios), 1.0), top)
        plain = plt.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(mine))], [r.case for r in mine], rotation=60,
                      ha="right", fontsize=7)
        for j, r in enumerate(mine):
            if r.pct_memcpy is not None:
                ax.text(j + 0.4 - width / 2, top / 1.25, f"{r.pct_memcpy:.0f}%", ha="center", fontsize=6,
                        color="green" if r.pct_memcpy >= LEAD_MEMCPY_TARGET else "red")
        met = sum(r.ratio is not None and r.ratio <= LEAD_RATIO for r in mine)
        ran = sum(r.ratio is not None for r in mine)
        ax.set_title(f"{op}: peer time / ours (above 1: ours leads; {met} of {ran} cases lead); "
                     f"% of memcpy over DRAM-bound cases", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot(rows: Sequence[BenchRow], path: Path) -> None:
    """% of the memcpy floor per kernel per case (matplotlib, the ``plot`` extra)."""
    plt = _pyplot()
    cases = list(dict.fromkeys(r.case for r in rows))
    kernels = list(dict.fromkeys(r.kernel for r in rows))
    by = {(r.case, r.kernel): r.pct_memcpy for r in rows}
    width = 0.8 / len(kernels)
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(cases)), 4.5))
    for i, k in enumerate(kernels):
        ax.bar([c + i * width for c in range(len(cases))], [by.get((c, k), 0) for c in cases], width, label=k)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(cases))], cases)
    ax.set_ylabel("% of device memcpy bandwidth")
    ax.axhline(100, color="black", linewidth=0.8)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
