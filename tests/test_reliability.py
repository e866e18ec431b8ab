"""Never a traceback, a hang, a lost report or a false alarm of our own: the hunt and replay under
bad input, faults and interruption."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from cli_harness import run

from normprops.api import hunt_families
from normprops.hunt import HuntConfig
from normprops.judge import Verdict
from normprops.launch import target_from_callable
from normprops.report import describe_case, format_finding

USER_MODULE_NAME = "userkernels_rel"  # written by the user_module fixture (conftest.py)
USER_MODULE = textwrap.dedent('''
    import time
    import numpy as np

    def _softmax64(x):
        z = x.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_good(x):
        return _softmax64(x)

    def softmax_bad(x):
        with np.errstate(all="ignore"):
            e = np.exp(x)
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_bad_too(x):  # the same bug under another name: its own findings
        return softmax_bad(x)

    def softmax_no_shift_wide(x):
        # Forgets the max shift, but only on rows wider than 512: overflow gives inf / inf = NaN.
        if x.shape[1] <= 512:
            return _softmax64(x)
        with np.errstate(all="ignore"):
            e = np.exp(x.astype(np.float32))
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_warns(x):
        e = np.exp(x)  # overflows (RuntimeWarning) on large logits
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_float64_out(x):
        return _softmax64(x).astype(np.float64)

    def softmax_hangs(x):
        while True:
            time.sleep(0.01)

    def softmax_slow(x):
        time.sleep(0.05)
        return _softmax64(x)

    def softmax_logs_calls(x):
        # A line in calls.log (in the working directory) for each call: a test reads whether it ran.
        with open("calls.log", "a") as log:
            print("called", file=log)
        return _softmax64(x)

    _calls = [0]

    def softmax_swallows_ctrl_c(x):
        # Ctrl-C lands in code that swallows it, as a finalizer does ("Exception ignored in ...").
        import signal
        _calls[0] += 1
        if _calls[0] == 3:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass
        return _softmax64(x)

    def softmax_ctrl_c(x):
        raise KeyboardInterrupt  # Ctrl-C inside the kernel's first call
''')



def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


# --- 1. a finding in the stress batch is described, not a crash ------------------------------


def test_a_race_seen_in_the_stress_batch_is_described_with_the_batch() -> None:
    launches = {"n": 0}

    def racy(x):  # row 12 of any big batch differs from launch to launch
        out = _softmax64(x)
        launches["n"] += 1
        if x.shape[0] > 12 and launches["n"] % 2:
            out[12] = np.nextafter(out[12], np.float32(2))
        return out

    target = replace(target_from_callable(racy, op="softmax"), stress_rows=64)
    run_ = hunt_families(target, families=["ordinary"], config=HuntConfig(max_examples=10, seed=0))
    finding = run_.results[0].findings[0]
    assert finding.property == "determinism"
    assert finding.verdict.row < finding.minimal.rows  # the case's row, not the batch's
    text = format_finding(finding)
    assert "failing output: row 12 of a stress batch of" in text
    assert f"a copy of the case's row {12 % finding.minimal.rows}" in text


def test_describe_case_never_indexes_past_the_case() -> None:
    from normprops.judge import Verdict
    from normprops.strategies import make_case

    case = make_case(op="softmax", family="ordinary", rows=2, cols=3, seed=0,
                     params={"loc": 0.0, "scale": 1.0, "spikes": []})
    verdict = Verdict("softmax[k]", "determinism", "ordinary", 12, 7, 1.0, 1.0, None, None,
                      float("inf"), "differs")
    text = describe_case(case, verdict)
    assert "row 12 is outside the case's 2 rows" in text and "x[0] = [" in text


# --- 3, 4. replay is as safe as hunt ---------------------------------------------------------


def _fixture(user_module: str, tmp_path: Path) -> Path:
    code, _, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                     "--families", "overflow_logits", "--max-examples", "30", "--seed", "0",
                     "--fixtures-dir", str(tmp_path / "fx"))
    assert code == 1
    return min((tmp_path / "fx" / "softmax").glob("*.json"))


def test_replay_stops_a_hanging_kernel(user_module: str, tmp_path: Path) -> None:
    """The first fixture's call is stopped at its timeout, and the replay stops there: a kernel
    that hung is not called again."""
    _fixture(user_module, tmp_path)
    fixtures = len(list((tmp_path / "fx" / "softmax").glob("*.json")))
    code, out, err = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_hangs",
                         "--fixtures-dir", str(tmp_path / "fx"), "--call-timeout", "0.5")
    assert code == 1 and out.count("did not return within 0.5 s") == 1 and err == "", out + err
    assert (f"{fixtures} fixtures: 0 passed, 1 failed, {fixtures - 1} not run (the kernel cannot be "
            f"called again)") in out, out


@pytest.mark.parametrize("damage", ["truncated", "garbled", "key_missing", "bad_values", "not_json_object"])
def test_a_damaged_fixture_is_one_line_and_the_rest_still_replay(user_module: str, tmp_path: Path,
                                                                 damage: str) -> None:
    good = _fixture(user_module, tmp_path)
    text = good.read_text()
    doc = json.loads(text)
    broken = good.with_name("aaa-broken.json")
    if damage == "truncated":
        broken.write_text(text[: len(text) // 2])
    elif damage == "garbled":
        broken.write_bytes(b"\xff\xfe garbage \x00")
    elif damage == "key_missing":
        del doc["minimal"]["x"]
        broken.write_text(json.dumps(doc))
    elif damage == "bad_values":
        doc["minimal"]["x"]["hex"][0] = "not-a-float"
        broken.write_text(json.dumps(doc))
    else:
        broken.write_text("[1, 2, 3]")
    report = tmp_path / "replay.json"
    code, out, err = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                         "--fixtures-dir", str(tmp_path / "fx"), "--json", str(report))
    assert code == 3, out + err
    lines = [line for line in out.splitlines() if "aaa-broken.json" in line]
    assert len(lines) == 1 and lines[0].startswith("unreadable ")
    assert f"pass {good.name}" in out and "1 could not be read" in out and "Traceback" not in out + err
    rows = json.loads(report.read_text())["fixtures"]
    assert {r["outcome"] for r in rows} == {"unreadable", "pass"}


def test_replay_of_a_missing_directory_has_nothing_to_replay(user_module: str, tmp_path: Path) -> None:
    # A repository whose kernel has no fixtures yet has no folder either (git keeps no empty one):
    # the same exit 5 as an empty folder, which a CI job accepts; a file there is a usage error.
    code, out, err = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                         "--fixtures-dir", str(tmp_path / "nowhere"))
    assert code == 5 and err == "" and "nowhere does not exist" in out, out + err
    (tmp_path / "file").write_text("")
    code, out, err = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                         "--fixtures-dir", str(tmp_path / "file"))
    assert code == 2 and "not a directory" in err and len(err.splitlines()) == 1



def test_replay_with_nothing_to_replay_exits_5_and_says_where_to_look(user_module: str,
                                                                      tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                       "--fixtures-dir", str(empty))
    assert code == 5 and "no softmax fixtures under" in out
    # The op's own folder given by mistake: its .json files are pointed out.
    (empty / "softmax").mkdir()
    (empty / "softmax" / "ordinary-0123456789ab.json").write_text("{}")
    code, out, _ = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                       "--fixtures-dir", str(empty / "softmax"), "--json", str(tmp_path / "r.json"))
    assert code == 5 and "holds 1 .json file(s): pass the directory above it" in out
    assert json.loads((tmp_path / "r.json").read_text())["error"] == "nothing to replay"

# --- 5. paths are checked before any hunting ---------------------------------------------------


@pytest.mark.parametrize("flag, make, message", [
    ("--fixtures-dir", lambda p: p.write_text(""), "is a file; name a directory"),
    ("--json", lambda p: p.mkdir(), "is a directory; name a file"),
    ("--json-parent-is-a-file", lambda p: p.write_text(""), "is a file, not a directory"),
])
def test_bad_output_paths_are_usage_errors_before_hunting(user_module: str, tmp_path: Path, flag: str,
                                                          make, message: str) -> None:
    target = tmp_path / "thing"
    make(target)
    argv = ["hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_logs_calls", "--max-examples",
            "50"]
    if flag == "--json-parent-is-a-file":
        argv += ["--json", str(target / "report.json")]
    else:
        argv += [flag, str(target)]
    code, out, err = run(*argv)
    assert code == 2 and message in err and len(err.splitlines()) == 1
    assert out == "" and not (tmp_path / "calls.log").exists()  # nothing was hunted


@pytest.mark.parametrize("argv, named, fix", [
    (["hunt", "--op", "softmax", "--impl", "{module}:softmax_slow", "--json", ""], "argument --json",
     "e.g. report.json, or leave the flag out"),
    (["hunt", "--op", "softmax", "--impl", "{module}:softmax_slow", "--fixtures-dir", ""],
     "argument --fixtures-dir", "e.g. normprops-fixtures, or leave the flag out"),
    (["replay", "--op", "softmax", "--impl", "{module}:softmax_good", "--json", ""],
     "argument --json", "e.g. report.json, or leave the flag out"),
    (["report", "merge", ""], "argument REPORT.json", "e.g. shard1.json"),
    (["bench", "--csv", ""], "argument --csv", "e.g. bench.csv, or leave the flag out"),
], ids=["hunt-json", "hunt-fixtures", "replay-json", "merge-report", "bench-csv"])
def test_an_empty_path_is_a_usage_error_that_names_it(user_module: str, argv: list[str], named: str,
                                                      fix: str) -> None:
    """``--json ''`` is read as "." by Path: it said ". is a directory"; it names the empty path."""
    code, out, err = run(*(a.format(module=user_module) for a in argv))
    assert code == 2 and out == "" and len(err.splitlines()) == 1, out + err
    assert f"{named}: the path is empty (''): name one, {fix}" in err, err


NO_NEW_FILES = Path("/proc")  # os.access says it is writable (to root), yet no file can be made in it


@pytest.mark.skipif(not (NO_NEW_FILES / "self").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("argv", [
    ["hunt", "--op", "softmax", "--impl", "{module}:softmax_logs_calls", "--json", "/proc/r.json"],
    ["hunt", "--op", "softmax", "--impl", "{module}:softmax_logs_calls", "--fixtures-dir", "/proc/fx"],
    ["replay", "--op", "softmax", "--impl", "{module}:softmax_good", "--json", "/proc/r.json"],
    ["report", "merge", "r.json", "--png", "/proc/m.png"],
    ["bench", "--csv", "/proc/b.csv"],
    ["bench", "--lead-png", "/proc/lead.png"],
], ids=["hunt-json", "hunt-fixtures", "replay-json", "merge-png", "bench-csv", "bench-lead-png"])
def test_an_output_where_no_file_can_be_created_is_a_usage_error(user_module: str, tmp_path: Path,
                                                                  argv: list[str]) -> None:
    code, out, err = run(*(a.format(module=user_module) for a in argv))
    assert code == 2 and len(err.splitlines()) == 1, out + err
    assert "cannot create a file in /proc" in err
    assert out == "" and not (tmp_path / "calls.log").exists()  # nothing was hunted


def test_json_into_a_missing_directory_is_refused_not_created(user_module: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_slow",
                         "--json", "reports/today/r.json")
    assert code == 2 and out == ""
    assert err == ("normprops hunt: error: --json reports/today/r.json: no directory reports/today; "
                   "create it first (mkdir -p reports/today)\n")
    assert not (tmp_path / "reports").exists()
    code, _, err = run("report", "merge", "r.json", "--json", "merged/all.json")
    assert code == 2
    assert err.startswith("normprops report merge: error: --json merged/all.json: no directory merged;")
    assert run("hunt", "--help")[0] == 0
    assert "go into a directory that exists" in " ".join(capsys.readouterr().out.split())


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_report_that_cannot_be_written_at_the_end_is_one_line_exit_4(
        user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.jsonio

    monkeypatch.setattr(normprops.jsonio.os, "replace", _disk_full)  # checked fine, then the disk filled
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                         "--families", "ordinary", "--max-examples", "5", "--json", "r.json")
    assert code == 4
    assert "clean: 1 family" in out  # the results are printed all the same
    assert err == ("normprops hunt: error: cannot write r.json: No space left on device; the results "
                   "above are not saved\n")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".r.json")] == []  # no temporary left


def test_a_fixture_that_cannot_be_written_stops_the_hunt_in_one_line_exit_4(
        user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.jsonio

    monkeypatch.setattr(normprops.jsonio.os, "replace", _disk_full)
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                         "--families", "overflow_logits,ordinary", "--max-examples", "30", "--seed", "0")
    assert code == 4 and len(err.splitlines()) == 1, err
    assert err.startswith("normprops hunt: error: cannot write normprops-fixtures/softmax/overflow_logits-")
    assert err.endswith(".json: No space left on device\n")
    assert "internal error" not in err and "bug" not in err


@pytest.fixture
def umask() -> Iterator[Callable[[int], None]]:
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_reports_and_fixtures_get_the_mode_the_umask_gives(user_module: str, tmp_path: Path,
                                                           umask: Callable[[int], None], mask: int,
                                                           mode: int) -> None:
    umask(mask)
    code, _, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                     "--families", "overflow_logits", "--max-examples", "30", "--seed", "0",
                     "--fixtures-dir", "fx", "--json", "r.json")
    assert code == 1
    fixtures = list((tmp_path / "fx" / "softmax").glob("*.json"))
    assert fixtures and stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == mode
    assert {stat.S_IMODE(f.stat().st_mode) for f in fixtures} == {mode}


# --- 6. the headline is the most severe failure, with digits enough ---------------------------


def test_the_headline_names_the_nan_not_a_rounding_error(user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_no_shift_wide",
                       "--families", "overflow_logits", "--max-examples", "100", "--seed", "0",
                       "--no-fixtures", "--json", str(report))
    assert code == 1
    failures = json.loads(report.read_text())["failures"]
    assert failures[0]["property"] == "finite"  # severity order: finite before accuracy
    assert failures[0]["minimal_shape"][1] > 512


@pytest.mark.parametrize("got, expected, shown", [
    (0.99999988, 1.0, ("0.9999999", "1")),
    (1.0000001, 1.0, ("1.0000001", "1")),
    (0.5, 0.25, ("0.5", "0.25")),
])
def test_got_and_expected_are_printed_with_digits_enough(got, expected, shown) -> None:
    error = abs(got - expected)
    verdict = Verdict("softmax[k]", "accuracy", "ordinary", 0, 1, got, expected, error, error / 4, 4.0, "")
    assert f" got {shown[0]} expected {shown[1]} " in verdict.message()


# --- 7. fixture identity --------------------------------------------------------------------


def test_the_same_input_failing_two_kernels_gives_two_fixtures(user_module: str, tmp_path: Path) -> None:
    paths = []
    for name in ("softmax_bad", "softmax_bad_too"):
        report = tmp_path / f"{name}.json"
        code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:{name}",
                           "--families", "overflow_logits", "--max-examples", "30", "--seed", "0",
                           "--fixtures-dir", str(tmp_path / "fx"), "--json", str(report))
        assert code == 1
        failure = json.loads(report.read_text())["failures"][0]
        path = Path(failure["fixture"])
        assert json.loads(path.read_text())["impl"] == name  # the printed file is this kernel's
        paths.append(path)
    assert paths[0] != paths[1]
    # Each kernel's findings are files of their own.
    owners = [json.loads(p.read_text())["impl"] for p in (tmp_path / "fx" / "softmax").glob("*.json")]
    assert owners.count("softmax_bad") == owners.count("softmax_bad_too") >= 1


def test_impl_fixtures_go_to_a_folder_of_their_own_and_it_is_said_once(user_module: str,
                                                                      tmp_path: Path) -> None:
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                       "--families", "overflow_logits,ordinary", "--max-examples", "30", "--seed", "0")
    assert code == 1
    assert (tmp_path / "normprops-fixtures" / "softmax").is_dir()
    assert not (tmp_path / "tests").exists()
    assert out.count("fixtures: ") == 1 and "saved under normprops-fixtures/" in out


# --- 8. quiet and to the point ------------------------------------------------------------------


def test_the_kernels_warnings_are_counted_not_printed(user_module: str, tmp_path: Path,
                                                     capfd: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_warns",
                         "--families", "overflow_logits", "--max-examples", "30", "--seed", "0",
                         "--no-fixtures", "--json", str(report))
    captured = capfd.readouterr()
    assert "RuntimeWarning" not in captured.out + captured.err
    warned = [line for line in out.splitlines() if "warning" in line]
    assert len(warned) == 1 and "RuntimeWarning: overflow encountered in exp" in warned[0]
    (result,) = json.loads(report.read_text())["results"]
    assert result["warnings"] > 1 and "overflow" in result["first_warning"]


def test_one_contract_failure_stops_the_hunt_with_one_message(user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_float64_out",
                       "--max-examples", "10", "--seed", "0", "--fixtures-dir", str(tmp_path / "fx"),
                       "--json", str(report))
    assert code == 1
    assert out.count("dtype float64") == 1  # the verdict once; the second family only refers to it
    assert "the same contract failure as in ordinary" in out and "fix that first" in out
    doc = json.loads(report.read_text())
    assert len(doc["results"]) == 2 and any("stopped" in n for n in doc["notes"])
    assert len(list((tmp_path / "fx" / "softmax").glob("*.json"))) == 1
    (stopped,) = [line for line in out.splitlines() if line.startswith("  stopped:")]
    assert stopped == (f"  stopped: ordinary and overflow_logits failed the calling contract the "
                       f"same way: fix that first; {len(doc['not_reached'])} of "
                       f"{len(doc['not_reached']) + 2} families not hunted."), stopped


def test_a_repeated_contract_failure_in_the_last_family_stops_nothing(user_module: str) -> None:
    """--families naming only the failing ones: each is hunted, nothing is left to stop, and no
    line says that families were not hunted."""
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_float64_out",
                       "--families", "ordinary,overflow_logits", "--max-examples", "10", "--seed",
                       "0", "--no-fixtures")
    assert code == 1
    assert "the same contract failure as in ordinary" in out
    assert "stopped" not in out and "not hunted" not in out, out
    assert out.splitlines()[-1] == "2 of 2 families failed (2 findings).", out


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum, code, word, background", [
    (signal.SIGINT, 130, "interrupted", False),  # Ctrl-C
    # What a batch scheduler or a CI job's timeout sends: as Ctrl-C, the report saying so.
    (signal.SIGTERM, 143, "terminated", False),
    # A shell's background job (`normprops hunt ... &`, nohup) starts with SIGINT ignored, and
    # keeps ignoring it; SIGTERM still stops it with its report.
    (signal.SIGTERM, 143, "terminated", True),
])
def test_a_stopped_hunt_prints_what_was_found_writes_the_report_and_exits_with_its_status(
        user_module: str, tmp_path: Path, signum: int, code: int, word: str, background: bool) -> None:
    # A child inherits an ignored SIGINT (and would then rightly keep ignoring it).
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    report = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "normprops", "hunt", "--op", "softmax", "--impl",
         f"{user_module}:softmax_slow", "--max-examples", "200", "--seed", "0", "--no-fixtures",
         "--json", str(report)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONUNBUFFERED": "1"},
        preexec_fn=_ignore_sigint if background else None)
    first = proc.stdout.readline()  # the header: the hunt has started
    assert first.startswith("normprops hunt:"), first + proc.stderr.read()
    time.sleep(2.0)
    proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"no exit within 60 s of {word}; stdout: {out[-2000:]!r} stderr: {err[-2000:]!r}")
    assert proc.returncode == code, out + err
    assert "Traceback" not in out + err and f"{word}: what was found so far follows" in out
    doc = json.loads(report.read_text())
    assert doc["error"] == word and doc["complete"] is False
    assert doc["results"] and doc["results"][0]["family"] == "ordinary"


def test_a_ctrl_c_that_something_swallows_still_stops_the_hunt(user_module: str,
                                                              tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_swallows_ctrl_c",
                         "--max-examples", "200", "--no-fixtures", "--json", str(report))
    assert code == 130 and "interrupted" in out, out + err
    doc = json.loads(report.read_text())
    # Stopped at the next example of the first family, not after 200 examples of each family.
    assert doc["error"] == "interrupted" and len(doc["results"]) == 1 and doc["results"][0]["examples"] <= 3
    # The families it never reached are named, as a time budget names them.
    assert doc["not_reached"] and "ordinary" not in doc["not_reached"]
    assert f"not hunted: {', '.join(doc['not_reached'])}" in out
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is put back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_ctrl_c_inside_the_first_call_judged_nothing(user_module: str, tmp_path: Path) -> None:
    """The example Ctrl-C stopped inside the kernel's call is not counted: the family judged
    nothing, and says so rather than a worst err/tol of 0."""
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_ctrl_c",
                       "--families", "ordinary", "--no-fixtures", "--json", str(report))
    assert code == 130, out
    family = next(line for line in out.splitlines() if line.startswith("  ordinary"))
    assert family.split()[1:4] == ["stopped", "0", "examples"] and "nothing judged" in family, family
    (result,) = json.loads(report.read_text())["results"]
    assert result["examples"] == 0 and result["max_ratio"] is None, result


def test_a_ctrl_c_while_a_fixture_is_saved_names_the_families_not_reached(
        user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C between two hunts (here while the first finding's fixture is written) stops the hunt
    as one during a hunt does: exit 130, the report written, the families never hunted named."""
    import normprops.engine

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(normprops.engine, "save_findings", interrupted)
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                         "--families", "ordinary,overflow_logits,tiny", "--max-examples", "20",
                         "--seed", "0", "--fixtures-dir", str(tmp_path / "fx"), "--json", str(report))
    assert code == 130 and "Traceback" not in out + err, out + err
    doc = json.loads(report.read_text())
    assert doc["error"] == "interrupted" and doc["not_reached"] == ["overflow_logits", "tiny"]
    assert "not hunted: overflow_logits, tiny" in out


def test_an_internal_error_is_one_line_exit_4_and_the_report_is_written(
        user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.hunt

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug of ours")

    monkeypatch.setattr(normprops.hunt, "evaluate", broken)
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                         "--families", "ordinary", "--max-examples", "5", "--json", str(report))
    assert code == 4
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: a bug of ours" in err
    doc = json.loads(report.read_text())
    assert doc["error"].startswith("internal error") and "Traceback" in doc["traceback"]


def test_a_ctrl_c_swallowed_by_a_finalizer_stays_pending_without_a_traceback() -> None:
    """Ctrl-C noticed inside a finalizer (a garbage-collector callback, say) is recorded for the
    hunt's next check, and Python's "Exception ignored" traceback is not printed."""
    code = textwrap.dedent('''
        import os, signal, sys
        from normprops import interrupt

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(10000):
                    pass

        with interrupt.catching():
            item = Finalized()
            del item
            print("pending" if interrupt.requested() else "lost")
    ''')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "pending", done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The first second of a run goes to importing numpy and Hypothesis: a Ctrl-C there printed a
    traceback from inside whichever module was loading."""
    import importlib.abc

    class Interrupted(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "normprops.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "normprops.cli")
    monkeypatch.setattr(sys, "meta_path", [Interrupted(), *sys.meta_path])
    from normprops.__main__ import main

    assert main() == 130
    assert capsys.readouterr().err == "normprops: interrupted\n"


def test_an_error_of_ours_that_does_not_repeat_is_raised_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # An error outside the kernel's call (everything the kernel raises is a verdict) that does not
    # come back when Hypothesis runs the example again (Hypothesis's Flaky): an internal error, as
    # it would be had it repeated; never a pass, nor a finding against the kernel.
    import normprops.hunt as hunt_module
    from normprops.examples.correct import softmax_f64

    real, calls = hunt_module.evaluate, []

    def once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("once only")
        return real(*args, **kwargs)

    monkeypatch.setattr(hunt_module, "evaluate", once)
    target = target_from_callable(softmax_f64, op="softmax")
    with pytest.raises(RuntimeError, match="once only"):
        hunt_module.hunt(target, family="ordinary", config=HuntConfig(max_examples=20, seed=0))


def test_the_reports_worst_ratio_is_the_one_printed() -> None:
    """A family that failed outright (a raise, a non-finite output) has no finite ratio: the JSON
    says inf, as the terminal does, not the 0 of the examples that passed before it."""
    from normprops.examples.planted import softmax_no_shift
    from normprops.report import result_json

    def raises(x):
        raise ValueError("no")

    for fn, family in ((raises, "ordinary"), (softmax_no_shift, "overflow_logits")):
        target = target_from_callable(fn, op="softmax")
        config = HuntConfig(max_examples=20, seed=0)
        (result,) = hunt_families(target, families=[family], config=config).results
        assert result.worst_ratio == float("inf")
        assert result_json(result)["max_ratio"] == "inf"
