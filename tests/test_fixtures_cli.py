"""Replay and the fixture folder as a CI meets them: the fixtures a kernel is asked about, a report
that lists every failing fixture, a run stopped early that says so, and `normprops fixtures`."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest
from cli_harness import run

import normprops

USER_MODULE = textwrap.dedent('''
    import time

    import ml_dtypes
    import numpy as np

    def _rms64(x, gamma, eps):
        z = x.astype(np.float64)
        return z / np.sqrt((z * z).mean(axis=1, keepdims=True) + eps) * gamma

    def rms_good(x, gamma, eps):
        return _rms64(x, gamma, eps).astype(np.float32)

    def rms_good_bf16(x, gamma, eps):
        return _rms64(x, gamma, eps).astype(ml_dtypes.bfloat16)

    def rms_bf16_accumulate(x, gamma, eps):
        z = x.astype(ml_dtypes.bfloat16)
        ms = (z * z).mean(axis=1, keepdims=True, dtype=ml_dtypes.bfloat16)
        return (z / np.sqrt(ms + ml_dtypes.bfloat16(eps)) * gamma).astype(ml_dtypes.bfloat16)

    def rms_off_by_scale(x, gamma, eps):
        # 1% off everywhere (accuracy), and the other way once |x| reaches 4 (scale invariance).
        # Row by row: a batch-wide max would fail batch invariance too, as draws go.
        off = np.where(np.abs(x).max(axis=1, keepdims=True) < 4, 1.01, 0.99)
        return (_rms64(x, gamma, eps) * off).astype(np.float32)

    def rms_hangs(x, gamma, eps):
        while True:
            time.sleep(0.01)

    def rms_ctrl_c(x, gamma, eps):
        raise KeyboardInterrupt
''')
MODULE = "rmskernels_fx"



@pytest.fixture(scope="module")
def hunted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the hunts of a bfloat16 kernel and of a float32 kernel left in one fixture folder."""
    root = tmp_path_factory.mktemp("hunted")
    (root / f"{MODULE}.py").write_text(USER_MODULE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.syspath_prepend(str(root))
        for argv in (["--impl", f"{MODULE}:rms_bf16_accumulate", "--dtype", "bfloat16"],
                     ["--impl", f"{MODULE}:rms_off_by_scale"]):
            code, out, _ = run("hunt", "--op", "rmsnorm", *argv, "--families", "ordinary",
                               "--max-examples", "50", "--seed", "0")
            assert code == 1, out
    return root / "normprops-fixtures"


@pytest.fixture
def fixtures(hunted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the hunted folder as ./normprops-fixtures, the kernels importable."""
    shutil.copytree(hunted, tmp_path / "normprops-fixtures")
    (tmp_path / f"{MODULE}.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "normprops-fixtures"


def _fixture_docs(directory: Path) -> dict[str, dict]:
    """Each fixture's JSON, by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*/*.json"))}


# --- the fixtures a replay runs --------------------------------------------------------------------


def _bfloat16(directory: Path) -> str:
    (name,) = [n for n, d in _fixture_docs(directory).items() if d["minimal"].get("dtype") == "bfloat16"]
    return name


def test_replay_runs_the_fixtures_of_its_storage_type(fixtures: Path, tmp_path: Path) -> None:
    # A correct float32 kernel is not judged on the bfloat16 kernel's fixture (it would fail its
    # contract, being handed bfloat16 arrays): that one is counted in one line, and named nowhere.
    report = tmp_path / "r.json"
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good", "--json", str(report))
    assert code == 0, out
    assert [line for line in out.splitlines() if "skipped" in line and "fixtures:" not in line] == [
        "1 fixture of other storage types skipped (bfloat16: 1; replaying float32): --dtype bfloat16 "
        "replays it, --all-dtypes every fixture in its own type"]
    assert _bfloat16(fixtures) not in out
    assert out.splitlines()[-1] == "3 fixtures: 2 passed, 0 failed, 1 skipped."
    rows = {Path(r["path"]).name: r for r in json.loads(report.read_text())["fixtures"]}
    assert rows.pop(_bfloat16(fixtures))["outcome"] == "skipped"
    assert {(r["outcome"], r["dtype"]) for r in rows.values()} == {("pass", "float32")}


@pytest.mark.parametrize("impl, code", [("rms_good_bf16", 0), ("rms_bf16_accumulate", 1)])
def test_dtype_replays_the_fixtures_of_that_type(fixtures: Path, impl: str, code: int) -> None:
    got, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:{impl}", "--dtype", "bfloat16")
    assert got == code, out
    assert "2 fixtures of other storage types skipped (float32: 2; replaying bfloat16)" in out
    assert out.count("pass ") + out.count("FAIL ") == 1 and _bfloat16(fixtures) in out


def test_all_dtypes_replays_every_fixture_in_its_own_type(fixtures: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good", "--all-dtypes",
                       "--json", str(report))
    assert code == 1 and "skipped" not in out
    assert f"FAIL {_bfloat16(fixtures)}: rmsnorm[rms_good] ordinary contract" in out
    rows = json.loads(report.read_text())["fixtures"]
    assert sorted((r["dtype"], r["outcome"]) for r in rows) == [
        ("bfloat16", "fail"), ("float32", "pass"), ("float32", "pass")]
    code, _, err = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good", "--all-dtypes",
                       "--dtype", "float32")
    assert code == 2 and "--all-dtypes" in err and len(err.splitlines()) == 1


def test_nothing_left_to_replay_exits_5_saying_what_was_skipped(fixtures: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good", "--min-cols", "20000",
                       "--json", str(report))
    assert code == 5, out
    assert out.splitlines() == [
        "1 fixture of other storage types skipped (bfloat16: 1; replaying float32): --dtype bfloat16 "
        "replays it, --all-dtypes every fixture in its own type",
        out.splitlines()[1],
        "nothing to replay: 3 fixtures under normprops-fixtures/rmsnorm, all skipped."]
    assert out.splitlines()[1].startswith("2 fixtures of other widths skipped: rows ")
    assert out.splitlines()[1].endswith(" wide, outside the widths given (cols >= 20000)")
    doc = json.loads(report.read_text())
    assert doc["error"] == "nothing to replay" and doc["complete"] is False
    assert {r["outcome"] for r in doc["fixtures"]} == {"skipped"}


# --- the report of a replay ----------------------------------------------------------------------


def test_replay_report_lists_every_failing_fixture_as_a_hunt_does(fixtures: Path, tmp_path: Path) -> None:
    hunt_report = tmp_path / "hunt.json"
    assert run("hunt", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_off_by_scale", "--families",
               "ordinary", "--max-examples", "50", "--seed", "0", "--json", str(hunt_report))[0] == 1
    report = tmp_path / "replay.json"
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_off_by_scale",
                       "--all-dtypes", "--json", str(report))
    assert code == 1, out
    doc = json.loads(report.read_text())
    failing = {Path(r["path"]).name for r in doc["fixtures"] if r["outcome"] == "fail"}
    assert len(failing) == len(_fixture_docs(fixtures)) == 3  # the bfloat16 one: a contract failure
    assert {Path(f["fixture"]).name for f in doc["failures"]} == failing
    hunt_failure = json.loads(hunt_report.read_text())["failures"][0]
    for failure in doc["failures"]:
        assert set(failure) == set(hunt_failure)
        saved = json.loads(Path(failure["fixture"]).read_text())
        assert failure["family"] == saved["family"] and failure["label"] == "rmsnorm[rms_off_by_scale]"
        assert failure["message"] in out
    # Each fixture fails under the property it records, scale invariance included.
    own = {Path(f["fixture"]).name: f["property"] for f in doc["failures"]}
    recorded = {name: d["property"] for name, d in _fixture_docs(fixtures).items()
                if d["minimal"].get("dtype", "float32") == "float32"}
    assert {own[p] for p in recorded} == {"accuracy", "scale_invariance"}
    assert all(own[p] == prop for p, prop in recorded.items())
    assert doc["complete"] is True and doc["error"] is None


def test_a_replay_stopped_by_a_hang_counts_what_it_never_ran(fixtures: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, err = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_hangs", "--all-dtypes",
                         "--call-timeout", "0.3", "--json", str(report))
    assert code == 1 and err == "", out + err
    last = out.splitlines()[-1]
    assert last == "3 fixtures: 0 passed, 1 failed, 2 not run (the kernel cannot be called again).", out
    doc = json.loads(report.read_text())
    assert doc["complete"] is False and "did not return within 0.3 s" in doc["error"]
    assert "2 fixtures not run" in doc["error"]
    (failure,) = doc["failures"]
    assert failure["property"] == "contract" and failure["fixture"]
    assert sorted(r["outcome"] for r in doc["fixtures"]) == ["fail", "not_run", "not_run"]


def test_a_replay_stopped_by_ctrl_c_counts_what_it_never_ran(fixtures: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_ctrl_c", "--json", str(report))
    assert code == 130
    last = out.splitlines()[-1]
    assert last == "3 fixtures: 0 passed, 0 failed, 1 skipped, 2 not run (interrupted).", out
    doc = json.loads(report.read_text())
    assert doc["complete"] is False and doc["error"] == "interrupted"
    assert [r["outcome"] for r in doc["fixtures"]] == ["skipped", "not_run", "not_run"]


# --- normprops fixtures list | prune -------------------------------------------------------------


def test_fixtures_list_shows_one_line_per_fixture(fixtures: Path) -> None:
    docs = _fixture_docs(fixtures)
    assert all("saved" in d for d in docs.values())  # a fixture records when it was saved
    # A fixture that records no date (one saved before fixtures did) shows its file's time, marked.
    old = fixtures / "rmsnorm" / _bfloat16(fixtures)
    doc = docs[old.name]
    del doc["saved"]
    old.write_text(json.dumps(doc))
    stamp = datetime(2001, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    os.utime(old, (stamp, stamp))
    code, out, _ = run("fixtures", "list")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["kernel", "op", "dtype", "family", "property", "rows", "x", "cols",
                                "saved", "(UTC)", "path"]
    rows = {Path(line.split()[-1]).name: line.split() for line in lines[1:4]}
    assert set(rows) == set(docs)
    for name, d in docs.items():
        kernel, op, dtype, family, prop, shapes, *when, path = rows[name]
        assert (kernel, op, family, prop) == (f"python:{d['impl']}", "rmsnorm", d["family"], d["property"])
        assert dtype == d["minimal"].get("dtype", "float32")
        minimal = "x".join(map(str, d["minimal"]["x"]["shape"]))
        assert shapes.split("/")[0] == minimal
        assert path == f"normprops-fixtures/rmsnorm/{name}"
        saved = (datetime.fromisoformat(d["saved"]).strftime("%Y-%m-%d %H:%M") if "saved" in d
                 else "2001-02-03 04:05*")
        assert " ".join(when) == saved
    assert lines[4:] == ["3 fixtures under normprops-fixtures; rows x cols: the minimal input/the worst",
                         "*: the file's modification time; the fixture does not record when it was saved"]
    code, out, _ = run("fixtures", "list", "--op", "softmax")
    assert code == 0 and out == "no fixtures under normprops-fixtures/softmax\n"


def test_fixtures_list_names_an_unreadable_fixture_and_exits_3(fixtures: Path) -> None:
    name, doc = next(iter(_fixture_docs(fixtures).items()))
    (fixtures / "rmsnorm" / "ordinary-000000000000.json").write_text("{")
    (fixtures / "rmsnorm" / f"x{name}").write_text(json.dumps({**doc, "saved": "yesterday"}))
    no_minimal = {k: v for k, v in doc.items() if k != "minimal"}
    (fixtures / "rmsnorm" / f"y{name}").write_text(json.dumps(no_minimal))
    code, out, _ = run("fixtures", "list", "--op", "rmsnorm")
    assert code == 3
    (line,) = [x for x in out.splitlines() if f"y{name}" in x]
    assert line.startswith("unreadable ") and line.endswith("minimal: missing"), line
    (line,) = [x for x in out.splitlines() if "ordinary-000000000000" in x]
    assert line.startswith("unreadable ") and "not valid JSON" in line
    (line,) = [x for x in out.splitlines() if f"x{name}" in x]
    assert line.startswith("unreadable ") and "'saved' is 'yesterday', not an ISO 8601 time" in line
    assert "6 fixtures under normprops-fixtures/rmsnorm, 3 of them unreadable" in out
    # A fixture outside an op's folder is never replayed: listed as such, not as a fixture.
    (fixtures / "junk").mkdir()
    (fixtures / "junk" / name).write_text(json.dumps(doc))
    code, out, _ = run("fixtures", "list")
    (line,) = [x for x in out.splitlines() if "junk" in x]
    assert code == 3 and line.startswith("unreadable ") and "not in an op's folder, so never replayed" in line


@pytest.mark.parametrize("text, what", [
    pytest.param("null", "it holds null", id="null"),
    pytest.param("[1, 2]", "it holds a list", id="list"),
    pytest.param("3.5", "it holds the number 3.5", id="number"),
    pytest.param("{}", 'its object has no "format"', id="no-format"),
    pytest.param('{"format": "normprops-report/1"}', 'its format is "normprops-report/1"', id="report"),
])
def test_a_file_that_is_no_fixture_says_what_a_fixture_is(fixtures: Path, text: str, what: str) -> None:
    (fixtures / "rmsnorm" / "ordinary-000000000000.json").write_text(text)
    code, out, _ = run("replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good")
    assert code == 3, out
    (line,) = [x for x in out.splitlines() if "ordinary-000000000000" in x]
    assert line == ("unreadable normprops-fixtures/rmsnorm/ordinary-000000000000.json: not a normprops "
                    f'fixture (a JSON object with "format": "normprops-fixture/1"): {what}'), line


def test_a_fixture_in_another_ops_folder_names_both_ops_and_where_it_belongs(fixtures: Path) -> None:
    name = next(n for n, d in _fixture_docs(fixtures).items()
                if d["minimal"].get("dtype", "float32") == "float32")
    (fixtures / "layernorm").mkdir()
    shutil.move(fixtures / "rmsnorm" / name, fixtures / "layernorm" / name)
    # Not replayed on the layer norm (where it would read as the kernel's contract failure): a bad
    # fixture, one line, status 3.
    code, out, _ = run("replay", "--op", "layernorm", "--impl", "normprops.examples.correct:layernorm_f64")
    assert code == 3, out
    assert out.splitlines() == [
        f"unreadable normprops-fixtures/layernorm/{name}: the file's op is 'rmsnorm' but its folder's "
        f"is 'layernorm' (each op's fixtures live in DIR/<op>/); move it to normprops-fixtures/rmsnorm/",
        "1 fixture: 0 passed, 0 failed, 1 could not be read."]


def test_a_fixture_too_big_to_be_one_is_one_whole_line(fixtures: Path) -> None:
    name, doc = next(iter(_fixture_docs(fixtures).items()))
    doc["minimal"]["x"]["shape"] = [100000, 100000]
    (fixtures / "rmsnorm" / name).write_text(json.dumps(doc))
    code, out, _ = run("fixtures", "list", "--op", "rmsnorm")
    assert code == 3, out
    (line,) = [x for x in out.splitlines() if name in x]
    assert line == (f"unreadable normprops-fixtures/rmsnorm/{name}: minimal.x: shape [100000, 100000] "
                    "holds 10000000000 elements, more than the 67108864 elements a fixture may hold; "
                    "the file is damaged or was not written by normprops"), line


_FOLDER_COMMANDS = [pytest.param(["replay", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_off_by_scale"],
                                 "no rmsnorm fixtures under nowhere/rmsnorm", id="replay"),
                    pytest.param(["fixtures", "list"], "no fixtures under nowhere", id="list"),
                    pytest.param(["fixtures", "prune", "--kernel", "rms_off_by_scale"],
                                 "no fixture of kernel rms_off_by_scale under nowhere", id="prune")]


@pytest.mark.parametrize("argv, said", _FOLDER_COMMANDS)
def test_a_missing_fixtures_folder_is_nothing_to_do_for_every_command(fixtures: Path, argv: list[str],
                                                                       said: str) -> None:
    """No folder is no fixture saved yet (a hunt creates it with its first): exit 5 and one line
    saying the folder does not exist, alike in replay, list and prune; a file there is a usage
    error (2) in all three."""
    code, out, err = run(*argv, "--fixtures-dir", "nowhere")
    assert (code, err) == (5, ""), out + err
    assert out == (f"{said} (nowhere does not exist: a hunt creates it when it saves its first "
                   f"fixture; check --fixtures-dir)\n"), out
    Path("afile").write_text("")
    code, out, err = run(*argv, "--fixtures-dir", "afile")
    assert code == 2 and out == "" and "--fixtures-dir afile: not a directory" in err, out + err


def test_fixtures_prune_removes_a_kernels_fixtures(fixtures: Path) -> None:
    before = set(_fixture_docs(fixtures))
    code, out, _ = run("fixtures", "prune", "--kernel", "rms_off_by_scale", "--dry-run")
    assert code == 0 and out.count("would remove normprops-fixtures/rmsnorm/") == 2, out
    assert out.splitlines()[-1] == ("would remove 2 of 3 fixtures under normprops-fixtures; "
                                    "kept: 1 of other kernels.")
    assert set(_fixture_docs(fixtures)) == before
    code, out, _ = run("fixtures", "prune", "--kernel", "python:rms_off_by_scale")
    assert code == 0 and out.count("removed normprops-fixtures/rmsnorm/") == 2, out
    assert set(_fixture_docs(fixtures)) == {_bfloat16(fixtures)}
    code, out, _ = run("fixtures", "prune", "--kernel", "rms_typo")
    assert code == 5
    assert out == ("no fixture of kernel rms_typo under normprops-fixtures "
                   "(kernels there: python:rms_bf16_accumulate (rmskernels_fx:rms_bf16_accumulate))\n")


def test_fixtures_prune_removes_the_fixtures_a_kernel_passes(fixtures: Path) -> None:
    docs, bfloat16 = _fixture_docs(fixtures), _bfloat16(fixtures)
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_off_by_scale")
    assert code == 0 and "removed 0 of 3" in out and out.count("keep ") == 2, out
    assert set(_fixture_docs(fixtures)) == set(docs)
    # With --kernel too, only that kernel's fixtures are replayed: here the bfloat16 one.
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good_bf16",
                       "--dtype", "bfloat16", "--kernel", "rms_bf16_accumulate")
    assert code == 0, out
    assert set(_fixture_docs(fixtures)) == set(docs) - {bfloat16}
    # A function passing another kernel's fixtures removes none of them: each is that kernel's
    # finding (and, in a committed folder, a regression every kernel of the op must pass).
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good")
    assert code == 5, out
    assert out == ("no fixture of kernel python:rms_good under normprops-fixtures/rmsnorm (kernels there: "
                   f"python:rms_off_by_scale ({MODULE}:rms_off_by_scale)); to remove another kernel's "
                   "fixtures this function passes (one fixed under a new name), name it with --kernel "
                   "NAME\n")
    assert len(_fixture_docs(fixtures)) == 2
    # Named, the fixed kernel's fixtures go.
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good",
                       "--kernel", "rms_off_by_scale")
    assert code == 0, out
    assert out.splitlines()[-1] == "removed 2 of 2 fixtures under normprops-fixtures/rmsnorm."
    assert _fixture_docs(fixtures) == {}
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_good")
    assert code == 5 and out == "no fixture of kernel python:rms_good under normprops-fixtures/rmsnorm\n"


def test_fixtures_prune_keeps_what_a_stopped_replay_did_not_judge(fixtures: Path) -> None:
    docs = _fixture_docs(fixtures)
    code, out, _ = run("fixtures", "prune", "--op", "rmsnorm", "--impl", f"{MODULE}:rms_hangs",
                       "--kernel", "rms_off_by_scale", "--call-timeout", "0.3")
    assert code == 1, out
    assert ("the replay stopped (did not return within 0.3 s (call timeout; raise --call-timeout / "
            "call_timeout= for a slow first call)): 1 fixture not run, kept") in out
    assert set(_fixture_docs(fixtures)) == set(docs)


@pytest.mark.parametrize("argv, message", [
    ([], "say which fixtures to remove: --kernel NAME"),
    (["--impl", f"{MODULE}:rms_good"], "--impl needs --op"),
    (["--kernel", "rms_good", "--dtype", "bfloat16"], "--dtype describes the function of --impl"),
    (["--op", "rmsnorm", "--impl", f"{MODULE}:rms_good", "--all-dtypes", "--dtype", "float32"],
     "give one of them"),
])
def test_fixtures_prune_usage_errors(fixtures: Path, argv: list[str], message: str) -> None:
    code, out, err = run("fixtures", "prune", *argv)
    assert code == 2 and out == "" and err.startswith("normprops fixtures prune: error: ")
    assert message in err and len(err.splitlines()) == 1


SHARED_FX = USER_MODULE + textwrap.dedent('''
    def make():
        def kernel(x, gamma, eps):
            return rms_off_by_scale(x, gamma, eps)
        return kernel

    def timed(f):  # a wrapper without functools.wraps: every function it wraps is timed.<locals>.wrapper
        def wrapper(x, gamma, eps):
            return f(x, gamma, eps)
        return wrapper

    class Kernel:
        def __call__(self, x, gamma, eps):
            return rms_off_by_scale(x, gamma, eps)
''')

TWO_MODULES = {
    "def": USER_MODULE.replace("def rms_off_by_scale(", "def rms_norm("),
    "factory": "from shared_fx import make\nrms_norm = make()\n",
    "wrapper": "from shared_fx import rms_off_by_scale, timed\n\n@timed\ndef rms_norm(x, gamma, eps):\n"
               "    return rms_off_by_scale(x, gamma, eps)\n",
    "instance": "from shared_fx import Kernel\nrms_norm = Kernel()\n",
}


@pytest.mark.parametrize("kind", TWO_MODULES)
def test_kernels_of_one_name_in_two_modules_keep_their_fixtures_apart(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two modules each define `rms_norm`, the same bug: each hunt writes its own fixture (the
    same input would otherwise be one file, kept by whichever came first), a bare `--kernel
    rms_norm` is refused as naming both, and `--kernel MODULE:FUNC` prunes one module's only. So
    too where the function's own name cannot tell them apart: made by one factory, wrapped by one
    decorator without functools.wraps, a callable instance."""
    (tmp_path / "shared_fx.py").write_text(SHARED_FX)
    a, b = f"kernels_a_{kind}", f"kernels_b_{kind}"
    for module in (a, b):
        (tmp_path / f"{module}.py").write_text(TWO_MODULES[kind])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in (a, b):
        code, out, _ = run("hunt", "--op", "rmsnorm", "--impl", f"{module}:rms_norm", "--families",
                           "ordinary", "--max-examples", "50", "--seed", "0")
        assert code == 1, out
    docs = _fixture_docs(tmp_path / "normprops-fixtures")
    by_source: dict[str, set[str]] = {}
    for name, doc in docs.items():
        by_source.setdefault(doc["source"], set()).add(doc["property"])
    assert set(by_source) == {f"{a}:rms_norm", f"{b}:rms_norm"}
    assert by_source[f"{a}:rms_norm"] == by_source[f"{b}:rms_norm"]
    code, out, err = run("fixtures", "prune", "--kernel", "rms_norm")
    assert code == 2 and f"{a}:rms_norm, {b}:rms_norm" in err, err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = run("fixtures", "prune", "--kernel", f"{b}:rms_norm")
    assert code == 0, out
    left = _fixture_docs(tmp_path / "normprops-fixtures")
    assert {doc["source"] for doc in left.values()} == {f"{a}:rms_norm"} and len(left) == len(docs) // 2


def test_where_a_function_is_defined_is_named_only_when_the_name_leads_back_to_it() -> None:
    import functools

    from normprops.launch import defined_at

    def wraps(f):
        @functools.wraps(f)
        def wrapper(*args):
            return f(*args)
        return wrapper

    class Kernel:
        def __call__(self, x):
            return x

        def method(self, x):
            return x

    assert defined_at(textwrap.dedent) == "textwrap:dedent"
    assert defined_at(functools.reduce) == "_functools:reduce"
    assert defined_at(wraps(textwrap.dedent)) is None  # its name leads to the unwrapped function
    for unnamed in (lambda x: x, functools.partial(textwrap.dedent), Kernel(), Kernel().method,
                    wraps, _fixture_docs.__get__(1)):
        assert defined_at(unnamed) is None, unnamed
    assert defined_at(_fixture_docs) == f"{__name__}:_fixture_docs"


@pytest.mark.parametrize("a, b, same", [
    ("kernels:rms_norm", "kernels:rms_norm", True),
    ("tests.kernels:rms_norm", "kernels:rms_norm", True),  # one module imported by two names
    ("__main__:rms_norm", "kernels:rms_norm", False),  # no module stands for every other
    ("src/k.cu:rmsNorm", "k.cu:rmsNorm", True),
    ("fast.rms.cu:rmsNorm", "rms.cu:rmsNorm", False),  # a file's name is cut at folders only
    ("kernels_a:rms_norm", "kernels_b:rms_norm", False),
    ("tests.kernels:rms_norm", "ernels:rms_norm", False),  # a suffix only at a dot or a slash
    ("kernels:rms_norm", "kernels:Fused.rms_norm", False),
    ("rms_norm", "kernels:rms_norm", False),  # a bare name is matched by name, not as a source
    ("experiments/norms.py:rms_norm", "mylib.norms:rms_norm", False),  # a script is a file
    ("tools/run.py:rms_norm", "run.py:rms_norm", True),  # one script by either path
])
def test_one_kernel_is_one_source_by_any_name_it_is_imported_as(a: str, b: str, same: bool) -> None:
    from normprops.launch import same_source

    assert same_source(a, b) is same and same_source(b, a) is same


@pytest.mark.parametrize("kind", ["def", "factory"])
def test_a_kernel_re_exported_by_a_package_is_one_kernel_by_either_name(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package re-exports its kernel from a submodule (a def, or made by a factory): hunted as
    `pkg._impl:rms_norm`, then as `pkg:rms_norm`, then from Python, it is one kernel, recorded
    where it comes from; the same finding is one file, and `fixtures prune --kernel pkg:rms_norm`
    finds every one of its fixtures, whichever name hunted first, without importing anything."""
    pkg = f"pkg_{kind}"
    (tmp_path / "shared_fx.py").write_text(SHARED_FX)
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "_impl.py").write_text(TWO_MODULES[kind])
    (tmp_path / pkg / "__init__.py").write_text(f"from {pkg}._impl import rms_norm\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    fixtures = tmp_path / "normprops-fixtures"
    for impl, families, seed in ((f"{pkg}._impl:rms_norm", "ordinary", "0"),
                                 (f"{pkg}:rms_norm", "ordinary,large_mean", "1")):
        code, out, _ = run("hunt", "--op", "rmsnorm", "--impl", impl, "--families", families,
                           "--max-examples", "50", "--seed", seed)
        assert code == 1, out
    docs = _fixture_docs(fixtures)
    assert len(docs) > 2 and {doc["source"] for doc in docs.values()} == {f"{pkg}._impl:rms_norm"}
    import importlib

    report = normprops.hunt_kernel(importlib.import_module(pkg).rms_norm, op="rmsnorm",
                                   families=["ordinary"], max_examples=50, seed=0, fixtures_dir=fixtures)
    assert report.failures and set(_fixture_docs(fixtures)) == set(docs)
    code, out, _ = run("fixtures", "prune", "--kernel", f"{pkg}:rms_norm", "--dry-run")
    assert code == 0 and out.count("would remove ") == len(docs) + 1, out


@pytest.mark.parametrize("kind", TWO_MODULES)
def test_kernels_of_one_name_in_two_modules_hunted_from_python_keep_their_fixtures_apart(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As through the CLI: each module's kernel is known by the module that holds it, however it
    was made, so the same finding of both is two files."""
    import importlib

    (tmp_path / "shared_fx.py").write_text(SHARED_FX)
    modules = (f"api_a_{kind}", f"api_b_{kind}")
    for module in modules:
        (tmp_path / f"{module}.py").write_text(TWO_MODULES[kind])
    monkeypatch.syspath_prepend(str(tmp_path))
    fixtures = tmp_path / "fx"
    for module in modules:
        report = normprops.hunt_kernel(importlib.import_module(module).rms_norm, op="rmsnorm",
                                       families=["ordinary"], max_examples=50, seed=0, fixtures_dir=fixtures)
        assert report.failures
    sources = [doc["source"] for doc in _fixture_docs(fixtures).values()]
    assert sorted(set(sources)) == [f"{m}:rms_norm" for m in modules]
    assert sources.count(f"{modules[0]}:rms_norm") == sources.count(f"{modules[1]}:rms_norm")


def test_a_script_s_kernel_is_known_by_the_script_s_name(tmp_path: Path) -> None:
    """A kernel hunted from a script run as `python sa.py` lives in `sa`, not in `__main__`, which
    every script is: two scripts' kernels of one name keep their fixtures apart."""
    import subprocess
    import sys

    for script in ("script_a", "script_b"):
        (tmp_path / f"{script}.py").write_text(SHARED_FX + textwrap.dedent('''
            import normprops

            def rms_norm(x, gamma, eps):
                return rms_off_by_scale(x, gamma, eps)

            if __name__ == "__main__":
                normprops.hunt_kernel(rms_norm, op="rmsnorm", families=["ordinary"], max_examples=50,
                                      seed=0, fixtures_dir="fx")
        '''))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run([sys.executable, f"{script}.py"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
    sources = {doc["source"] for doc in _fixture_docs(tmp_path / "fx").values()}
    assert sources == {"script_a.py:rms_norm", "script_b.py:rms_norm"}


def test_a_script_s_loop_variable_names_no_kernel(tmp_path: Path) -> None:
    """A script that hunts a module's kernels in a loop holds each in turn under one variable:
    the kernels are known by the module that holds them (here each a functools.wraps wrapper,
    whose own name leads to the function it wraps), not by the variable."""
    import subprocess
    import sys

    (tmp_path / "loop_kernels.py").write_text(SHARED_FX + textwrap.dedent('''
        import functools

        def jit(f):
            @functools.wraps(f)
            def wrapper(x, gamma, eps):
                return f(x, gamma, eps)
            return wrapper

        def rms_a(x, gamma, eps):
            return rms_off_by_scale(x, gamma, eps)

        def rms_b(x, gamma, eps):
            return rms_off_by_scale(x, gamma, eps)

        fast_a, fast_b = jit(rms_a), jit(rms_b)
    '''))
    (tmp_path / "bench.py").write_text(textwrap.dedent('''
        import loop_kernels
        import normprops

        for k in (loop_kernels.fast_a, loop_kernels.fast_b):
            normprops.hunt_kernel(k, op="rmsnorm", families=["ordinary"], max_examples=50, seed=0,
                                  fixtures_dir="fx")
    '''))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "bench.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    docs = _fixture_docs(tmp_path / "fx").values()
    assert {(doc["impl"], doc["source"]) for doc in docs} == {("fast_a", "loop_kernels:fast_a"),
                                                              ("fast_b", "loop_kernels:fast_b")}


def test_kernels_python_cannot_name_by_a_module_are_told_apart_where_they_can_be(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bound methods of two objects a module holds are two kernels; a lazily loaded module is
    not loaded by the search for a kernel's module."""
    import importlib
    import importlib.util
    import sys

    from normprops.launch import kernel_source

    (tmp_path / "held_objs.py").write_text(SHARED_FX + textwrap.dedent('''
        class Scaled:
            def rms_norm(self, x, gamma, eps):
                return rms_off_by_scale(x, gamma, eps)

        o1, o2 = Scaled(), Scaled()
        made = make()
    '''))
    (tmp_path / "never_loaded.py").write_text("raise RuntimeError('a lazy module was loaded')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    held = importlib.import_module("held_objs")
    spec = importlib.util.find_spec("never_loaded")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    lazy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "never_loaded", lazy)
    spec.loader.exec_module(lazy)
    assert kernel_source(held.o1.rms_norm) == "held_objs:o1.rms_norm"
    assert kernel_source(held.o2.rms_norm) == "held_objs:o2.rms_norm"
    assert kernel_source(held.made) == "held_objs:made"


def test_a_package_s_name_never_finds_a_cuda_source(fixtures: Path) -> None:
    name, doc = next(iter(_fixture_docs(fixtures).items()))
    (fixtures / "rmsnorm" / name).write_text(json.dumps({**doc, "source": "norms.cu:rms_norm"}))
    code, out, _ = run("fixtures", "prune", "--kernel", "norms:rms_norm", "--dry-run")
    assert code == 5 and "would remove" not in out, out


def test_a_loss_gradients_fixture_of_another_reduction_is_left_out_in_one_line(tmp_path: Path) -> None:
    # The committed bfloat16 gradients of QuACK's loss: one per row, one of the mean (its dloss one
    # number). A per-row kernel is handed the per-row one only; the mean's is counted, not failed.
    committed = Path(__file__).parent / "regressions" / "cross_entropy_backward"
    (tmp_path / "cross_entropy_backward").mkdir()
    for name in ("vocab-f4b4f26bbd07.json", "vocab-5a17ab85432d.json"):
        shutil.copy(committed / name, tmp_path / "cross_entropy_backward" / name)
    code, out, _ = run("replay", "--op", "cross_entropy_backward", "--impl",
                       "normprops.examples.cross_entropy_kernels:ce_backward", "--dtype", "bfloat16",
                       "--fixtures-dir", str(tmp_path))
    assert code == 0, out
    assert ("1 fixture of another loss reduction skipped: its dloss is for a mean loss; "
            "--loss-reduction mean replays it on a kernel that reduces so") in out
    assert "pass vocab-f4b4f26bbd07.json" in out and "vocab-5a17ab85432d" not in out
    assert out.splitlines()[-1] == "2 fixtures: 1 passed, 0 failed, 1 skipped."
