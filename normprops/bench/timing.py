"""Timing: CUDA events (``cupy.cuda.Event``) around ``reps`` back-to-back launches, after a warm-up
per kernel; ``rounds`` interleaved rounds go over every kernel of a case in turn, and the median and
spread of the rounds are reported. We time with our own events rather than
``cupyx.profiler.benchmark`` because the rounds must interleave across kernels (so clock and thermal
drift hit all kernels alike), which that function, timing one function at a time, does not do. A
spin kernel keeps the GPU busy while the host enqueues each timed batch, so a time is the GPU's, not
the host's; never a host clock around an asynchronous launch. With ``graphs``, the decode cases are
timed twice more: without the spin (what a caller that enqueues one call at a time sees) and as CUDA
graph replays."""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TextIO

import numpy as np

from normprops.bench.cases import BenchCase
from normprops.bench.launchers import (
    COPY_FLOOR,
    MEMCPY,
    PEER_LIBRARIES,
    Launchers,
    Note,
    launchers_for,
    one_line,
)
from normprops.dtypes import get_dtype
from normprops.flags import flag

__all__ = ["BenchError", "BenchRow", "LaunchRow", "Measurement", "rows_for", "run_bench", "measure",
           "spin_wait", "event_ms", "SPIN_CYCLES"]

SPIN_CYCLES = 4_000_000  # ~2 ms at the H200's clock: longer than enqueueing a timed batch


class BenchError(RuntimeError):
    """The bench cannot go on (a kernel failed, or a peer left the CUDA context unusable); the
    message is one line naming the case and the kernel."""



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
    library: str = ""  # "normprops", "normprops-textbook", "torch", "liger", "quack"; "" for the floors
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



def spin_wait(cycles: int) -> Callable[[], None]:
    """A launch of spin_wait.cu's ``spinWait`` kernel (one thread busy for ``cycles`` clock cycles)."""
    from normprops.cuda.build import module

    fn = module("default", source="spin_wait.cu").get_function("spinWait")
    return lambda: fn((1,), (1,), (np.int64(cycles),))



def _events_ms(launch: Callable[[], None], reps: int, before: Callable[[], None]) -> float:
    """Milliseconds per call of ``launch``: CUDA events around ``reps`` back-to-back calls, enqueued
    right after ``before``."""
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    before()
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def event_ms(launch: Callable[[], None], reps: int, spin: Callable[[], None]) -> float:
    """Milliseconds per call of ``launch``: CUDA events around ``reps`` back-to-back calls enqueued
    behind ``spin``, which keeps the GPU busy while the host enqueues the whole batch."""
    return _events_ms(launch, reps, spin)


def _host_paced_ms(launch: Callable[[], None], reps: int) -> float:
    """No spin: the GPU waits on the host between launches whenever the host is the slower, so this
    is what a caller enqueueing one call after another gets (launch cost included)."""
    import cupy

    return _events_ms(launch, reps, cupy.cuda.get_current_stream().synchronize)


def _healthy() -> str | None:
    """None when the device still takes work; else the (sticky) error that poisoned the context."""
    import cupy

    try:
        cupy.cuda.runtime.deviceSynchronize()
        return None
    except Exception as exc:
        return one_line(exc)


def _warm(case: BenchCase, launchers: Launchers, warmup: int) -> None:
    """Warm every kernel (compiles the peers' on first use). A peer that raises is dropped with a
    note; ours, PyTorch's and the floors must not fail (BenchError), nor leave the device unusable."""
    for name, launch in list(launchers.run.items()):
        try:
            for _ in range(warmup):
                launch()
        except Exception as exc:
            if launchers.libraries.get(name) not in PEER_LIBRARIES:
                raise BenchError(f"{name} failed on {case.name}: {one_line(exc)}") from exc
            library = launchers.libraries[name]
            launchers.notes.append(Note(case.name, name, f"dropped: it raised {one_line(exc)}"))
            launchers.drop(name)
            poisoned = _healthy()
            if poisoned is not None:
                raise BenchError(f"{name} left the GPU unusable on {case.name} ({poisoned}); rerun with "
                                 f"{flag('peers')} leaving out {library}") from exc
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
        launchers = launchers_for(case, progress, peers=usable)
        _warm(case, launchers, warmup)
        times: dict[str, list[float]] = {name: [] for name in launchers.run}
        for _ in range(rounds):
            for name, fn in launchers.run.items():
                try:
                    times[name].append(event_ms(fn, reps, spin))
                except Exception as exc:  # after a clean warm-up: nothing to recover, say where
                    raise BenchError(f"{name} failed on {case.name} while timed: {one_line(exc)}") from exc
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
        torch = sys.modules.get("torch")
        # A CPU build of torch (or one that sees no GPU) has no stream to set.
        if torch is not None and torch.cuda.is_available():
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
        return None, f"not capturable: {one_line(failure)}"
    return graph, ""


def _launch_overhead(case: BenchCase, launchers: Launchers, *, rounds: int, reps: int) -> list[LaunchRow]:
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
                text = f"no launch-cost row: it raised on a side stream {one_line(exc)}"
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
                    why[name] = f"not replayable: {one_line(exc)}"
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
                                     f"{one_line(exc)}") from exc
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
