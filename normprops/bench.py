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
from normprops.strategies import get_dtype

__all__ = [
    "BenchCase",
    "BenchRow",
    "Gate",
    "Prediction",
    "bench_cases",
    "measure",
    "gates",
    "targets",
    "predictions",
    "format_table",
    "write_outputs",
    "GATE_RATIO",
]

GATE_RATIO = 1.05  # rmsNormRow may be at most 5% slower than layerNormRowTwoPass
COPY_FLOOR = "copyFloor"
MEMCPY = "memcpy"
TORCH_ADD_RMS = "x+r, F.rms_norm"  # PyTorch's eager add then RMS norm: the fused kernel's peer
SPIN_CYCLES = 4_000_000  # ~2 ms at the H200's clock: longer than enqueueing a timed batch
SEED_CASE_BYTES = 64 << 20


#: Case sets: the seed's two 64 MiB float32 cases; L2-scaled ones (float32, bfloat16, float16);
#: the decode-sized 64 x 8192 rows (float32 and bfloat16).
SETS = ("seed", "l2", "l2-bf16", "l2-f16", "decode")
DECODE_SHAPE = (64, 8192)


@dataclass(frozen=True)
class BenchCase:
    name: str  # "16384x1024", "524288x1024 bf16"
    set: str  # one of SETS
    rows: int
    cols: int
    dtype: str = "float32"

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def mib(self) -> float:
        return self.elements * get_dtype(self.dtype).itemsize / 2**20


def _case(set_name: str, total_bytes: int, cols: int, dtype: str = "float32") -> BenchCase:
    rows = total_bytes // get_dtype(dtype).itemsize // cols
    suffix = "" if dtype == "float32" else {"bfloat16": " bf16", "float16": " f16"}[dtype]
    return BenchCase(f"{rows}x{cols}{suffix}", set_name, rows, cols, dtype)


def bench_cases(*, l2_bytes: int, sets: Sequence[str] = ("seed", "l2")) -> list[BenchCase]:
    """The seed's two 64 MiB cases; cases of 1024, 4096 and 16384 columns whose size each way is the
    smallest power of two at least 16x the L2 (1 GiB for the H200's 60 MiB), in float32 ("l2"),
    bfloat16 ("l2-bf16") or float16 ("l2-f16"); the decode-sized 64 x 8192 ("decode", float32 and
    bfloat16). Every case of the seed and L2 sets moves the same bytes."""
    if l2_bytes < 1:
        raise ValueError(f"l2_bytes must be positive but was {l2_bytes}")
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        raise ValueError(f"sets must be among {SETS} but included {unknown}")
    out: list[BenchCase] = []
    scaled = 1 << math.ceil(math.log2(16 * l2_bytes))
    for name in sets:
        if name == "seed":
            out += [_case("seed", SEED_CASE_BYTES, 1024), _case("seed", SEED_CASE_BYTES, 4096)]
        elif name.startswith("l2"):
            dtype = {"l2": "float32", "l2-bf16": "bfloat16", "l2-f16": "float16"}[name]
            out += [_case(name, scaled, c, dtype) for c in (1024, 4096, 16384)]
        else:
            rows, cols = DECODE_SHAPE
            out += [_case("decode", rows * cols * get_dtype(d).itemsize, cols, d) for d in ("float32", "bfloat16")]
    return out


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


def _rows_for(case: BenchCase, times: dict[str, list[float]], touches: dict[str, int],
              moved: dict[str, int] | None = None) -> list[BenchRow]:
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
                             100 * gbps[kernel] / gbps[MEMCPY], case.dtype))
    return rows


@dataclass
class _Launchers:
    run: dict[str, Callable[[], None]]
    touches: dict[str, int]
    moved: dict[str, int]  # ask bytes where not one read + one write


def _random_storage(rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Standard normal values in the storage type (16-bit types as uint16 bits, truncated)."""
    import cupy

    return _device_storage(rng.standard_normal(shape, dtype=cupy.float32), dtype)


def _device_storage(x: Any, dtype: str) -> Any:
    """A CuPy float32 array in the storage type: bfloat16 truncated (a timing input needs no
    rounding), float16 rounded by CuPy; both as uint16 bits."""
    import cupy

    if dtype == "float32":
        return x
    if dtype == "bfloat16":
        return (x.view(cupy.uint32) >> 16).astype(cupy.uint16)
    return x.astype(cupy.float16).view(cupy.uint16)


def _launchers(case: BenchCase, progress: TextIO | None = None) -> _Launchers:
    """One zero-argument launch per kernel on this case's buffers: the floors, the seed's kernels
    (float32), the production kernels of the case's storage type, and PyTorch's when importable."""
    import cupy

    from normprops._cuda import module
    from normprops.backends.cuda_kernels import THREADS
    from normprops.backends.prod_kernels import ProdKernel
    from normprops.specs import PROD_VARIANTS

    rng = cupy.random.default_rng(0)
    shape = (case.rows, case.cols)
    x = _random_storage(rng, shape, case.dtype)
    out = cupy.empty_like(x)
    residual = _random_storage(rng, shape, case.dtype)
    gamma = _random_storage(rng, (case.cols,), case.dtype)
    beta = _random_storage(rng, (case.cols,), case.dtype)
    cols, eps = np.uint64(case.cols), np.float32(1e-5)
    nbytes = x.nbytes
    fused_bytes = 2 * 2 * nbytes  # x and residual read, out and residual written
    run: dict[str, Callable[[], None]] = {
        MEMCPY: lambda: out.data.copy_from_device_async(x.data, nbytes)}
    touches = {MEMCPY: 2}
    moved: dict[str, int] = {}
    if case.dtype == "float32":
        mod = module("default")
        grid, block = (case.rows,), (THREADS,)
        seed_args = {"softmax": (x, out, cols), "layernorm": (x, out, gamma, beta, cols, eps),
                     "rmsnorm": (x, out, gamma, cols, eps)}

        def seed(name: str, op_args: tuple[Any, ...]) -> Callable[[], None]:
            fn = mod.get_function(name)
            return lambda: fn(grid, block, op_args)

        run[COPY_FLOOR] = seed(COPY_FLOOR, (x, out, cols))
        touches[COPY_FLOOR] = 2
        if case.set != "decode":
            for spec in KERNELS:
                if spec.backend == "cuda" and spec.bench:
                    run[spec.name] = seed(spec.name, seed_args[spec.op])
                    touches[spec.name] = spec.touches
    for spec in KERNELS:
        if spec.backend != "cuda-prod" or not spec.bench or spec.dtype != case.dtype:
            continue
        op = PROD_VARIANTS[spec.name][0]
        kernel = ProdKernel(op, dtype=case.dtype)
        arrays = kernel.operands(x=x, out=out, residual=residual, gamma=gamma, beta=beta)
        run[spec.name] = kernel.launcher(*arrays, rows=case.rows, cols=case.cols, eps=1e-5)
        touches[spec.name] = spec.touches
        if op == "addrmsnorm":
            moved[spec.name] = fused_bytes
    try:
        import torch
        import torch.nn.functional as F

        kind = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[case.dtype]
        tx, tr, tg, tb = (torch.from_dlpack(a).view(kind) for a in (x, residual, gamma, beta))
    except Exception as exc:  # torch is optional: its rows are simply absent
        if progress is not None:
            print(f"  no PyTorch rows for {case.name}: {type(exc).__name__}: {exc}", file=progress)
        return _Launchers(run, touches, moved)
    run["torch.softmax"] = lambda: torch.softmax(tx, dim=-1)
    run["F.layer_norm"] = lambda: F.layer_norm(tx, (case.cols,), tg, tb, 1e-5)
    run["F.rms_norm"] = lambda: F.rms_norm(tx, (case.cols,), tg, 1e-5)
    run[TORCH_ADD_RMS] = lambda: F.rms_norm(tx + tr, (case.cols,), tg, 1e-5)
    moved[TORCH_ADD_RMS] = fused_bytes
    touches[TORCH_ADD_RMS] = 4
    return _Launchers(run, touches, moved)


def _spin(cycles: int) -> Callable[[], None]:
    from normprops._cuda import module

    fn = module("default", source="prod.cu").get_function("spinWait")
    return lambda: fn((1,), (1,), (np.int64(cycles),))


def _event_ms(launch: Callable[[], None], reps: int, spin: Callable[[], None]) -> float:
    import cupy

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    spin()  # keeps the GPU busy while the host enqueues the whole batch
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
    spin = _spin(SPIN_CYCLES)
    rows: list[BenchRow] = []
    for case in cases:
        launchers = _launchers(case, progress)
        for launch in launchers.run.values():
            for _ in range(warmup):
                launch()
        times: dict[str, list[float]] = {name: [] for name in launchers.run}
        for _ in range(rounds):
            for name, launch in launchers.run.items():
                times[name].append(_event_ms(launch, reps, spin))
        rows += _rows_for(case, times, launchers.touches, launchers.moved)
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


#: Each production op's PyTorch peer in the table.
PEERS = {"softmax": "torch.softmax", "layernorm": "F.layer_norm", "rmsnorm": "F.rms_norm",
         "addrmsnorm": TORCH_ADD_RMS}
MEMCPY_TARGET = 90.0  # % of the device memcpy the production kernels must reach at the L2 cases


def targets(rows: Sequence[BenchRow]) -> list[Gate]:
    """The production kernels' targets (issue 5): at least 90% of the memcpy floor at the L2-scaled
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


def write_outputs(rows: Sequence[BenchRow], *, json_path: Path | None = None,
                  csv_path: Path | None = None, png_path: Path | None = None,
                  meta: dict[str, Any] | None = None) -> None:
    if json_path is not None:
        doc = {"meta": meta or {}, "rows": [asdict(r) for r in rows],
               "gates": [asdict(g) for g in gates(rows)],
               "targets": [asdict(g) for g in targets(rows)],
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
