"""The registry-hunt policy (:mod:`normprops.registry_hunt`), through the library and the CLI.

A stand-in entry on the numpy backend plays PyTorch's CUDA softmax: accurate, but batch-variant, so
its entry exempts batch invariance on its claims and records the batch variance as its known bug.
An exemption made for the claims must never hide the bug."""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from cli_harness import run

from normprops.case import ShapeConstraints
from normprops.cli import hunt as cli_hunt
from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.hunt import HuntConfig, hunt
from normprops.kernelspec import KernelSpec, KnownBug
from normprops.merge import RESUME_SETTINGS
from normprops.ops import get_op
from normprops.registry_hunt import as_declared, caught, plan_cells, registry_cell_text, registry_target
from normprops.specs import KERNELS
from normprops.strategies import families_for

STANDIN = textwrap.dedent('''
    import numpy as np

    def softmax_batch_variant(x):
        """Accurate, but the row sum runs in another order when the batch has an odd number of rows."""
        e = np.exp(x - x.max(axis=1, keepdims=True))
        s = e.sum(axis=1, keepdims=True) if len(x) % 2 else e[:, ::-1].sum(axis=1, keepdims=True)
        return (e / s).astype(np.float32)
''')

CLAIMS = frozenset({"ordinary", "ragged", "constant"})


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KernelSpec:
    (tmp_path / "standin_kernels.py").write_text(STANDIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    spec = KernelSpec(
        "standin.softmax", "softmax", "numpy", "standin_kernels:softmax_batch_variant", 2,
        FOREIGN_ERROR_MODEL, CLAIMS, "a batch-variant softmax", exempt=frozenset({"batch_invariance"}),
        bugs=(KnownBug("ragged", "batch-variant: a row's bits depend on the batch size",
                       property="batch_invariance"),),
        constraints=ShapeConstraints(cols_multiple_of=2), bug_widths=ShapeConstraints())
    monkeypatch.setattr(cli_hunt, "KERNELS", (*KERNELS, spec))
    return spec



def test_a_claim_keeps_its_exemptions_and_widths(standin: KernelSpec) -> None:
    target = registry_target(standin, "ordinary")
    assert target.ignore == {"batch_invariance"}
    assert target.constraints == ShapeConstraints(cols_multiple_of=2)


def test_a_known_bug_is_hunted_on_its_own_property_and_widths(standin: KernelSpec) -> None:
    target = registry_target(standin, "ragged")
    assert "batch_invariance" not in target.ignore
    assert target.constraints == ShapeConstraints()


def test_a_bug_exempted_on_the_claims_is_still_caught_through_the_cli(
        standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "standin.softmax",
                         "--families", "ordinary,ragged", "--seed", "0", "--max-examples", "60",
                         "--no-fixtures", "--json", str(tmp_path / "r.json"))
    assert code == 0, out
    assert "every kernel behaved as its registry entry declares" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("standin.softmax"))
    assert row.split()[1:] == ["pass", "caught"]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["not_as_declared"] == []
    ragged = next(r for r in doc["results"] if r["family"] == "ragged")
    assert "batch_invariance" in ragged["properties"]
    ordinary = next(r for r in doc["results"] if r["family"] == "ordinary")
    assert ordinary["passed"], "the claim is judged with its exemption"


def test_a_bug_caught_on_another_property_is_not_caught(standin: KernelSpec) -> None:
    """A bug cell that failed something else reads MISSED(...) and is a surprise."""
    tight = replace(FOREIGN_ERROR_MODEL, threads=10**6, c_x=0.0, rho=0.0)
    target = registry_target(standin, "ragged").declared(ignore=frozenset({"batch_invariance"}),
                                                         error_model=tight)
    result = hunt(target, family="ragged", config=HuntConfig(max_examples=30, seed=0))
    if result.passed:  # the tightened model found nothing else to fail: make the point directly
        pytest.skip("the stand-in passed every judged property")
    assert not caught(standin, result)
    assert not as_declared(standin, result)
    assert registry_cell_text(standin, result).startswith("MISSED(")


def test_the_plan_is_fixed_and_shards_partition_it(standin: KernelSpec) -> None:
    cells = plan_cells([standin], families=("ordinary", "ragged", "constant", "huge"))
    assert [f for _, f in cells] == ["ordinary", "huge", "constant", "ragged"]
    shards = [plan_cells([standin], families=("ordinary", "ragged", "constant", "huge"), shard=(k, 3))
              for k in (1, 2, 3)]
    assert sorted(f for shard in shards for _, f in shard) == sorted(f for _, f in cells)


def test_without_families_each_entry_is_hunted_in_its_first_hunt_families(standin: KernelSpec) -> None:
    narrowed = replace(standin, name="narrowed", default_families=frozenset({"ragged", "ordinary"}))
    planned = plan_cells([standin, narrowed], families=None)
    assert [f for s, f in planned if s is standin] == list(families_for("softmax"))
    assert [f for s, f in planned if s is narrowed] == ["ordinary", "ragged"]
    named = plan_cells([standin, narrowed], families=("huge", "ragged"))
    assert [(s.name, f) for s, f in named] == [("standin.softmax", "huge"), ("standin.softmax", "ragged"),
                                              ("narrowed", "huge"), ("narrowed", "ragged")]


def test_every_entrys_first_hunt_families_are_families_of_its_op() -> None:
    named = [k for k in KERNELS if k.default_families is not None]
    assert named, "some entries name fewer families for a first hunt"
    for spec in named:
        assert spec.default_families and spec.default_families <= set(families_for(spec.op)), spec.label


def test_families_all_hunts_the_families_a_first_hunt_leaves_out(tmp_path: Path) -> None:
    spec = next(k for k in KERNELS if k.backend == "numpy" and k.default_families is not None
                and len(families_for(k.op)) > len(k.default_families))
    argv = ("hunt", "--backend", "numpy", "--kernel", spec.name, "--max-examples", "3", "--seed", "0",
            "--no-fixtures")
    code, out, err = run(*argv, "--json", str(tmp_path / "first.json"))
    assert code == 0, out
    first = [r["family"] for r in json.loads((tmp_path / "first.json").read_text())["results"]]
    assert first == [f for f in families_for(spec.op) if f in spec.default_families]
    code, out, err = run(*argv, "--families", "all", "--json", str(tmp_path / "all.json"))
    assert code in (0, 1), out  # an unclaimed family may fail: information, not a verdict here
    every = [r["family"] for r in json.loads((tmp_path / "all.json").read_text())["results"]]
    assert sorted(every) == sorted(families_for(spec.op))


def test_a_time_budget_cuts_a_registry_hunt_short_and_says_so(standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "standin.softmax", "--seed", "0",
                         "--max-examples", "100000", "--no-fixtures", "--time-budget", "1.5",
                         "--families", "ordinary,constant", "--json", str(tmp_path / "r.json"))
    assert code == 0, out
    assert "cut short: the time budget of 1.5 s was spent" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["cut_short"] is True and doc["complete"] is True
    assert doc["results"] and doc["results"][0]["cut_short"] is True
    assert 0 < doc["results"][0]["examples"] < 100000


RESUMED = ("hunt", "--backend", "numpy", "--kernel", "standin.softmax", "--seed", "0", "--max-examples",
           "30", "--no-fixtures", "--families", "ordinary,ragged,constant")


def _cut(report: Path, into: Path, *, keep: int) -> dict:
    """``report`` as a run cut short after ``keep`` cells would have written it: the next cell cut
    short part way, the rest not reached."""
    doc = json.loads(report.read_text())
    doc["results"] = doc["results"][:keep + 1]
    doc["results"][keep].update(cut_short=True, examples=3)
    doc["cut_short"] = True
    into.write_text(json.dumps(doc))
    return doc


def _outcomes(doc: dict) -> list[tuple]:
    return [(r["family"], r["passed"], r["properties"], r["examples"], r["max_ratio"])
            for r in doc["results"]]


def test_a_resumed_hunt_takes_over_the_finished_cells_and_hunts_the_rest(
        standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    assert code == 0, out
    whole = json.loads((tmp_path / "whole.json").read_text())
    assert [r["family"] for r in whole["results"]] == ["ordinary", "constant", "ragged"]
    _cut(tmp_path / "whole.json", tmp_path / "part.json", keep=1)
    # --json may name the report it resumes: a CI job's one artifact, carried from job to job
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "part.json"),
                         "--json", str(tmp_path / "part.json"))
    assert code == 0, out
    assert "resumed from" in out and "1 cell carried over as it found them" in out
    assert "[2/3] standin.softmax x constant" in err and "ordinary:" not in err
    assert "every kernel behaved as its registry entry declares" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("standin.softmax"))
    assert row.split()[1:] == ["pass", "pass", "caught"], "the carried cell in its place in the matrix"
    resumed = json.loads((tmp_path / "part.json").read_text())
    assert resumed["cut_short"] is False and resumed["complete"] is True
    assert resumed["resumed_from"] == str(tmp_path / "part.json")
    assert _outcomes(resumed) == _outcomes(whole)
    assert len(resumed["failures"]) == len(whole["failures"]) == 1  # the known bug's, hunted again
    assert [t["label"] for t in resumed["targets"]] == [t["label"] for t in whole["targets"]]


def test_a_carried_cell_not_as_declared_still_fails_the_resumed_hunt(
        standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    assert code == 0, out
    doc = _cut(tmp_path / "whole.json", tmp_path / "part.json", keep=1)
    doc["results"][0].update(passed=False, properties=["accuracy"], as_declared=False)
    (tmp_path / "part.json").write_text(json.dumps(doc))
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "part.json"),
                         "--json", str(tmp_path / "r.json"))
    assert code == 1, out
    assert "not as declared: softmax[standin.softmax] x ordinary (claimed; carried over" in out
    assert "1 hunt(s) not as declared." in out
    assert json.loads((tmp_path / "r.json").read_text())["not_as_declared"] == [
        "softmax[standin.softmax] x ordinary"]


def test_a_hunt_killed_outright_leaves_its_finished_cells_to_resume(
        standin: KernelSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The report is rewritten after every cell, so a hunt that never reaches its end (SIGKILL, a
    runner's hard timeout) leaves what it finished: marked unfinished, resumable to the same result."""
    from normprops.report import Report

    written: list[dict] = []
    write = Report.write

    def keep(self: Report, path: Path | None) -> None:
        write(self, path)
        written.append(json.loads(Path(path).read_text()))

    monkeypatch.setattr(Report, "write", keep)
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    assert code == 0, out
    whole, last = written[-1], written[-2]
    assert whole["complete"] is True and whole["error"] is None and "not_reached" not in whole
    # one before the first cell, one after each, and the last on the way out
    assert [len(doc["results"]) for doc in written] == [0, 1, 2, 3, 3]
    for n, doc in enumerate(written[:-1]):
        assert doc["complete"] is False and doc["error"].startswith(f"in progress: {n} of 3 cells hunted")
        assert len(doc["not_reached"]) == 3 - n
    assert _outcomes(last) == _outcomes(whole) and last["failures"] == whole["failures"]

    (tmp_path / "killed.json").write_text(json.dumps(written[1]))  # killed during the second cell
    monkeypatch.setattr(Report, "write", write)
    code, out, err = run("report", "merge", str(tmp_path / "killed.json"))
    assert code == 3 and "killed.json did not finish (in progress: 1 of 3 cells hunted" in out + err
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "killed.json"),
                         "--json", str(tmp_path / "killed.json"))
    assert code == 0 and "1 cell carried over" in out, out
    assert _outcomes(json.loads((tmp_path / "killed.json").read_text())) == _outcomes(whole)


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--seed", "1", "seed 0 there, 1 here"),
    ("--max-examples", "31", "max_examples 30 there, 31 here"),
    ("--families", "ordinary,ragged", "families ordinary,ragged,constant there, ordinary,ragged here"),
    ("--policy", "table", "policy default there, table here"),
])
def test_a_resume_of_another_hunt_is_refused_naming_what_differs(
        standin: KernelSpec, tmp_path: Path, flag: str, value: str, named: str) -> None:
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    assert code == 0, out
    argv = list(RESUMED)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    code, out, err = run(*argv, "--resume", str(tmp_path / "whole.json"))
    assert code == 2
    assert named in err and len(err.strip().splitlines()) == 1, err


def test_a_resume_needs_a_report_of_this_registry_hunt(standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "missing.json"))
    assert (code, err.strip()) == (2, f"normprops hunt: error: --resume {tmp_path / 'missing.json'}: "
                                      f"cannot be read (No such file or directory)")
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    doc = json.loads((tmp_path / "whole.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**doc, "normprops": "0.0.1"}))
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "old.json"))
    assert code == 2 and "written by normprops 0.0.1" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "impl.json").write_text(json.dumps({**doc, "impl": "standin_kernels:softmax_batch_variant"}))
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "impl.json"))
    assert code == 2 and "not the --json report of a registry hunt" in err
    code, out, err = run("hunt", "--op", "softmax", "--impl", "standin_kernels:softmax_batch_variant",
                         "--resume", str(tmp_path / "whole.json"))
    assert (code, err.strip()) == (2, "normprops hunt: error: --resume applies to registry hunts; "
                                      "--impl hunts start afresh")


def test_carried_findings_stay_with_their_backend(standin: KernelSpec, tmp_path: Path) -> None:
    """One kernel name hunted on two backends: each carried cell keeps its own backend's findings,
    and a finding that names no backend, which could be either's, keeps both cells from being
    carried (they are hunted again)."""
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    doc = json.loads((tmp_path / "whole.json").read_text())
    assert doc["failures"] and all(f["backend"] == "numpy" for f in doc["failures"])
    twin = replace(standin, backend="numpy2")
    doc["results"] += [{**r, "backend": "numpy2"} for r in doc["results"]]
    doc["failures"] += [{**f, "backend": "numpy2", "message": "the twin's"} for f in doc["failures"]]
    doc["targets"] += [{**t, "backend": "numpy2"} for t in doc["targets"]]
    (tmp_path / "two.json").write_text(json.dumps(doc))
    planned = plan_cells([standin, twin], families=("ordinary", "ragged", "constant"))
    settings = {k: doc[k] for k in RESUME_SETTINGS}
    earlier = cli_hunt._earlier_cells(tmp_path / "two.json", settings=settings, planned=planned)
    assert len(earlier.results) == 6
    assert sorted(f["backend"] for f in earlier.failures) == ["numpy", "numpy2"]
    assert sorted(t["backend"] for t in earlier.targets) == ["numpy", "numpy2"]
    for f in doc["failures"]:
        del f["backend"]  # as a report that does not name them
    (tmp_path / "two.json").write_text(json.dumps(doc))
    earlier = cli_hunt._earlier_cells(tmp_path / "two.json", settings=settings, planned=planned)
    assert sorted(earlier.results) == sorted((b, "standin.softmax", f) for b in ("numpy", "numpy2")
                                             for f in ("ordinary", "constant"))
    assert earlier.failures == []


@pytest.mark.parametrize("damage", [
    lambda doc: doc.update(information=None),
    lambda doc: doc["failures"][0].update(target=["x"]),
    lambda doc: doc["failures"].append(5),
])
def test_a_damaged_report_to_resume_is_one_line_and_exit_2(
        standin: KernelSpec, tmp_path: Path, damage) -> None:
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    doc = json.loads((tmp_path / "whole.json").read_text())
    damage(doc)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    code, out, err = run(*RESUMED, "--resume", str(tmp_path / "bad.json"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "bad.json" in err, err


def test_families_and_backends_resume_in_any_order(standin: KernelSpec, tmp_path: Path) -> None:
    code, out, err = run(*RESUMED, "--json", str(tmp_path / "whole.json"))
    argv = list(RESUMED)
    argv[argv.index("--families") + 1] = "constant,ordinary,ragged"
    code, out, err = run(*argv, "--resume", str(tmp_path / "whole.json"))
    assert code == 0 and "3 cells carried over" in out, err


@pytest.mark.parametrize("budget", ["0", "-3", "nan", "inf", "soon"])
def test_a_time_budget_must_be_a_positive_number_of_seconds(budget: str) -> None:
    code, out, err = run("hunt", "--op", "softmax", "--impl", "numpy:exp", f"--time-budget={budget}")
    assert code == 2
    assert "--time-budget" in err and len(err.strip().splitlines()) == 1


RARE_INPUT = """
import numpy as np

def softmax_wrong_on_one_row(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if x.shape[1] == 16383 and x[0, 0] == np.float32({first}):  # one input only
        y[:, 0] *= np.float32(1.01)
    return y
"""


def test_a_known_bugs_example_is_tried_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug that random draws meet only by luck is met at the first example when its entry names
    the finding that shows it (here the committed 2 x 16383 ragged row of PyTorch's softmax)."""
    from normprops.hunt import examples_to_catch
    from normprops.registry_hunt import known_example

    first = float(known_example("torch.softmax-ragged.json").x[0, 0])
    (tmp_path / "rare_kernels.py").write_text(RARE_INPUT.format(first=repr(first)))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = KernelSpec("rare.softmax", "softmax", "numpy", "rare_kernels:softmax_wrong_on_one_row", 2,
                      FOREIGN_ERROR_MODEL, frozenset(), "wrong on one input only",
                      bugs=(KnownBug("ragged", "wrong on one input", property="accuracy"),))
    config = HuntConfig(max_examples=100, seed=0)
    assert examples_to_catch(registry_target(spec, "ragged"), family="ragged", config=config,
                             property="accuracy") is None
    with_example = replace(spec, bugs=(replace(spec.bugs[0], example="torch.softmax-ragged.json"),))
    target = registry_target(with_example, "ragged")
    assert [c.x.shape for c in target.examples] == [(2, 16383)]
    assert examples_to_catch(target, family="ragged", config=config, property="accuracy") == 1
    result = hunt(target, family="ragged", config=config)
    assert caught(with_example, result) and result.minimal.cols == 16383


def test_every_known_example_is_a_finding_of_its_entry() -> None:
    """Each registry example loads, and is a case its entry's bug hunt can take: the bug's op,
    family and storage type, at a width the bug is hunted at."""
    from normprops.registry_hunt import known_example

    named = [(spec, bug) for spec in KERNELS for bug in spec.bugs if bug.example]
    assert named, "the registry names its known bugs' examples"
    for spec, bug in named:
        case = known_example(bug.example)
        assert (case.op, case.family, case.dtype) == (spec.op, bug.family, spec.dtype), bug.example
        # Row widths constrain a row op's bug hunts; a named-arrays op (attention) has none.
        assert get_op(spec.op).named is not None or spec.bug_constraints.allows(case.cols), bug.example


TWO_INPUTS = """
import numpy as np

def softmax_nan_on_two_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if x[0, 0] in (np.float32({a}), np.float32({b})):  # the two inputs only
        y[:] = np.nan
    return y
"""


def test_each_known_bug_gets_its_own_example_through_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bugs whose targets share exemptions and widths are still hunted apart, each with its
    own explicit example: both are caught."""
    from normprops.registry_hunt import known_example

    names = {"overflow_logits": "quack.softmax-f32-overflow_logits.json",
             "huge": "quack.softmax-f32-huge.json"}
    a, b = (float(known_example(n).x[0, 0]) for n in names.values())
    (tmp_path / "two_kernels.py").write_text(TWO_INPUTS.format(a=repr(a), b=repr(b)))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = KernelSpec("two.softmax", "softmax", "numpy", "two_kernels:softmax_nan_on_two_rows", 2,
                      FOREIGN_ERROR_MODEL, frozenset(), "NaN on two inputs",
                      bugs=tuple(KnownBug(f, "NaN", example=n) for f, n in names.items()))
    monkeypatch.setattr(cli_hunt, "KERNELS", (*KERNELS, spec))
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "two.softmax", "--families",
                         "overflow_logits,huge", "--seed", "0", "--max-examples", "20", "--no-fixtures")
    assert code == 0, out
    row = next(line for line in out.splitlines() if line.strip().startswith("two.softmax"))
    assert row.split()[1:] == ["caught", "caught"]


def test_a_bug_cell_cut_short_is_no_surprise(tmp_path: Path) -> None:
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "softmaxRowNaive", "--families",
                         "overflow_logits", "--time-budget", "0.0001", "--seed", "1", "--no-fixtures",
                         "--json", str(tmp_path / "r.json"))
    assert code == 5, out  # and judged nothing: no green
    assert "stopped" in out and "not as declared" not in out and "nothing judged" in out
    code, out, err = run("report", "merge", str(tmp_path / "r.json"), "--json", str(tmp_path / "m.json"))
    assert code == 5 and "nothing judged" in out, out + err
    assert json.loads((tmp_path / "m.json").read_text())["cut_short"] is True


def test_a_merged_bug_cell_caught_on_another_property_is_a_surprise(tmp_path: Path) -> None:
    """The merge applies the hunt's own rule: the JSON says which property the bug must fail."""
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "softmaxRowSafe", "--families",
                         "ordinary", "--seed", "0", "--max-examples", "5", "--no-fixtures",
                         "--json", str(tmp_path / "r.json"))
    assert code == 0, out
    doc = json.loads((tmp_path / "r.json").read_text())
    cell = doc["results"][0]
    assert cell["as_declared"] is True
    # The same cell, as a known bug of determinism that failed accuracy instead.
    cell.update(expected="bug", bug_property="determinism", passed=False, properties=["accuracy"],
                as_declared=False)
    (tmp_path / "bug.json").write_text(json.dumps(doc))
    code, out, err = run("report", "merge", str(tmp_path / "bug.json"))
    assert code == 1, out + err
    assert "MISSED(acc)" in out


def test_a_time_budget_cuts_a_users_hunt_short_and_names_what_it_did_not_reach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "slow_kernels.py").write_text(textwrap.dedent('''
        import time
        import numpy as np

        def softmax(x):
            time.sleep(0.02)
            e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
            return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code, out, err = run("hunt", "--op", "softmax", "--impl", "slow_kernels:softmax", "--seed", "0",
                         "--time-budget", "1", "--no-fixtures", "--json", str(tmp_path / "r.json"))
    assert code == 0, out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["cut_short"] is True and doc["not_reached"]
    assert len(doc["results"]) + len(doc["not_reached"]) == len(families_for("softmax"))
    assert f"not hunted: {', '.join(doc['not_reached'])}." in out
    assert "stopped" in out


def test_a_hunt_reaches_the_long_rows_own_widths() -> None:
    """The hunt passes no width limit of its own: long_rows reaches past the other families'
    16385 columns (a kernel wrong only on rows that long is caught), and a kernel's max_cols holds."""
    import numpy as np

    from normprops.hunt import examples_to_catch
    from normprops.launch import target_from_callable

    def softmax_wrong_past_16385(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        y = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        if x.shape[1] > 16385:
            y[:, 0] *= np.float32(1.01)
        return y

    target = target_from_callable(softmax_wrong_past_16385, op="softmax")
    config = HuntConfig(max_examples=20, seed=0)
    assert examples_to_catch(target, family="long_rows", config=config, property="accuracy") == 1
    capped = target.declared(constraints=ShapeConstraints(max_cols=16385))
    assert examples_to_catch(capped, family="long_rows", config=config, property="accuracy") is None


def test_a_ctrl_c_in_a_registry_hunt_names_the_cells_not_reached(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while a known bug's fixture is written: exit 130, the report written, and the cells
    without a result named in it and on the screen (the one interrupted among them), as a time
    budget names them."""
    import normprops.engine

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(normprops.engine, "save_findings", interrupted)
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "layerNormRowOnePass", "--families",
                         "large_mean,tiny", "--max-examples", "50", "--seed", "0", "--fixtures-dir",
                         str(tmp_path / "fx"), "--json", str(tmp_path / "r.json"))
    assert code == 130 and "Traceback" not in out + err, out + err
    doc = json.loads((tmp_path / "r.json").read_text())
    cells = ["layernorm[layerNormRowOnePass] x large_mean", "layernorm[layerNormRowOnePass] x tiny"]
    assert doc["error"] == "interrupted" and doc["not_reached"] == cells and doc["results"] == []
    assert f"not hunted: {', '.join(cells)}" in out


def test_a_ctrl_c_with_many_cells_left_names_the_first_few_and_the_report_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.registry_hunt

    def interrupted(*args, **kwargs):  # Ctrl-C before the first cell's result
        raise KeyboardInterrupt

    monkeypatch.setattr(normprops.registry_hunt, "hunt_families", interrupted)
    argv = ("hunt", "--backend", "numpy", "--op", "layernorm", "--max-examples", "50", "--seed", "0",
            "--fixtures-dir", str(tmp_path / "fx"))
    code, out, err = run(*argv, "--json", str(tmp_path / "r.json"))
    assert code == 130
    names = json.loads((tmp_path / "r.json").read_text())["not_reached"]
    assert len(names) == 30  # three numpy layer norms, ten families each
    line = next(line for line in out.splitlines() if line.startswith("not hunted: "))
    assert line == (f"not hunted: {', '.join(names[:12])}, and 18 more ({tmp_path / 'r.json'} names "
                    f"them under \"not_reached\")")
    code, out, err = run(*argv)  # no report: the screen is the only record, and names them all
    assert code == 130 and f"not hunted: {', '.join(names)}" in out


def test_the_catch_table_measures_only_the_named_families(tmp_path: Path) -> None:
    """scripts/catch_table.py --families: naming one family measures the numpy backend's known bugs
    in it alone (a forward's and a gradient's), and its JSON holds a row per bug with one count per
    seed."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "catch_table.py"
    out = tmp_path / "catch.json"
    done = subprocess.run([sys.executable, str(script), "--backend", "numpy", "--families", "large_mean",
                           "--seeds", "2", "--max-examples", "30", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["rows"]
    in_family = [(k.name, b.family) for k in KERNELS if k.backend == "numpy" for b in k.bugs
                 if b.family == "large_mean"]
    assert len(in_family) < sum(len(k.bugs) for k in KERNELS if k.backend == "numpy")
    assert [(r["kernel"], r["family"]) for r in rows] == in_family
    assert all(len(r["counts"]) == 2 and r["within_ci"] == 2 for r in rows)
    # A family with no known bug there is named, and nothing is measured; a JSON path that cannot be
    # written is one line too.
    done = subprocess.run([sys.executable, str(script), "--backend", "numpy", "--families", "larg_mean",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and "larg_mean" in done.stderr and "large_mean" in done.stderr
    done = subprocess.run([sys.executable, str(script), "--backend", "numpy", "--families", "large_mean",
                           "--seeds", "1", "--json", str(tmp_path / "no" / "catch.json")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2 and done.stderr.startswith("--json: cannot write") and not done.stdout


def test_the_seed_matrix_compares_each_cell_over_the_seeds(tmp_path: Path) -> None:
    """tools/seed_matrix.py on two seeds of a numpy registry hunt: every cell compared (the known
    bug's, which fails within a few examples, too) and identical. Then, in one seed: an unclaimed
    cell flipped is listed as differing; a claimed cell cut short is not compared; a claimed cell
    flipped and a report not as declared and cut short are counted; an unseeded report is refused."""
    import subprocess
    import sys

    paths = []
    for seed in (0, 1):
        path = tmp_path / f"numpy-s{seed}.json"
        code, _, err = run("hunt", "--backend", "numpy", "--op", "layernorm",
                           "--families", "large_mean,ordinary", "--seed", str(seed), "--max-examples", "30",
                           "--no-fixtures", "--json", str(path))
        assert code == 0, err
        paths.append(path)
    tool = Path(__file__).resolve().parents[1] / "tools" / "seed_matrix.py"

    def matrix() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tool), "--examples", "30", *map(str, paths)],
                              capture_output=True, text=True, timeout=60, check=False)

    lines = matrix().stdout.splitlines()
    assert lines == [lines[0]]
    assert lines[0].startswith("numpy: 6 cells in all 2 seeds at 30 examples or more "
                               "(4 claimed, 1 known bugs, 1 unclaimed); 2 of 2 reports as declared, "
                               "0 cut short; claimed and known-bug cells identical: yes")
    report = json.loads(paths[1].read_text())
    for r in report["results"]:
        if r["expected"] == "unclaimed":
            r["passed"] = not r["passed"]
        elif (r["kernel"], r["family"]) == ("layerNormRowTwoPass", "large_mean"):
            r["examples"] = 10
    paths[1].write_text(json.dumps(report))
    lines = matrix().stdout.splitlines()
    assert lines[0].startswith("numpy: 5 cells in all 2 seeds") and "identical: yes" in lines[0]
    assert any(line.startswith("  differs: layerNormRowOnePass x ordinary: seed 0 ") for line in lines)
    assert "  not compared: layerNormRowTwoPass x large_mean (full depth in seeds [0])" in lines
    for r in report["results"]:
        if (r["kernel"], r["family"]) == ("layerNormRowWelford", "ordinary"):
            r["passed"] = False
    report.update(not_as_declared=["layernorm[layerNormRowWelford] x ordinary"], cut_short=True)
    paths[1].write_text(json.dumps(report))
    lines = matrix().stdout.splitlines()
    assert "1 of 2 reports as declared, 1 cut short; claimed and known-bug cells identical: no" in lines[0]
    assert any(line.startswith("  differs: layerNormRowWelford x ordinary: seed 0 pass (claim), "
                               "seed 1 fail (claim)") for line in lines)
    # a hunt of two backends cut short before the second: its kernels, never built, have no target
    report.update(backend="numpy,torch-compile", not_reached=["layernorm[compiled.layer_norm-f32] x tiny"])
    paths[1].write_text(json.dumps(report))
    lines = matrix().stdout.splitlines()
    assert lines[0].startswith("numpy: 5 cells")
    assert lines[-2].startswith("torch-compile: 0 cells in all 1 seeds")
    assert lines[-1] == "  not compared: compiled.layer_norm-f32 x tiny (full depth in seeds none)"
    report["seed"] = None
    paths[1].write_text(json.dumps(report))
    done = matrix()
    assert done.returncode == 2 and "unseeded" in done.stderr and not done.stdout


@pytest.mark.skipif(shutil.which("bash") is None, reason="tools/ecosystem_on_gpu.sh is a bash script")
def test_the_ecosystem_runs_merge_each_seed_and_compare_the_seeds(tmp_path: Path) -> None:
    """tools/ecosystem_on_gpu.sh with a CPU backend: two seeds of two shards each, each seed merged
    into one report and matrix, the seeds compared; run again on its folder, every hunt resumes from
    its report and hunts nothing."""
    import os
    import subprocess
    import sys

    numpy = [k for k in KERNELS if k.backend == "numpy"]
    cells = len(plan_cells(numpy, families=None))
    script = Path(__file__).resolve().parents[1] / "tools" / "ecosystem_on_gpu.sh"
    env = {**os.environ, "BACKENDS": "numpy", "SEEDS": "1 2", "EXAMPLES": "5", "SHARDS": "2",
           "CACHE_DIR": str(tmp_path / "cache"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "eco"

    def once() -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(script), str(out)], capture_output=True, text=True, env=env,
                              timeout=600, check=False)

    done = once()
    assert done.returncode == 0, done.stderr
    assert "4 hunts in" in done.stdout
    assert ("0 with a kernel not as declared, 0 that judged nothing in BUDGET, 0 that could not run"
            in done.stdout)
    for seed in (1, 2):
        merged = json.loads((out / f"ecosystem-s{seed}.json").read_text())
        assert merged["complete"] and merged["seed"] == seed and len(merged["results"]) == cells
        assert "legend:" in (out / f"matrix-s{seed}.txt").read_text()
    assert (out / "seeds.txt").read_text().startswith(f"numpy: {cells} cells in all 2 seeds at 5 "
                                                      f"examples")
    again = once()
    assert again.returncode == 0 and "0 that could not run" in again.stdout
    log = (out / "eco-s1-1.log").read_text()
    assert (f"resumed from {out / 'eco-s1-1.json'}" in log
            and f"{len(plan_cells(numpy, families=None, shard=(1, 2)))} cells carried over" in log)
    # Other settings on the same folder: every hunt refuses the report it would resume, and the
    # run says so by its status rather than merging the earlier run's reports as if they were new.
    env["EXAMPLES"] = "6"
    other = once()
    assert other.returncode == 2 and "4 that could not run" in other.stdout


def test_the_suite_timing_names_an_entry_whose_every_test_pays_a_fixed_cost(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tools/suite_by_backend.py --by-kernel: one row per registry entry, with its fastest test."""
    import importlib.util

    xml = tmp_path / "run.xml"
    cases = [("torch-compile-compiled.softmax-bf16-ordinary", 15.0, ""),
             ("torch-compile-compiled.softmax-bf16-one_hot_dy", 13.0, ""),
             ("cuda-prod-softmaxFast-ordinary", 1.5, ""), ("quack-quack.softmax-f32-huge", 0, "<skipped/>")]
    xml.write_text("<testsuites><testsuite>" + "".join(
        f'<testcase classname="tests.test_numerics" name="test_claimed_family_is_clean[{name}]" '
        f'time="{t}">{body}</testcase>' for name, t, body in cases)
        + '<testcase classname="tests.catches.test_planted" name="test_something" time="2.0"/>'
        + "</testsuite></testsuites>")
    path = Path(__file__).resolve().parents[1] / "tools" / "suite_by_backend.py"
    spec = importlib.util.spec_from_file_location("suite_by_backend", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--by-kernel", str(xml)]) == 0
    lines = capsys.readouterr().out.splitlines()[2:]
    rows = {" ".join(line.split()[:-6]): line.split()[-6:] for line in lines}
    assert rows == {"torch-compile compiled.softmax-bf16": ["2", "28", "14.00", "13.0", "14.0", "15.0"],
                    "other": ["1", "2", "2.00", "2.0", "2.0", "2.0"],
                    "cuda-prod softmaxFast": ["1", "2", "1.50", "1.5", "1.5", "1.5"]}
    assert tool.main([str(xml)]) == 0
    assert "torch-compile      2       28  14.00   15.0" in capsys.readouterr().out


def test_the_suite_timing_counts_the_workers_that_ran_each_backend(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each test's xdist worker, as the conftest records it, counted by backend (a skipped test's
    worker paid no start and is not counted); a run without them has no such column."""
    import importlib.util

    def case(name: str, worker: str, body: str = "") -> str:
        return (f'<testcase classname="tests.test_numerics" name="test_claimed_family_is_clean[{name}]" '
                f'time="1.0">{body}<properties><property name="xdist_worker" value="{worker}"/>'
                f'</properties></testcase>')

    xml = tmp_path / "run.xml"
    xml.write_text("<testsuites><testsuite>"
                   + case("liger-liger.softmax-f32-ordinary", "gw0")
                   + case("liger-liger.softmax-f32-tiny", "gw3")
                   + case("liger-liger.softmax-bf16-tiny", "gw0")
                   + case("liger-liger.softmax-bf16-huge", "gw5", "<skipped/>")
                   + case("numpy-softmaxRowSafe-tiny", "gw1")
                   + "</testsuite></testsuites>")
    path = Path(__file__).resolve().parents[1] / "tools" / "suite_by_backend.py"
    spec = importlib.util.spec_from_file_location("suite_by_backend", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main([str(xml)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-1] == "workers"
    assert {line.split()[0]: line.split()[-1] for line in lines[2:]} == {"liger": "2", "numpy": "1"}


def test_a_family_the_entry_cannot_draw_is_not_planned() -> None:
    # An attention kernel that takes no mask (SDPA's flash backend) is not hunted on a family
    # whose cases all carry a mask: the cell is left out of the plan rather than failing the hunt.
    spec = next(s for s in KERNELS if s.name == "attention_online" and s.backend == "numpy")
    no_mask = replace(spec, op_declaration=replace(spec.op_declaration, mask_layouts=frozenset({"none"})))
    planned = {family for _, family in plan_cells([no_mask], families=families_for("attention"))}
    assert "ordinary" in planned
    assert "fully_masked" not in planned
    assert {family for _, family in plan_cells([spec], families=families_for("attention"))} == set(
        families_for("attention"))


def test_the_suite_timing_writes_each_hunts_median_seconds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tools/suite_by_backend.py --test-seconds: each claimed family's hunt that ran, the median of
    its seconds over the runs given (a skipped one and the known-bug tests left out), as JSON."""
    import importlib.util
    import json

    def run(path: Path, cases: list[tuple[str, float, str]]) -> str:
        path.write_text("<testsuites><testsuite>" + "".join(
            f'<testcase classname="tests.test_numerics" name="{test}[{name}]" time="{t}">{body}</testcase>'
            for test, (name, t, body) in zip(["test_claimed_family_is_clean"] * len(cases), cases))
            + '<testcase classname="tests.test_numerics" name="test_known_bug_is_caught[numpy-x-tiny]" '
              'time="9.0"/></testsuite></testsuites>')
        return str(path)

    cold = run(tmp_path / "cold.xml", [("torch-cpu-flex-eager-f32-ragged", 22.0, ""),
                                       ("numpy-softmaxRowSafe-tiny", 1.0, ""),
                                       ("quack-quack.softmax-f32-huge", 0, "<skipped/>")])
    warm = run(tmp_path / "warm.xml", [("torch-cpu-flex-eager-f32-ragged", 4.0, ""),
                                       ("numpy-softmaxRowSafe-tiny", 1.2, "")])
    third = run(tmp_path / "third.xml", [("torch-cpu-flex-eager-f32-ragged", 5.04, "")])
    path = Path(__file__).resolve().parents[1] / "tools" / "suite_by_backend.py"
    spec = importlib.util.spec_from_file_location("suite_by_backend", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--test-seconds", cold, warm, third]) == 0
    assert json.loads(capsys.readouterr().out) == {"numpy-softmaxRowSafe-tiny": 1.1,
                                                   "torch-cpu-flex-eager-f32-ragged": 5.0}
