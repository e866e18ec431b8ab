"""The bandwidth table's arithmetic, gates and predictions, on synthetic timings (no GPU needed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from normprops.bench import (BenchCase, _rows_for, bench_cases, format_table, gates, predictions,
                             write_outputs)

H200_L2 = 62914560  # 60 MiB


def test_cases_scale_with_the_l2() -> None:
    cases = bench_cases(l2_bytes=H200_L2)
    assert [c.name for c in cases] == ["16384x1024", "4096x4096", "262144x1024", "65536x4096",
                                      "16384x16384"]
    assert {c.mib for c in cases if c.set == "seed"} == {64.0}
    assert {c.mib for c in cases if c.set == "l2"} == {1024.0}  # >= 16 x 60 MiB, a power of two
    assert all(c.elements * 4 >= 16 * H200_L2 for c in cases if c.set == "l2")
    t4 = bench_cases(l2_bytes=4 << 20, sets=("l2",))
    assert {c.mib for c in t4} == {64.0}
    with pytest.raises(ValueError, match="l2_bytes must be positive"):
        bench_cases(l2_bytes=0)


def _rows(rms_ms: float, two_ms: float, case: BenchCase | None = None):
    case = case or BenchCase("16384x1024", "seed", 16384, 1024)
    times = {"copyFloor": [0.050, 0.051, 0.049], "memcpy": [0.040] * 3,
             "rmsNormRow": [rms_ms] * 3, "layerNormRowTwoPass": [two_ms] * 3,
             "layerNormRowWelford": [rms_ms * 1.02] * 3, "softmaxRowSafe": [0.08, 0.081, 0.079]}
    touches = {"rmsNormRow": 3, "layerNormRowTwoPass": 4, "layerNormRowWelford": 3, "softmaxRowSafe": 4}
    return _rows_for(case, times, touches)


def test_ask_bandwidth_and_percent_of_floors() -> None:
    rows = {r.kernel: r for r in _rows(0.062, 0.075)}
    # 16384 x 1024 elements x 8 bytes in 0.050 ms = 2684 GB/s.
    assert rows["copyFloor"].ask_gbps == pytest.approx(16384 * 1024 * 8 / 50e-6 / 1e9)
    assert rows["copyFloor"].pct_copy_floor == pytest.approx(100)
    assert rows["memcpy"].pct_memcpy == pytest.approx(100)
    assert rows["copyFloor"].pct_memcpy == pytest.approx(80)
    assert rows["copyFloor"].spread == pytest.approx(0.002 / 0.050)
    assert rows["rmsNormRow"].touches == 3


@pytest.mark.parametrize("rms, two, time_ok, bandwidth_ok", [
    (0.062, 0.075, True, True),
    (0.078, 0.075, True, False),   # 4% slower: the 5% gate holds, the exercise's does not
    (0.080, 0.075, False, False),  # 6.7% slower
])
def test_gates(rms: float, two: float, time_ok: bool, bandwidth_ok: bool) -> None:
    time_gate, bw_gate = gates(_rows(rms, two))
    assert (time_gate.passed, bw_gate.passed) == (time_ok, bandwidth_ok)
    assert time_gate.value == pytest.approx(rms / two)
    assert ("PASS" if time_ok else "FAIL") in time_gate.text()


def test_predictions_read_the_table() -> None:
    held = {p.text: p.held for p in predictions(_rows(0.062, 0.075))}
    assert held["rmsNormRow beats layerNormRowTwoPass at every case"]
    assert held["rmsNormRow and layerNormRowWelford (3 touches each) tie within 5%"]
    assert not held["copyFloor is the floor: within 10% of the device memcpy"]  # 80%
    assert held["every kernel reaches 70% of the copyFloor floor"] is False  # softmax at 62%


def test_outputs(tmp_path: Path) -> None:
    rows = _rows(0.062, 0.075)
    write_outputs(rows, json_path=tmp_path / "b.json", csv_path=tmp_path / "b.csv")
    doc = json.loads((tmp_path / "b.json").read_text())
    assert len(doc["rows"]) == len(rows) and len(doc["gates"]) == 2 and len(doc["predictions"]) == 4
    with open(tmp_path / "b.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    table = format_table(rows)
    assert table.splitlines()[0].split()[:3] == ["case", "kernel", "touches"]
    assert "rmsNormRow" in table
