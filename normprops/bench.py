"""The seed's bandwidth table on the GPU, its predictions, and the RMS-versus-two-pass gates.

Every kernel is priced at 8 bytes per element (one float32 read, one write): ``ask GB/s``. Timing is
by CUDA events (``cupy.cuda.Event``) around ``reps`` back-to-back launches, after a warm-up per
kernel; ``rounds`` interleaved rounds go over every kernel of a case in turn, and the median and
spread of the rounds are reported. We time with our own events rather than
``cupyx.profiler.benchmark`` because the rounds must interleave across kernels (so clock and thermal
drift hit all kernels alike), which that helper, timing one function at a time, does not do.
Never a host clock around an asynchronous launch.

Floors, measured in the same process: the seed's ``copyFloor`` kernel (same launch shape as the
kernels) and the device-to-device memcpy (the true floor). Cases: the seed's two 64 MiB shapes and
L2-scaled ones (at least 16x the device's L2 each way: 1 GiB on the H200), plus 16384 columns.

Needs CuPy and a GPU for measuring; the table, gates and predictions are plain functions of the
rows (tested without a GPU).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import numpy as np

from normprops.specs import KERNELS

__all__ = [
    "BenchCase",
    "BenchRow",
    "Gate",
    "Prediction",
    "bench_cases",
    "measure",
    "gates",
    "predictions",
    "format_table",
    "write_outputs",
    "GATE_RATIO",
]

BYTES_PER_ELEMENT = 8  # one float32 read + one float32 write
GATE_RATIO = 1.05  # rmsNormRow may be at most 5% slower than layerNormRowTwoPass
COPY_FLOOR = "copyFloor"
MEMCPY = "memcpy"
SEED_CASE_BYTES = 64 << 20


@dataclass(frozen=True)
class BenchCase:
    name: str  # "16384x1024"
    set: str  # "seed" or "l2"
    rows: int
    cols: int

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def mib(self) -> float:
        return self.elements * 4 / 2**20


def _case(set_name: str, total_bytes: int, cols: int) -> BenchCase:
    rows = total_bytes // 4 // cols
    return BenchCase(f"{rows}x{cols}", set_name, rows, cols)


def bench_cases(*, l2_bytes: int, sets: Sequence[str] = ("seed", "l2")) -> list[BenchCase]:
    """The seed's two 64 MiB cases, and cases of 1024, 4096 and 16384 columns whose size each way
    is the smallest power of two at least 16x the L2 (1 GiB for the H200's 60 MiB). Every case of a
    set moves the same bytes."""
    if l2_bytes < 1:
        raise ValueError(f"l2_bytes must be positive but was {l2_bytes}")
    out: list[BenchCase] = []
    if "seed" in sets:
        out += [_case("seed", SEED_CASE_BYTES, 1024), _case("seed", SEED_CASE_BYTES, 4096)]
    if "l2" in sets:
        scaled = 1 << math.ceil(math.log2(16 * l2_bytes))
        out += [_case("l2", scaled, c) for c in (1024, 4096, 16384)]
    return out


@dataclass(frozen=True)
class BenchRow:
    case: str
    set: str
    kernel: str
    touches: int
    ms: float  # median over rounds
    spread: float  # (max - min) / median over rounds
    ask_gbps: float
    pct_copy_floor: float
    pct_memcpy: float


def _rows_for(case: BenchCase, times: dict[str, list[float]], touches: dict[str, int]) -> list[BenchRow]:
    medians = {k: statistics.median(v) for k, v in times.items()}
    gbps = {k: case.elements * BYTES_PER_ELEMENT / (ms * 1e-3) / 1e9 for k, ms in medians.items()}
    rows = []
    for kernel, ms in medians.items():
        t = times[kernel]
        rows.append(BenchRow(case.name, case.set, kernel, touches.get(kernel, 2), ms,
                             (max(t) - min(t)) / ms, gbps[kernel],
                             100 * gbps[kernel] / gbps[COPY_FLOOR], 100 * gbps[kernel] / gbps[MEMCPY]))
    return rows


def _launchers(case: BenchCase) -> tuple[dict[str, Callable[[], None]], dict[str, int]]:
    """One zero-argument launch per kernel on this case's buffers, and each kernel's touches."""
    import cupy

    from normprops._cuda import module
    from normprops.backends.cuda_kernels import THREADS

    rng = cupy.random.default_rng(0)
    x = rng.standard_normal((case.rows, case.cols), dtype=cupy.float32)
    out = cupy.empty_like(x)
    gamma = rng.standard_normal(case.cols, dtype=cupy.float32)
    beta = rng.standard_normal(case.cols, dtype=cupy.float32)
    cols, eps = np.uint64(case.cols), np.float32(1e-5)
    grid, block = (case.rows,), (THREADS,)
    mod = module("default")
    args = {"softmax": (x, out, cols), "layernorm": (x, out, gamma, beta, cols, eps),
            "rmsnorm": (x, out, gamma, cols, eps)}
    nbytes = x.nbytes

    def launch(name: str, op_args: tuple[Any, ...]) -> Callable[[], None]:
        fn = mod.get_function(name)
        return lambda: fn(grid, block, op_args)

    launchers = {COPY_FLOOR: launch(COPY_FLOOR, (x, out, cols)),
                 MEMCPY: lambda: out.data.copy_from_device_async(x.data, nbytes)}
    touches = {COPY_FLOOR: 2, MEMCPY: 2}
    for spec in KERNELS:
        if spec.backend == "cuda" and spec.bench:
            launchers[spec.name] = launch(spec.name, args[spec.op])
            touches[spec.name] = spec.touches
    try:
        import torch
        import torch.nn.functional as F
    except Exception:  # torch is optional: its rows are simply absent
        return launchers, touches
    tx, tg, tb = (torch.from_dlpack(a) for a in (x, gamma, beta))
    launchers["torch.softmax"] = lambda: torch.softmax(tx, dim=-1)
    launchers["F.layer_norm"] = lambda: F.layer_norm(tx, (case.cols,), tg, tb, 1e-5)
    launchers["F.rms_norm"] = lambda: F.rms_norm(tx, (case.cols,), tg, 1e-5)
    return launchers, touches


def _event_ms(launch: Callable[[], None], reps: int) -> float:
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(reps):
        launch()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / reps


def measure(cases: Sequence[BenchCase], *, rounds: int = 7, reps: int = 10, warmup: int = 3,
            progress: TextIO | None = None) -> list[BenchRow]:
    """Time every kernel on every case: warm-up per kernel, then ``rounds`` interleaved rounds."""
    if rounds < 3:
        raise ValueError(f"rounds must be at least 3 (a median and a spread) but was {rounds}")
    rows: list[BenchRow] = []
    for case in cases:
        launchers, touches = _launchers(case)
        for launch in launchers.values():
            for _ in range(warmup):
                launch()
        times: dict[str, list[float]] = {name: [] for name in launchers}
        for _ in range(rounds):
            for name, launch in launchers.items():
                times[name].append(_event_ms(launch, reps))
        rows += _rows_for(case, times, touches)
        if progress is not None:
            print(f"  measured {case.name} ({case.mib:.0f} MiB each way)", file=progress, flush=True)
        del launchers
    return rows


@dataclass(frozen=True)
class Gate:
    case: str
    name: str
    value: float
    limit: float
    passed: bool

    def text(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'} {self.case}: {self.name} {self.value:.3f} (limit {self.limit:.3f})"


def gates(rows: Sequence[BenchRow]) -> list[Gate]:
    """At every case: rmsNormRow time <= 1.05 x layerNormRowTwoPass time (the seed's gate), and
    rmsNormRow ask GB/s >= layerNormRowTwoPass ask GB/s (the exercise's gate)."""
    by = {(r.case, r.kernel): r for r in rows}
    out = []
    for case in dict.fromkeys(r.case for r in rows):
        rms, two = by.get((case, "rmsNormRow")), by.get((case, "layerNormRowTwoPass"))
        if rms is None or two is None:
            continue
        ratio = rms.ms / two.ms
        out.append(Gate(case, "time rmsNormRow / layerNormRowTwoPass", ratio, GATE_RATIO, ratio <= GATE_RATIO))
        out.append(Gate(case, "ask GB/s rmsNormRow / layerNormRowTwoPass", rms.ask_gbps / two.ask_gbps,
                        1.0, rms.ask_gbps >= two.ask_gbps))
    return out


@dataclass(frozen=True)
class Prediction:
    text: str
    held: bool
    numbers: str


def predictions(rows: Sequence[BenchRow], *, set_name: str = "seed") -> list[Prediction]:
    """The seed's predictions, re-read on this card (its third, on the overflow row, is
    ``normprops census``'s): every kernel within 70% of the floor; RMS norm beats two-pass layer
    norm; RMS norm and Welford (both three touches) tie within 5%; the copyFloor kernel is the floor
    (within 10% of the device memcpy)."""
    sel = [r for r in rows if r.set == set_name]
    by = {(r.case, r.kernel): r for r in sel}
    cases = list(dict.fromkeys(r.case for r in sel))
    kernels = [r for r in sel if r.kernel not in (COPY_FLOOR, MEMCPY) and not r.kernel.startswith(("torch", "F."))]
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
    lines = [f"{'case':14s} {'kernel':20s} {'touches':>7s} {'ms':>9s} {'spread':>7s} {'ask GB/s':>9s} "
             f"{'% floor':>8s} {'% memcpy':>8s}"]
    for r in rows:
        lines.append(f"{r.case:14s} {r.kernel:20s} {r.touches:7d} {r.ms:9.4f} {100 * r.spread:6.1f}% "
                     f"{r.ask_gbps:9.1f} {r.pct_copy_floor:8.1f} {r.pct_memcpy:8.1f}")
    return "\n".join(lines)


def write_outputs(rows: Sequence[BenchRow], *, json_path: Path | None = None,
                  csv_path: Path | None = None, png_path: Path | None = None,
                  meta: dict[str, Any] | None = None) -> None:
    if json_path is not None:
        doc = {"meta": meta or {}, "rows": [asdict(r) for r in rows],
               "gates": [asdict(g) for g in gates(rows)],
               "predictions": [asdict(p) for p in predictions(rows)]}
        json_path.write_text(json.dumps(doc, indent=1) + "\n")
    if csv_path is not None:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(asdict(rows[0])))
            writer.writeheader()
            writer.writerows(asdict(r) for r in rows)
    if png_path is not None:
        _plot(rows, png_path)


def _plot(rows: Sequence[BenchRow], path: Path) -> None:
    """% of the memcpy floor per kernel per case (matplotlib, the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("the PNG needs matplotlib: pip install 'normprops[plot]'") from exc
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
