"""What ``normprops bench`` shows and saves: the case list, the table, the verdicts and the lead table
as text; JSON, CSV and PNG files."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from normprops.bench.cases import L2_MULTIPLE, TIMED_OPS, BenchCase
from normprops.bench.launchers import Note
from normprops.bench.timing import BenchRow, LaunchRow, Measurement
from normprops.bench.verdicts import (
    LEAD_MEMCPY_TARGET,
    LEAD_RATIO,
    PEER_TABLE_LIBRARIES,
    LeadRow,
    gates,
    lead_table,
    lead_targets,
    predictions,
    targets,
)
from normprops.dtypes import get_dtype

__all__ = ["format_cases", "format_case_list", "format_run_header", "format_report", "format_table",
           "format_lead_table", "write_outputs"]


def format_cases(cases: Sequence[BenchCase], *, l2_bytes: int) -> str:
    lines = [f"{'case':20s} {'set':8s} {'rows':>7s} {'cols':>7s} {'dtype':9s} {'MiB':>8s} {'x L2':>6s} "
             f"{'regime':8s} ops"]
    for c in cases:
        bytes_each_way = c.elements * get_dtype(c.dtype).itemsize
        regime = "decode" if c.decode else ("dram" if c.dram_bound else "-")
        lines.append(f"{c.name:20s} {c.set:8s} {c.rows:7d} {c.cols:7d} {c.dtype:9s} {c.mib:8.2f} "
                     f"{bytes_each_way / l2_bytes:6.2f} {regime:8s} {','.join(c.ops) or 'all'}")
    return "\n".join(lines)



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




def format_case_list(cases: Sequence[BenchCase], *, l2_bytes: int, source: str) -> str:
    """``normprops bench --list-cases``: the L2 the cases are scaled to and where it came from, then
    the cases."""
    return (f"L2 {l2_bytes / 2**20:.0f} MiB ({source}); {len(cases)} cases; regime dram: at least "
            f"{L2_MULTIPLE}x the L2 each way\n" + format_cases(cases, l2_bytes=l2_bytes))


def format_run_header(*, device: str, l2_bytes: int, rounds: int, reps: int,
                      peers: dict[str, tuple[bool, str]]) -> str:
    """The lines before a measurement: the device, its L2, how it is timed, and each peer library
    asked for with whether it can run here."""
    lines = [f"normprops bench on {device}; L2 {l2_bytes / 2**20:.0f} MiB; {rounds} interleaved rounds of "
             f"{reps} launches, CUDA events"]
    lines += [f"peer {lib}: {'available' if ok else 'unavailable'} ({why})"
              for lib, (ok, why) in peers.items()]
    return "\n".join(lines)


def format_report(result: Measurement) -> str:
    """The table, then what it decides: the predictions (when the textbook cases ran), the gates, the
    targets and the lead, and the lead table with its notes and launch costs."""
    rows = result.rows
    lines = [format_table(rows)]
    if any(r.set == "textbook" for r in rows):
        lines.append("\npredictions (textbook cases):")
        lines += [f"  {'held' if p.held else 'refuted'}: {p.text} ({p.numbers})" for p in predictions(rows)]
    found_gates = gates(rows)
    if found_gates:
        lines.append("\ngates:")
        lines += [f"  {g.text()}" for g in found_gates]
    for title, found in (("production kernels' targets (90% of memcpy at the L2 cases, no slower than "
                          "PyTorch)", targets(rows)),
                         (f"the lead ({LEAD_MEMCPY_TARGET:g}% of memcpy where DRAM-bound, no slower "
                          "than the fastest peer)", lead_targets(rows))):
        if found:
            missed = [t for t in found if not t.passed]
            lines.append(f"\n{title}: {len(found) - len(missed)} of {len(found)} met")
            lines += [f"  {'met   ' if t.passed else 'MISSED'} {t.case}: {t.name} {t.value:.3f} "
                      f"(limit {t.limit:g})" for t in found]
    lead = lead_table(rows)
    if lead or result.notes or result.launch:
        lines.append("\nlead table (us; ratio: ours / the fastest peer):")
        lines.append(format_lead_table(lead, notes=result.notes, launch=result.launch))
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
    ops = [op for op in TIMED_OPS if any(r.op == op for r in lead)]
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
