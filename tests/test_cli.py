"""The CLI contract: exit codes 0 / 1 / 2, the --json report, fixtures, replay, kernels."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cli_harness import run

from normprops.errors import UsageError, a_or_an
from normprops.launch import target_from_callable
from normprops.strategies import families_for

USER_MODULE_NAME = "userkernels_cli"  # written by the user_module fixture (conftest.py)
USER_MODULE = textwrap.dedent('''
    import numpy as np

    def softmax_good(x):
        z = x.astype(np.float64)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_bad(x):
        with np.errstate(all="ignore"):
            e = np.exp(x)
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax_float64_out(x):
        return softmax_good(x).astype(np.float64)

    def softmax_raises(x):
        raise RuntimeError("kernel launch failed")

    def softmax_exits(x):
        import sys
        sys.exit(3)  # 3 is also replay's status for unreadable fixtures: it must not leak out

    def softmax_hangs(x):
        while True:
            try:
                pass
            except Exception:  # a kernel author's catch-all must not swallow the timeout
                pass

    def rmsnorm_good(x, gamma, eps):
        z = x.astype(np.float64)
        return (z / np.sqrt(np.mean(z * z, axis=1, keepdims=True) + eps) * gamma).astype(np.float32)

    NOT_CALLABLE = 3
''')



def test_clean_impl_exits_0_with_empty_failures(user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good",
                       "--families", "ordinary,overflow_logits", "--max-examples", "20",
                       "--seed", "0", "--json", str(report))
    assert code == 0, out
    doc = json.loads(report.read_text())
    assert doc["failures"] == [] and [r["family"] for r in doc["results"]] == ["ordinary", "overflow_logits"]
    assert "clean: 2 families" in out
    assert not (tmp_path / "tests").exists()  # nothing found, nothing written


def test_buggy_impl_exits_1_and_saves_a_fixture(user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
                       "--families", "overflow_logits", "--max-examples", "50", "--seed", "0",
                       "--json", str(report))
    assert code == 1
    (failure,) = json.loads(report.read_text())["failures"]
    assert failure["property"] == "finite" and failure["family"] == "overflow_logits"
    assert failure["label"] == "softmax[softmax_bad]"
    fixture = Path(failure["fixture"])
    assert fixture.parent == Path("normprops-fixtures/softmax") and fixture.exists()
    assert "non-finite output" in out and "x[0] = [" in out
    code, out, _ = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_bad")
    assert code == 1 and "FAIL" in out
    code, out, _ = run("replay", "--op", "softmax", "--impl", f"{user_module}:softmax_good")
    assert code == 0 and "the fixture passes" in out


@pytest.mark.parametrize("func, last", [
    pytest.param("softmax_good", "clean as far as it got: 0 of 3 families hunted to the end, overflow_logits "
                                 "cut short after ", id="clean"),
    pytest.param("softmax_bad", "1 of 1 families failed (", id="found"),
])
def test_a_time_budget_cuts_an_impl_hunt_short_and_says_how_far_it_got(
        user_module: str, tmp_path: Path, func: str, last: str) -> None:
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:{func}", "--families",
                       "overflow_logits,ordinary,ragged", "--max-examples", "100000", "--seed", "0",
                       "--no-fixtures", "--time-budget", "1", "--json", "r.json")
    assert code == (0 if func == "softmax_good" else 1), out
    lines = out.splitlines()
    family = next(line for line in lines if line.startswith("  overflow_logits"))
    assert family.split()[1] == ("stopped" if func == "softmax_good" else "FAIL"), family
    assert any(line.startswith("  cut short: the time budget of 1 s was spent after 1 of 3 families (")
               for line in lines), out
    assert lines[-1].startswith(last), lines[-1]
    if func == "softmax_bad":
        assert lines[-1].endswith("; cut short: 2 of 3 families not hunted."), lines[-1]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["cut_short"] is True and doc["complete"] is True
    assert doc["notes"] == ["cut short: the time budget of 1 s was spent; 2 of 3 families not hunted"]


def test_a_family_cut_short_before_its_first_example_has_no_worst_ratio(
        user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families",
                       "ordinary", "--seed", "0", "--no-fixtures", "--time-budget", "0.0001",
                       "--json", str(report))
    # A gate that judged nothing is not green: 5, as a replay with nothing to replay.
    assert code == 5, out
    family = next(line for line in out.splitlines() if line.startswith("  ordinary"))
    assert family.split()[1:4] == ["stopped", "0", "examples"], family
    assert "nothing judged" in family and "err/tol" not in family, family
    nothing = "nothing judged: the time budget of 0.0001 s was spent before the first example"
    assert out.splitlines()[-1] == f"{nothing}; give it more time.", out
    doc = json.loads(report.read_text())
    (result,) = doc["results"]
    assert result["examples"] == 0 and result["max_ratio"] is None, result
    assert doc["cut_short"] is True and nothing in doc["notes"]


def test_example_counts_say_that_a_failing_family_counts_its_shrinking(user_module: str) -> None:
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad", "--families",
                       "ordinary,overflow_logits", "--max-examples", "20", "--seed", "0", "--no-fixtures")
    assert code == 1, out
    lines = out.splitlines()
    assert "20 examples each (more where a family fails: its shrinking, and a round per further " \
           "property)" in lines[0], lines[0]
    clean = next(line for line in lines if line.startswith("  ordinary"))
    failed = next(line for line in lines if line.startswith("  overflow_logits"))
    assert " 20 examples  worst err/tol " in clean, clean
    assert "examples (incl. shrinking)  worst err/tol inf" in failed, failed


def test_no_fixtures_flag(user_module: str, tmp_path: Path) -> None:
    """The same failing hunt writes its fixture into the default folder (the working directory's
    normprops-fixtures/) without the flag, and nothing anywhere with it."""
    hunt = ("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_bad",
            "--families", "overflow_logits", "--max-examples", "20", "--seed", "0")
    before = set(tmp_path.rglob("*"))
    code, _, _ = run(*hunt, "--no-fixtures")
    assert code == 1
    assert {p for p in set(tmp_path.rglob("*")) - before if "__pycache__" not in p.parts} == set()
    code, _, _ = run(*hunt)
    assert code == 1 and list((tmp_path / "normprops-fixtures").rglob("overflow_logits-*.json"))


@pytest.mark.parametrize("func, reason", [
    ("softmax_float64_out", "dtype float64, shape (2, 1), device cpu; expected a numpy float32 array"),
    ("softmax_raises", "raised RuntimeError: kernel launch failed"),
    ("softmax_exits", "called sys.exit(3) at "),
])
def test_broken_impls_are_findings_not_crashes(user_module: str, func: str, reason: str) -> None:
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:{func}",
                       "--families", "ordinary", "--max-examples", "5", "--no-fixtures")
    assert code == 1 and "contract" in out and reason in out


def test_a_kernel_that_calls_sys_exit_is_a_finding_and_the_report_is_written(user_module: str,
                                                                             tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_exits",
                       "--max-examples", "5", "--no-fixtures", "--json", str(report))
    assert code == 1 and "no counterexample" not in out
    doc = json.loads(report.read_text())
    assert doc["complete"] is True and doc["failures"]
    assert all(f["property"] == "contract" and f["reason"].startswith("called sys.exit(3) at ")
               and "userkernels_cli.py" in f["reason"] for f in doc["failures"])
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    code, _, err = run("hunt", "--op", "softmax", "--impl", "exits_on_import:f")
    assert code == 2 and err.count("\n") == 1
    assert "cannot import module 'exits_on_import'" in err
    assert "it called sys.exit(3) while being imported" in err
    (tmp_path / "lazy_attrs.py").write_text("def __getattr__(name):\n    raise ImportError('lazy ' + name)\n")
    code, _, err = run("hunt", "--op", "softmax", "--impl", "lazy_attrs:softmax")
    assert code == 2 and err.count("\n") == 1
    assert "cannot get 'softmax' from module 'lazy_attrs' for --impl lazy_attrs:softmax: ImportError" in err


@pytest.mark.parametrize("argv, message", [
    (["hunt", "--impl", "m:f"], "--impl needs --op"),
    (["hunt", "--op", "softmax", "--impl", "nodots"], "--impl must look like MODULE:FUNC"),
    (["hunt", "--op", "softmax", "--impl", "no_such_module_xyz:f"],
     "cannot import module 'no_such_module_xyz'"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:missing"], "has no attribute 'missing'"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:NOT_CALLABLE"], "names an int, not a function"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--families", "eps_scale"],
     "--families: 'eps_scale' not a family of softmax; choose from ordinary,"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--families", "ordnary"],
     "--families: 'ordnary' not a family of softmax (did you mean 'ordinary'?); choose from"),
    (["hunt", "--backend", "numpy", "--families", "ordinary,tal"],
     "--families: 'tal' not a family (did you mean 'tall'?); choose from ordinary,"),
    (["hunt", "--backend", "tpu"], "--backend tpu: not usable here"),
    (["hunt", "--backend", "numpy", "--kernel", "noSuchKernel"],
     "--kernel noSuchKernel: no numpy kernel of that name"),  # numpy: the default backend only without a GPU
    (["hunt", "--backend", "numpy", "--kernel", "jax.attention-cudnn-bf16"],
     "--kernel jax.attention-cudnn-bf16: no numpy kernel of that name; it is registered under --backend jax"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--backend", "cuda"],
     "--backend picks registry kernels and does not go with --impl"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--min-cols", "20000",
      "--max-cols", "30000"], "family 'ragged' draws edge column counts only, and none lies in "
                              "[20000, 30000]: widen --min-cols or --max-cols, or leave ragged out"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--check", "exact_constant"],
     "--check exact_constant (opt_in=) applies to layernorm and rmsnorm only; op softmax"),
    (["hunt", "--op", "rmsnorm", "--impl", "userkernels_cli:rmsnorm_good", "--ignore", "sum_to_one,argmax"],
     "--ignore (ignore=) argmax,sum_to_one: op rmsnorm is never judged on them"),
    (["hunt", "--op", "rmsnorm", "--impl", "userkernels_cli:rmsnorm_good", "--ignore", "shift_invariance"],
     "op rmsnorm is never judged on it; its properties: contract,"),
    (["hunt", "--backend", "numpy,nosuch"], "--backend: unknown backend nosuch; known: numpy,"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--min-cols", "1000000000"],
     "--min-cols must be at most 262145 (the widest rows long_rows draws) but was 1000000000"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli:softmax_good", "--cols-multiple-of", "300000"],
     "--cols-multiple-of must be at most 262145"),
    (["hunt", "--op", "softmax", "--impl", "userkernels_cli.py:softmax_good"],
     "--impl userkernels_cli.py:softmax_good: MODULE is a module's name, not a file's path; write "
     "--impl userkernels_cli:softmax_good and run from this directory"),
    (["hunt", "--op", "softmax", "--impl", "kernels/userkernels_cli.py:softmax_good"],
     "write --impl userkernels_cli:softmax_good and run from kernels or add it to PYTHONPATH"),
    (["hunt", "--op", "softmax", "--cuda-source", "no_such_file.cu", "--kernel", "k"],
     "--cuda-source no_such_file.cu: no such file; give the .cu file that defines k"),
])
def test_usage_errors_exit_2_naming_the_problem(user_module: str, argv: list[str], message: str) -> None:
    code, out, err = run(*argv)
    assert code == 2
    assert message in err


@pytest.mark.parametrize("word, phrase", [
    ("int", "an int"), ("object", "an object"), ("ellipsis", "an ellipsis"), ("float", "a float"),
    ("NoneType", "a NoneType"), ("uint8", "a uint8"), ("ufunc", "a ufunc"), ("undefined", "an undefined"),
])
def test_a_type_name_gets_the_article_it_sounds_like(word: str, phrase: str) -> None:
    assert a_or_an(word) == phrase


def test_a_function_that_is_not_callable_is_named_with_its_article() -> None:
    with pytest.raises(UsageError, match="fn must be callable but was an int$"):
        target_from_callable(3, op="softmax")  # type: ignore[arg-type]


def test_a_softmax_may_decline_its_masked_rows(user_module: str) -> None:
    # A plain softmax meets rows of -inf only in the masked family: masked_rows is its property too.
    code, out, err = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--ignore",
                         "masked_rows", "--families", "masked", "--max-examples", "5", "--seed", "0",
                         "--no-fixtures")
    assert code == 0 and err == "", out + err
    assert "not judged: masked_rows" in out, out


def test_argparse_errors_exit_2() -> None:
    assert run("hunt", "--max-examples", "0")[0] == 2
    assert run("hunt", "--op", "gelu")[0] == 2
    assert run("frobnicate")[0] == 2
    code, _, err = run("fixtures")
    assert code == 2 and "required: {list,prune}" in err, err


@pytest.mark.parametrize("argv, prefix", [
    (["replay", "fixtures"], "normprops replay: error: "),
    (["bench", "--rounds", "x"], "normprops bench: error: "),
    (["report", "merge"], "normprops report merge: error: "),
    (["frobnicate"], "normprops: error: "),
    (["hunt", "--bogus"],
     "normprops hunt: error: unrecognized arguments: --bogus (see normprops hunt --help)"),
    (["fixtures", "list", "--bogus"], "normprops fixtures list: error: unrecognized arguments: --bogus"),
    (["report", "merge", "a.json", "--bogus"], "normprops report merge: error: unrecognized arguments"),
    (["kernels", "--backend", "numpy"], "normprops kernels: error: unrecognized arguments: --backend numpy"),
    (["--bogus", "hunt"], "normprops: error: unrecognized arguments: --bogus (see normprops --help)"),
])
def test_argparse_errors_name_the_command_they_are_about(argv: list[str], prefix: str) -> None:
    code, _, err = run(*argv)
    assert code == 2 and err.startswith(prefix) and err.count("\n") == 1


def test_kernels_lists_registry_and_backends() -> None:
    code, out, _ = run("kernels", "--wide")
    assert code == 0
    assert "backend numpy: available" in out
    assert "layerNormRowOnePass" in out and "BUG in large_mean" in out
    # One column per field, however long an op's name (masked_softmax).
    lines = out.splitlines()
    column = next(line for line in lines if line.startswith("kernel ")).index(" backend ") + 1
    rows = [line for line in lines if " torch-cpu " in line]
    assert len(rows) > 3 and all(line[column:].startswith("torch-cpu ") for line in rows), rows


def _kernels_table(monkeypatch: pytest.MonkeyPatch, *argv: str) -> list[str]:
    """``normprops kernels ARGV`` in a 100-column terminal: the lines after the backends."""
    monkeypatch.setenv("COLUMNS", "100")
    code, out, _ = run("kernels", *argv)
    assert code == 0, out
    return out.split("\n\n", 1)[1].splitlines()


def test_kernels_table_fits_100_columns_with_two_spaces_between_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from normprops.cli.kernels import SHORT_DTYPES
    from normprops.specs import KERNELS

    lines = _kernels_table(monkeypatch)
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    header = lines[0]
    assert header.split() == ["kernel", "op", "backend", "dtype", "claims", "bugs"]
    rows = lines[1:1 + len(KERNELS)]
    for line, k in zip(rows, KERNELS):
        claimed = sum(f in k.claims for f in families_for(k.op))
        # Two spaces or more between cells: split there, the row gives back each cell whole.
        assert re.split(r" {2,}", line) == [k.name, k.op, k.backend, SHORT_DTYPES[k.dtype],
                                            f"{claimed}/{len(families_for(k.op))}", str(len(k.bugs))], line
    quack = [line for line in rows if line.startswith("quack.softmax-f32 ")]
    assert quack and "BUG" not in quack[0]


def test_kernels_wide_lists_every_claim_and_bug_wrapped_to_the_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from normprops.specs import KERNELS

    lines = _kernels_table(monkeypatch, "--wide")
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert lines[0].split() == ["kernel", "op", "backend", "dtype", "arrays", "T"]
    text = " ".join(line.strip() for line in lines)
    spec = next(k for k in KERNELS if k.name == "quack.softmax-f32")
    for bug in spec.bugs:
        assert f"BUG in {bug.family}: {bug.summary}" in text, bug.summary
    row = lines.index(next(line for line in lines if line.startswith("quack.softmax-f32 ")))
    assert lines[row + 1].startswith("    claims: ordinary, overflow_logits")


def test_registry_hunt_prints_the_matrix(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--op", "layernorm", "--families", "ordinary,large_mean",
                         "--max-examples", "60", "--seed", "0", "--no-fixtures", "--json", str(report))
    assert code == 0, out
    assert "layerNormRowOnePass" in out and "caught" in out
    assert "every kernel behaved as its registry entry declares" in out
    assert "[1/6]" in err  # progress
    doc = json.loads(report.read_text())
    assert doc["not_as_declared"] == []
    # Only the one-pass kernel fails: its known bug (and maybe 'ordinary', which it does not claim).
    assert {f["label"] for f in doc["failures"]} == {"layernorm[layerNormRowOnePass]"}
    outcomes = {(f["family"], f["expected"]) for f in doc["failures"]}
    assert ("large_mean", "bug") in outcomes
    assert outcomes <= {("large_mean", "bug"), ("ordinary", "unclaimed")}


def test_python_dash_m_runs_the_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "normprops", "kernels"], capture_output=True, text=True)
    assert proc.returncode == 0 and "rmsNormRow" in proc.stdout


def test_registry_hunt_of_one_kernel() -> None:
    code, out, _ = run("hunt", "--kernel", "layerNormRowOnePass", "--families", "large_mean",
                       "--max-examples", "100", "--seed", "0", "--no-fixtures")
    assert code == 0 and "caught" in out and "layerNormRowTwoPass" not in out


def test_hanging_impl_is_stopped_and_reported(user_module: str, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_hangs",
                       "--call-timeout", "0.5", "--max-examples", "5", "--no-fixtures",
                       "--json", str(report))
    assert code == 1
    assert "did not return within 0.5 s" in out and "stopped" in out
    (line,) = [x for x in out.splitlines() if x.startswith(f"  {families_for('softmax')[0]} ")]
    assert " 1 example (incl. shrinking)  worst" in line, line  # one space after "example"
    doc = json.loads(report.read_text())
    (failure,) = doc["failures"]
    assert failure["property"] == "contract"
    # The other families were never hunted: the report says it is not whole, and which.
    assert doc["complete"] is False and "hunt stopped" in doc["error"]
    assert doc["not_reached"] == doc["families"][1:]
    assert f"1 of 1 families failed (1 finding); stopped: {len(doc['families']) - 1} of" in out


def test_a_reader_that_leaves_early_ends_nothing_in_a_traceback() -> None:
    """``normprops kernels | head -1``: the reader closes the pipe after one line; the command
    ends quietly with its own status, no BrokenPipeError and no "internal error"."""
    proc = subprocess.Popen([sys.executable, "-m", "normprops", "kernels"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()  # the reader leaves
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "internal error" not in err


def test_a_registry_hunt_does_not_print_a_replay_command_it_cannot_give(tmp_path: Path) -> None:
    code, out, _ = run("hunt", "--kernel", "layerNormRowOnePass", "--families", "large_mean",
                       "--max-examples", "100", "--seed", "0", "--fixtures-dir", str(tmp_path / "fx"))
    assert code == 0 and "caught" in out
    assert f"saved under {tmp_path / 'fx'}/" in out and "replay with" not in out


def test_a_family_named_twice_is_hunted_once(user_module: str) -> None:
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families",
                       "ordinary,ordinary", "--max-examples", "5", "--seed", "0", "--no-fixtures")
    assert code == 0 and "1 family, no counterexample" in out
    assert sum(line.startswith("  ordinary") for line in out.splitlines()) == 1


def test_a_hunt_says_when_fixtures_it_would_try_first_cannot_be_read(user_module: str,
                                                                     tmp_path: Path) -> None:
    fixtures = tmp_path / "fx"
    (fixtures / "softmax").mkdir(parents=True)
    (fixtures / "softmax" / "ordinary-damaged.json").write_text("{")
    report = tmp_path / "r.json"
    code, out, _ = run("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families",
                       "ordinary", "--max-examples", "5", "--seed", "0", "--fixtures-dir", str(fixtures),
                       "--json", str(report))
    note = (f"1 fixture under {fixtures / 'softmax'} could not be read and is not tried first "
            f"(normprops fixtures list --fixtures-dir {fixtures} names them)")
    assert code == 0 and f"  {note}" in out.splitlines()
    assert note in json.loads(report.read_text())["notes"]


def test_a_hunt_without_a_seed_is_repeatable_where_hypothesis_derandomizes(user_module: str,
                                                                           request) -> None:
    # As Hypothesis derandomizes on a CI service (its ci profile, loaded by itself there): a gate
    # gives the same verdict on the same code.
    argv = ("hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families", "tiny",
            "--max-examples", "3", "--no-fixtures")
    request.getfixturevalue("ci_profile")
    seeds = {run(*argv)[1].splitlines()[0].rpartition("; seed ")[2] for _ in range(2)}
    assert seeds == {"0"}
    request.getfixturevalue("dev_profile")
    seeds = {run(*argv)[1].splitlines()[0].rpartition("; seed ")[2] for _ in range(3)}
    assert len(seeds) == 3 and "0" not in seeds

