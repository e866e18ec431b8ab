"""What the bandwidth table decides: the RMS-versus-two-pass gates, the production kernels' targets,
the lead over the fastest peer and the textbook kernels' predictions; plain functions of the rows
(tested without a GPU)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from normprops.bench.launchers import COPY_FLOOR, PEER_LIBRARIES, PEERS
from normprops.bench.timing import BenchRow
from normprops.specs import KERNELS

__all__ = ["Gate", "LeadRow", "Prediction", "gates", "targets", "lead_table", "lead_targets", "predictions",
           "GATE_RATIO", "MEMCPY_TARGET", "LEAD_RATIO", "LEAD_MEMCPY_TARGET", "PEER_TABLE_LIBRARIES"]

GATE_RATIO = 1.05  # rmsNormRow may be at most 5% slower than layerNormRowTwoPass


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
    from normprops.cuda.layout import PROD_VARIANTS

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
    from normprops.cuda.layout import PROD_VARIANTS

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


def predictions(rows: Sequence[BenchRow], *, set_name: str = "textbook") -> list[Prediction]:
    """The textbook kernels' predictions, re-read on this card (its third, on the overflow row, is
    ``normprops census``'s): every kernel within 70% of the floor; RMS norm beats two-pass layer
    norm; RMS norm and Welford (both three touches) tie within 5%; the copyFloor kernel is the floor
    (within 10% of the device memcpy)."""
    sel = [r for r in rows if r.set == set_name]
    by = {(r.case, r.kernel): r for r in sel}
    cases = list(dict.fromkeys(r.case for r in sel))
    textbook = {k.name for k in KERNELS if k.backend == "cuda"}
    kernels = [r for r in sel if r.kernel in textbook]
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
