"""The bandwidth table's arithmetic, gates, predictions, cases, lead table and targets, on synthetic
timings (no GPU needed)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys
from pathlib import Path
from typing import Callable

import pytest

from normprops import bench
from normprops.bench import (
    BenchCase,
    LaunchRow,
    Note,
    bench_cases,
    format_lead_table,
    format_table,
    gates,
    lead_table,
    lead_targets,
    predictions,
    write_outputs,
)
from normprops.bench import launchers as bench_launchers
from normprops.bench import timing as bench_timing
from normprops.bench.cases import MODEL_DECODE_ROWS, MODEL_HIDDEN, MODEL_ODD_HIDDEN, MODEL_VOCAB
from normprops.bench.timing import rows_for

H200_L2 = 62914560  # 60 MiB


def test_cases_scale_with_the_l2() -> None:
    cases = bench_cases(l2_bytes=H200_L2)
    assert [c.name for c in cases] == ["16384x1024", "4096x4096", "262144x1024", "65536x4096",
                                      "16384x16384"]
    assert {c.mib for c in cases if c.set == "textbook"} == {64.0}
    assert {c.mib for c in cases if c.set == "l2"} == {1024.0}  # >= 16 x 60 MiB, a power of two
    assert all(c.elements * 4 >= 16 * H200_L2 for c in cases if c.set == "l2")
    t4 = bench_cases(l2_bytes=4 << 20, sets=("l2",))
    assert {c.mib for c in t4} == {64.0}
    with pytest.raises(ValueError, match="l2_bytes must be positive"):
        bench_cases(l2_bytes=0)


def _rows(rms_ms: float, two_ms: float, case: BenchCase | None = None):
    case = case or BenchCase("16384x1024", "textbook", 16384, 1024)
    times = {"copyFloor": [0.050, 0.051, 0.049], "memcpy": [0.040] * 3,
             "rmsNormRow": [rms_ms] * 3, "layerNormRowTwoPass": [two_ms] * 3,
             "layerNormRowWelford": [rms_ms * 1.02] * 3, "softmaxRowSafe": [0.08, 0.081, 0.079]}
    touches = {"rmsNormRow": 3, "layerNormRowTwoPass": 4, "layerNormRowWelford": 3, "softmaxRowSafe": 4}
    return rows_for(case, times, touches)


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
    (0.078, 0.075, True, False),   # 4% slower: the 5% gate holds, the bandwidth gate does not
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


# --- model-shaped cases, the lead table and its targets ----------------------------------------

def test_model_cases_cover_every_width_at_every_size() -> None:
    cases = bench_cases(l2_bytes=H200_L2, sets=("model",))
    by = {(c.cols, c.dtype, c.rows): c for c in cases}
    assert len(by) == len(cases) == len({c.name for c in cases})
    for cols in (*MODEL_HIDDEN, *MODEL_ODD_HIDDEN):
        mine = [c for c in cases if c.cols == cols]
        assert {c.dtype for c in mine} == {"bfloat16"}
        assert all(c.ops == ("layernorm", "rmsnorm", "addrmsnorm") for c in mine)
        assert sorted(c.rows for c in mine if c.decode) == list(MODEL_DECODE_ROWS)
        (prefill,) = [c for c in mine if not c.decode]
        # The fewest rows holding 1 GiB each way: >= 16 x 60 MiB, one row less would not.
        assert prefill.rows * cols * 2 >= 2**30 > (prefill.rows - 1) * cols * 2
        assert prefill.dram_bound and not any(c.dram_bound for c in mine if c.decode)
    for vocab in MODEL_VOCAB:
        for dtype, itemsize in (("bfloat16", 2), ("float32", 4)):
            mine = [c for c in cases if c.cols == vocab and c.dtype == dtype]
            assert all(c.ops == ("softmax",) for c in mine)
            assert sorted(c.rows for c in mine) == [*MODEL_DECODE_ROWS, -(-2**30 // (vocab * itemsize))]
    assert by[(2880, "bfloat16", 186414)].name == "186414x2880 bf16"
    assert by[(151936, "float32", 1767)].name == "1767x151936"
    assert len(cases) == 8 * 5 + 3 * 2 * 5


def test_a_case_in_two_sets_is_timed_once_with_both_sets_ops() -> None:
    cases = bench_cases(l2_bytes=H200_L2, sets=("decode", "model"))
    same = [c for c in cases if c.name == "64x8192 bf16"]
    assert len(same) == 1 and same[0].ops == () and same[0].decode and same[0].runs("softmax")
    model_only = bench_cases(l2_bytes=H200_L2, sets=("model",))
    assert not [c for c in model_only if c.name == "64x8192 bf16"][0].runs("softmax")


def test_list_cases_needs_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from normprops.cli import main
    from normprops.cuda import build

    monkeypatch.setattr(build, "cuda_status", lambda: (False, "no CUDA device"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["bench", "--list-cases", "--cases", "model,l2-bf16"], out=out, err=err) == 0, err.getvalue()
    text = out.getvalue().splitlines()
    assert text[0].startswith("L2 60 MiB (no usable GPU here, so the H200's 60 MiB is assumed; "
                              "no CUDA device)")
    assert "72 cases" in text[0]  # 70 + 3, with 131072x4096 bf16 in both sets, kept once
    assert text[1].split()[:4] == ["case", "set", "rows", "cols"]
    for name in ("32768x16384 bf16", "131072x4096 bf16"):
        line = next(t for t in text if t.startswith(name))
        assert line.split()[-2:] == ["dram", "all"]
    line = next(t for t in text if t.startswith("1x5121 bf16"))
    assert line.split()[-2:] == ["decode", "layernorm,rmsnorm,addrmsnorm"]
    assert main(["bench", "--list-cases", "--cases", "model,nope"], out=out, err=err) == 2
    assert "--cases: expected a comma-separated subset" in err.getvalue()


@pytest.mark.parametrize("pattern, names", [
    pytest.param("x151936 bf16", ["1x151936 bf16", "8x151936 bf16", "64x151936 bf16", "256x151936 bf16",
                                  "3534x151936 bf16"], id="one-vocabulary"),
    pytest.param("^256x(4097|5121) ", ["256x4097 bf16", "256x5121 bf16"], id="odd-widths-at-256-rows"),
])
def test_only_keeps_the_matching_cases(monkeypatch: pytest.MonkeyPatch, pattern: str,
                                       names: list[str]) -> None:
    from normprops.cli import main
    from normprops.cuda import build

    monkeypatch.setattr(build, "cuda_status", lambda: (False, "no CUDA device"))
    out, err = io.StringIO(), io.StringIO()
    assert main(["bench", "--list-cases", "--cases", "model", "--only", pattern], out=out, err=err) == 0
    assert [line.split()[0] + " " + line.split()[1] for line in out.getvalue().splitlines()[2:]] == names


@pytest.mark.parametrize("pattern, message", [
    pytest.param("x99999", "--only: 'x99999' matches none of the 70 cases of --cases model", id="no-match"),
    pytest.param("(", "--only: '(' is not a regular expression", id="bad-regex"),
])
def test_only_errors(pattern: str, message: str) -> None:
    from normprops.cli import main

    out, err = io.StringIO(), io.StringIO()
    assert main(["bench", "--list-cases", "--cases", "model", "--only", pattern], out=out, err=err) == 2
    assert message in err.getvalue()


def _lead_rows(ours: float, torch_ms: float | None, liger: float | None, quack: float | None,
               memcpy: float = 0.5, *, case: BenchCase | None = None):
    """A layer norm case: ours, PyTorch's, Liger's and QuACK's (None: did not run), and memcpy."""
    case = case or BenchCase("262144x2048 bf16", "model", 262144, 2048, "bfloat16",
                             ("layernorm",), dram_bound=True)
    times = {"memcpy": [memcpy] * 3, "layerNormFastBf16": [ours] * 3}
    ops = {"layerNormFastBf16": "layernorm"}
    libraries = {"layerNormFastBf16": "normprops"}
    for name, lib, ms in (("F.layer_norm", "torch", torch_ms), ("liger.layer_norm", "liger", liger),
                          ("quack.layernorm", "quack", quack)):
        if ms is not None:
            times[name], ops[name], libraries[name] = [ms] * 3, "layernorm", lib
    return rows_for(case, times, {}, ops=ops, libraries=libraries)


def test_lead_ratio_is_against_the_fastest_peer() -> None:
    (lead,) = lead_table(_lead_rows(0.52, 0.80, 0.55, 0.53))
    assert lead.fastest_peer == "quack.layernorm"
    assert lead.ratio == pytest.approx(0.52 / 0.53)
    assert lead.peer_us == pytest.approx({"torch": 800.0, "liger": 550.0, "quack": 530.0})
    assert lead.us == pytest.approx(520.0)
    assert lead.pct_memcpy == pytest.approx(100 * 0.5 / 0.52)
    (lead,) = lead_table(_lead_rows(0.52, 0.80, None, None))
    assert lead.fastest_peer == "F.layer_norm" and set(lead.peer_us) == {"torch"}
    (lead,) = lead_table(_lead_rows(0.52, None, None, None))
    assert lead.fastest_peer is None and lead.ratio is None


@pytest.mark.parametrize("ours, quack, memcpy, ratio_met, memcpy_met", [
    pytest.param(0.520, 0.520, 0.4992, True, True, id="tie-at-96.0"),
    pytest.param(0.521, 0.520, 0.5010, False, True, id="0.2%-slower"),
    pytest.param(0.520, 0.600, 0.4990, True, False, id="95.96%-of-memcpy"),
])
def test_lead_targets(ours: float, quack: float, memcpy: float, ratio_met: bool, memcpy_met: bool) -> None:
    ratio, pct = lead_targets(_lead_rows(ours, 0.8, 0.7, quack, memcpy))
    assert (ratio.passed, pct.passed) == (ratio_met, memcpy_met)
    assert ratio.name == "layerNormFastBf16 time / quack.layernorm" and ratio.limit == 1.0
    assert pct.limit == bench.LEAD_MEMCPY_TARGET == 96.0


def test_decode_cases_have_no_memcpy_target() -> None:
    case = BenchCase("64x2048 bf16", "model", 64, 2048, "bfloat16", ("layernorm",), decode=True)
    (only,) = lead_targets(_lead_rows(0.004, 0.006, 0.009, 0.005, 0.003, case=case))
    assert only.name.endswith("time / quack.layernorm") and only.passed
    (lead,) = lead_table(_lead_rows(0.004, 0.006, 0.009, 0.005, 0.003, case=case))
    assert lead.pct_memcpy is None and lead.decode


def test_lead_outputs(tmp_path: Path) -> None:
    rows = _lead_rows(0.52, 0.80, None, 0.50)
    notes = [Note("262144x2048 bf16", "liger.layer_norm", "dropped: it raised RuntimeError: boom")]
    launch = [LaunchRow("1x2048 bf16", "quack.layernorm", "layernorm", "quack", 3.1, 14.5, None,
                        "not capturable: RuntimeError: x")]
    write_outputs(rows, json_path=tmp_path / "b.json", lead_csv_path=tmp_path / "lead.csv", notes=notes,
                  launch=launch)
    doc = json.loads((tmp_path / "b.json").read_text())
    assert set(doc) >= {"rows", "lead", "lead_targets", "notes", "launch"}
    assert doc["lead"][0]["fastest_peer"] == "quack.layernorm" and doc["lead"][0]["peer_us"]["torch"] == 800.0
    assert [g["passed"] for g in doc["lead_targets"]] == [False, True]  # 4% slower; 96.15% of memcpy
    assert doc["notes"][0]["text"].startswith("dropped") and doc["launch"][0]["graph_us"] is None
    with open(tmp_path / "lead.csv") as f:
        (line,) = list(csv.DictReader(f))
    assert line["torch_us"] == "800.0" and line["liger_us"] == "" and line["quack_us"] == "500.0"
    assert line["ratio_met"] == "False" and line["fastest_peer"] == "quack.layernorm"
    table = format_lead_table(lead_table(rows), notes=notes, launch=launch)
    assert table.splitlines()[0].split()[:4] == ["case", "op", "ours", "us"]
    assert "262144x2048 bf16: liger.layer_norm: dropped" in table
    assert "host-paced    14.5  graph       -  (not capturable" in table
    with pytest.raises(ValueError, match="lead_csv_path: no production kernel ran"):
        write_outputs(_rows(0.062, 0.075), lead_csv_path=tmp_path / "none.csv")


def test_lead_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    write_outputs(_lead_rows(0.52, 0.80, 0.55, 0.50), lead_png_path=tmp_path / "lead.png")
    assert (tmp_path / "lead.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_without_matplotlib_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(RuntimeError, match=r"pip install 'normprops\[plot\]'"):
        write_outputs(_lead_rows(0.52, 0.80, 0.55, 0.50), lead_png_path=tmp_path / "lead.png")


@pytest.mark.parametrize("kwargs, match", [
    pytest.param({"rounds": 2}, "rounds must be at least 3", id="rounds"),
    pytest.param({"reps": 0}, "reps must be at least 1", id="reps"),
    pytest.param({"peers": ("liger", "triton")}, r"peers must be among \('liger', 'quack'\)", id="peers"),
])
def test_run_bench_checks_arguments_before_the_gpu(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bench.run_bench([], **kwargs)


# --- run_bench's bookkeeping on stand-in launchers (the timing itself needs a GPU) -------------

class _Graph:
    def __init__(self, launches: list) -> None:
        self.launches = launches

    def launch(self, stream=None) -> None:
        for fn in self.launches:
            fn()


class _Stream:
    """Stands for a CuPy stream: a context manager that can capture launches into a graph."""

    ptr = 1

    def __init__(self, non_blocking: bool = False) -> None:
        self.capturing = False

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def synchronize(self) -> None:
        assert not self.capturing, "a capturing stream was synchronized"

    def begin_capture(self) -> None:
        assert not self.capturing
        self.capturing, _Stream.captured = True, []

    def end_capture(self) -> _Graph:
        assert self.capturing
        self.capturing = False
        return _Graph(list(_Stream.captured))


@pytest.fixture
def stand_in_gpu(monkeypatch: pytest.MonkeyPatch):
    """run_bench with its GPU calls replaced: launchers are Python functions that log their calls,
    a timed batch is the launch's own number, and a graph replays what was captured."""
    import types

    log: list[str] = []
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.cuda = types.SimpleNamespace(Stream=_Stream)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    ms = {"memcpy": 0.50, "layerNormFastBf16": 0.52, "F.layer_norm": 0.80, "liger.layer_norm": 0.55,
          "quack.layernorm": 0.53}
    current: list[str] = []

    def launcher(name: str, *, fails: str = "") -> Callable[[], None]:
        def launch() -> None:
            if _Stream.__dict__.get("capturing_now") and fails == "capture":
                raise RuntimeError("operation not permitted when stream is capturing")
            if fails == "always":
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            if fails == "side" and _Stream.on_side:
                raise RuntimeError("expected all tensors to be on the same stream")
            current.append(name)
            log.append(name)
            if _Stream.capturing_now and fails != "outside":  # "outside": runs eagerly, uncaptured
                _Stream.captured.append(lambda: current.append(name + " (graph)"))
        return launch

    def fake_event_ms(launch, reps, spin) -> float:
        """A replayed launch takes 0.8 of a plain one; an uncaptured one takes no time at all."""
        current.clear()
        for _ in range(reps):
            launch()
        total = sum(0.8 * ms[n.removesuffix(" (graph)")] if n.endswith(" (graph)") else ms[n]
                    for n in current)
        return total / reps

    def fake_launchers(case, progress=None, *, peers=()):
        launchers = bench_launchers.Launchers({}, {}, {})
        launchers.add("memcpy", launcher("memcpy"), op="", library="")
        launchers.add("layerNormFastBf16", launcher("layerNormFastBf16", fails=case_fail.get("ours", "")),
                      op="layernorm", library="normprops")
        launchers.add("F.layer_norm", launcher("F.layer_norm"), op="layernorm", library="torch")
        launchers.add("liger.layer_norm", launcher("liger.layer_norm", fails=case_fail.get("liger", "")),
                      op="layernorm", library="liger")
        launchers.add("quack.layernorm", launcher("quack.layernorm", fails=case_fail.get("quack", "")),
                      op="layernorm", library="quack")
        return launchers

    case_fail: dict[str, str] = {}
    real_capture = bench_timing._capture

    def capture(stream, launch, reps):
        _Stream.capturing_now = True
        try:
            return real_capture(stream, launch, reps)
        finally:
            _Stream.capturing_now = False

    real_on_stream = bench_timing._on_stream

    @contextlib.contextmanager
    def on_stream(stream):
        _Stream.on_side = True
        try:
            with real_on_stream(stream):
                yield
        finally:
            _Stream.on_side = False

    _Stream.capturing_now = _Stream.on_side = False
    monkeypatch.setattr(bench_timing, "_on_stream", on_stream)
    monkeypatch.setattr(bench_timing, "launchers_for", fake_launchers)
    monkeypatch.setattr(bench_timing, "spin_wait", lambda cycles: (lambda: None))
    monkeypatch.setattr(bench_timing, "event_ms", fake_event_ms)
    monkeypatch.setattr(bench_timing, "_host_paced_ms", lambda launch, reps: (launch(), 0.02)[1])
    monkeypatch.setattr(bench_timing, "_healthy", lambda: None)
    monkeypatch.setattr(bench_timing, "_free_device_memory", lambda: None)
    monkeypatch.setattr(bench_timing, "_capture", capture)
    return case_fail


_DECODE = BenchCase("1x2048 bf16", "model", 1, 2048, "bfloat16", ("layernorm",), decode=True)


def test_run_bench_drops_a_failing_peer_with_a_note(stand_in_gpu) -> None:
    stand_in_gpu["liger"] = "always"
    result = bench.run_bench([_DECODE], rounds=3, reps=2, peers=("liger", "quack"))
    assert {r.kernel for r in result.rows} == {"memcpy", "layerNormFastBf16", "F.layer_norm",
                                               "quack.layernorm"}
    texts = [n.line() for n in result.notes]
    assert "1x2048 bf16: liger.layer_norm: dropped: it raised RuntimeError: CUDA error: an illegal memory " \
           "access was encountered" in texts
    # A library that cannot run here gets one note for the whole run (the stand-in rows above come
    # from the stand-in launchers, not from the libraries).
    from normprops.backends.peers import peer_status

    unusable = [lib for lib in ("liger", "quack") if not peer_status(lib)[0]]
    assert [t.split(": ")[1] for t in texts if t.startswith("every case: ")] == unusable
    (lead,) = lead_table(result.rows)
    assert lead.fastest_peer == "quack.layernorm" and lead.ratio == pytest.approx(0.52 / 0.53)


def test_run_bench_stops_with_one_line_when_ours_fails(stand_in_gpu) -> None:
    stand_in_gpu["ours"] = "always"
    with pytest.raises(bench.BenchError, match=r"^layerNormFastBf16 failed on 1x2048 bf16: RuntimeError: "
                                               r"CUDA error: an illegal memory access was encountered$"):
        bench.run_bench([_DECODE], rounds=3, reps=2, peers=())


def test_graphs_time_every_contender_and_note_what_cannot_be_captured(stand_in_gpu) -> None:
    stand_in_gpu["quack"] = "capture"
    stand_in_gpu["liger"] = "outside"
    result = bench.run_bench([_DECODE], rounds=3, reps=4, peers=(), graphs=True)
    by = {r.kernel: r for r in result.launch}
    assert set(by) == {"memcpy", "layerNormFastBf16", "F.layer_norm", "liger.layer_norm", "quack.layernorm"}
    assert by["layerNormFastBf16"].device_us == pytest.approx(520.0)
    assert by["layerNormFastBf16"].graph_us == pytest.approx(0.8 * 520.0)  # replayed what was captured
    assert by["layerNormFastBf16"].host_paced_us == pytest.approx(20.0) and by["layerNormFastBf16"].note == ""
    assert by["liger.layer_norm"].note.startswith("suspect: a replay took 0.00 of the device time")
    assert by["quack.layernorm"].graph_us is None
    assert by["quack.layernorm"].note == ("not capturable: RuntimeError: operation not permitted when stream "
                                          "is capturing")
    prefill = BenchCase("262144x2048 bf16", "model", 262144, 2048, "bfloat16", ("layernorm",),
                        dram_bound=True)
    assert bench.run_bench([prefill], rounds=3, reps=4, peers=(), graphs=True).launch == []


def test_a_contender_failing_on_the_side_stream_gets_a_note_not_a_row(stand_in_gpu) -> None:
    stand_in_gpu["liger"] = "side"
    result = bench.run_bench([_DECODE], rounds=3, reps=4, peers=(), graphs=True)
    assert "liger.layer_norm" not in {r.kernel for r in result.launch}
    assert "liger.layer_norm" in {r.kernel for r in result.rows}  # the table itself is on the default stream
    assert any(n.kernel == "liger.layer_norm"
               and n.text.startswith("no launch-cost row: it raised on a side stream RuntimeError")
               for n in result.notes)


def test_the_report_holds_the_table_and_every_verdict() -> None:
    rows = _rows(0.062, 0.075) + _lead_rows(0.52, 0.80, None, 0.50)
    notes = [Note("262144x2048 bf16", "liger.layer_norm", "not run: too wide")]
    text = bench.format_report(bench.Measurement(rows, notes, []))
    assert text.startswith(format_table(rows) + "\n\npredictions (textbook cases):\n  refuted: every kernel")
    assert "\n\ngates:\n  PASS 16384x1024: time rmsNormRow / layerNormRowTwoPass 0.827 (limit 1.050)" in text
    assert "\n\nthe lead (96% of memcpy where DRAM-bound, no slower than the fastest peer): 1 of 2" in text
    assert "  MISSED 262144x2048 bf16: layerNormFastBf16 time / quack.layernorm 1.040 (limit 1)" in text
    assert text.endswith("notes:\n  262144x2048 bf16: liger.layer_norm: not run: too wide")
    header = bench.format_run_header(device="NVIDIA H200, sm_90", l2_bytes=H200_L2, rounds=7, reps=10,
                                     peers={"liger": (False, "not installed")})
    assert header.splitlines() == ["normprops bench on NVIDIA H200, sm_90; L2 60 MiB; 7 interleaved rounds "
                                   "of 10 launches, CUDA events", "peer liger: unavailable (not installed)"]


def test_hunt_phases_accounts_for_each_cells_time() -> None:
    """tools/hunt_phases.py: one row per hunted cell, its phases summing to the cell's time."""
    import subprocess

    tool = Path(__file__).parents[1] / "tools" / "hunt_phases.py"
    done = subprocess.run([sys.executable, str(tool), "--backend", "numpy", "--kernel", "rmsNormRow",
                           "--families", "ordinary,overflow_logits", "--max-examples", "100"],
                          capture_output=True, text=True, timeout=300, check=True)
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if "rmsNormRow" in line]
    assert [r[1].strip() for r in rows] == ["ordinary"]  # overflow_logits is softmax's only
    seconds = [float(v) for v in rows[0][3:]]
    total, phases = seconds[0], seconds[1:]
    assert int(rows[0][2]) >= 100 and phases[1] > 0 and phases[5] > 0  # the case's calls, the oracle
    assert sum(phases) == pytest.approx(total, abs=0.05)
