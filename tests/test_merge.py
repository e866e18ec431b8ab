"""`normprops report merge` merges only what makes one whole: every shard once, one seed, one set
of settings, finished runs of one normprops version; `--allow-incomplete` merges anyway and says so."""

from __future__ import annotations

import errno
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_harness import run

from normprops import __version__
from normprops.merge import IncompleteMerge, merge_reports

USER_MODULE_NAME = "userkernels_merge"  # written by the user_module fixture (conftest.py)
USER_MODULE = textwrap.dedent('''
    import numpy as np

    def softmax_good(x):
        z = x.astype(np.float64)
        z = np.exp(z - z.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)
''')



def _shard_doc(k: int, n: int = 2, **changes: Any) -> dict[str, Any]:
    """A registry hunt's report of shard k/n: one cell, kernel k, failing accuracy when k is even."""
    passed = k % 2 == 1
    doc = {"format": "normprops-report/1", "normprops": __version__, "command": "hunt",
           "backend": "numpy", "policy": "default", "oracle": "float64", "max_examples": 100,
           "seed": 0, "shard": f"{k}/{n}", "targets": [], "complete": True, "error": None,
           "notes": [],
           "results": [{"target": f"rmsnorm[k{k}]", "kernel": f"k{k}", "op": "rmsnorm",
                        "backend": "numpy", "family": "tiny", "passed": passed,
                        "properties": [] if passed else ["accuracy"], "expected": "unclaimed"}],
           "failures": [] if passed else [{"target": f"rmsnorm[k{k}]", "family": "tiny",
                                            "property": "accuracy"}]}
    doc.update(changes)
    doc["results"][0]["backend"] = doc["backend"]
    return doc


def _write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


# --- what a merge refuses: one line per problem, naming the file(s), exit 3, nothing written -----


@pytest.mark.parametrize("docs, problems", [
    pytest.param({"s1.json": _shard_doc(1)}, ["shard 2/2 is missing (the reports hold 1/2)"],
                 id="a-shard-missing"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, seed=5)},
                 ["s2.json: seed 5, but s1.json: seed 0"], id="another-seed"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, max_examples=50, policy="table")},
                 ["s2.json: max_examples 50, but s1.json: max_examples 100",
                  "s2.json: policy table, but s1.json: policy default"], id="other-settings"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, backend="cuda")},
                 ["shard 2/2 of the hunt of --backend numpy is missing (the reports hold 1/2)",
                  "shard 1/2 of the hunt of --backend cuda is missing (the reports hold 2/2)"],
                 id="shards-of-other-kernels"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, complete=False, error="interrupted")},
                 ["s2.json did not finish (interrupted)"], id="interrupted"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, normprops="0.0.1")},
                 [f"s2.json was written by normprops 0.0.1, s1.json by {__version__}"], id="another-version"),
    pytest.param({"s1.json": _shard_doc(1), "s1-copy.json": _shard_doc(1), "s2.json": _shard_doc(2)},
                 ["shard 1/2 is given twice: s1.json, s1-copy.json"], id="a-shard-twice-in-two-files"),
    pytest.param({"s1.json": _shard_doc(1), "s2.json": _shard_doc(2, n=3)},
                 ["s2.json is shard 2/3, but s1.json is shard 1/2 (another split)",
                  "shard 2/2 is missing (the reports hold 1/2)"], id="another-split"),
    pytest.param({"s1.json": _shard_doc(1), "whole.json": _shard_doc(2, shard=None)},
                 ["whole.json is not a shard (no --shard), but s1.json is shard 1/2 of the same kernels",
                  "shard 2/2 is missing (the reports hold 1/2)"], id="a-report-that-is-no-shard"),
])
def test_a_merge_that_is_not_one_whole_exits_3_one_line_per_problem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docs: dict[str, dict[str, Any]],
        problems: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    paths = [_write(Path(name), doc) for name, doc in docs.items()]
    code, out, err = run("report", "merge", *paths, "--json", "merged.json")
    assert code == 3, out + err
    lines = err.splitlines()
    assert lines[:-1] == [f"normprops report merge: error: {p}" for p in problems]
    assert "--allow-incomplete" in lines[-1] and len(lines) == len(problems) + 1
    # The report is written all the same, holding no cell and saying why: a CI job that uploads it
    # finds it, and an older merge in its place is not taken for this one.
    assert out == ""
    doc = json.loads(Path("merged.json").read_text())
    assert doc["complete"] is False and doc["results"] == [] and doc["failures"] == []
    assert doc["problems"] == problems and doc["error"] == "nothing merged: " + "; ".join(problems)
    assert doc["merged_from"] == paths
    # ... and a merge of it is refused as unfinished.
    code, _, err = run("report", "merge", "merged.json")
    assert code == 3 and "merged.json did not finish (nothing merged: " in err


def test_the_same_file_twice_is_refused_not_counted_twice(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s1, s2 = _write(Path("s1.json"), _shard_doc(1)), _write(Path("s2.json"), _shard_doc(2))
    (tmp_path / "sub").mkdir()
    code, _, err = run("report", "merge", s1, s2, s2, f"sub/../{s2}")
    assert code == 3
    assert "error: s2.json is given twice\n" in err
    assert "error: s2.json and sub/../s2.json are the same file\n" in err
    # Merged anyway, each file is read once: one failure, not three.
    merged = merge_reports([Path(s1), Path(s2), Path(s2)], allow_incomplete=True)
    assert len(merged["failures"]) == 1 and len(merged["results"]) == 2
    assert merged["problems"] == ["s2.json is given twice"]


def test_allow_incomplete_merges_and_marks_the_result_incomplete(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s1 = _write(Path("s1.json"), _shard_doc(1, n=3))
    s3 = _write(Path("s3.json"), _shard_doc(3, n=3, complete=False, error="interrupted"))
    code, out, err = run("report", "merge", s1, s3, "--allow-incomplete", "--json", "merged.json")
    assert code == 0 and err == ""  # both cells pass; the status is the cells'
    assert "incomplete: shard 2/3 is missing (the reports hold 1/3, 3/3)" in out
    assert "incomplete: s3.json did not finish (interrupted)" in out
    doc = json.loads(Path("merged.json").read_text())
    assert doc["complete"] is False
    assert doc["problems"] == ["s3.json did not finish (interrupted)",
                               "shard 2/3 is missing (the reports hold 1/3, 3/3)"]
    assert doc["error"] == "; ".join(doc["problems"]) and doc["seed"] == 0


def test_whole_shards_merge_complete_with_their_shared_settings(tmp_path: Path) -> None:
    paths = [Path(_write(tmp_path / f"s{k}.json", _shard_doc(k))) for k in (2, 1)]
    merged = merge_reports(paths)
    assert merged["complete"] is True and merged["problems"] == [] and merged["error"] is None
    assert {r["kernel"] for r in merged["results"]} == {"k1", "k2"}
    assert (merged["seed"], merged["backend"], merged["max_examples"]) == (0, "numpy", 100)
    assert "shard" not in merged


def test_a_registry_merge_counts_its_known_bugs_apart_from_surprises(tmp_path: Path) -> None:
    # The failures of a green registry hunt are its known bugs: the summary says they were caught.
    code, out, err = run("hunt", "--backend", "numpy", "--kernel", "layerNormRowOnePass", "--families",
                         "ordinary,large_mean", "--max-examples", "20", "--seed", "0", "--no-fixtures",
                         "--json", str(tmp_path / "r.json"))
    assert code == 0, out + err
    code, out, err = run("report", "merge", str(tmp_path / "r.json"))
    assert code == 0 and err == "", err
    assert out.splitlines()[-1].startswith("1 report, 2 cells (1 of 1 known bug caught, 0 not as "
                                           "declared), "), out
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["results"] = [dict(r, expected="claim") for r in doc["results"]]  # the bug claimed away
    code, out, _ = run("report", "merge", _write(tmp_path / "claimed.json", doc))
    assert code == 1 and "(1 not as declared)" in out.splitlines()[-1], out


def test_reports_of_other_kernels_merge_side_by_side(tmp_path: Path) -> None:
    # Two hunts without --shard: other seeds and backends are theirs to have.
    a = _write(tmp_path / "a.json", _shard_doc(1, shard=None, seed=1))
    b = _write(tmp_path / "b.json", _shard_doc(2, shard=None, seed=2, backend="cuda"))
    code, out, err = run("report", "merge", a, b)
    assert code == 0 and err == "", err  # k2 fails a family it does not claim: no surprise
    assert "2 reports, 2 cells (0 not as declared), 1 failure" in out
    # The same cell in two of them, with the same outcome, is one cell and its failures once.
    again = _write(tmp_path / "again.json", _shard_doc(2, shard=None, seed=3, backend="cuda"))
    merged = merge_reports([Path(a), Path(b), Path(again)])
    assert len(merged["results"]) == 2 and len(merged["failures"]) == 1
    assert "seed" not in merged  # not shared, so not claimed


def test_sharded_hunts_of_other_kernels_merge_each_whole(tmp_path: Path) -> None:
    # Two hunts spread over their own shards, with their own splits and example counts.
    docs = [_shard_doc(k, n=2, backend="liger") for k in (1, 2)]
    docs += [_shard_doc(k, n=3, backend="quack", max_examples=20) for k in (1, 2, 3)]
    paths = [Path(_write(tmp_path / f"r{i}.json", doc)) for i, doc in enumerate(docs)]
    merged = merge_reports(paths)
    assert merged["complete"] is True and len(merged["results"]) == 2 + 3  # liger's k1, k2; quack's k1..k3
    assert "backend" not in merged and "max_examples" not in merged and merged["seed"] == 0
    with pytest.raises(IncompleteMerge) as caught:
        merge_reports(paths[:-1])
    assert caught.value.problems == ["shard 3/3 of the hunt of --backend quack is missing (the reports "
                                     "hold 1/3, 2/3)"]


def test_a_shard_cut_short_by_its_time_budget_merges_and_the_merge_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A cut-short hunt finished cleanly, so it merges; its unreached cells are missing, which the
    # merged report and the output must not hide.
    monkeypatch.chdir(tmp_path)
    s1 = _write(Path("s1.json"), _shard_doc(1, cut_short=True))
    s2 = _write(Path("s2.json"), _shard_doc(2, cut_short=False))
    code, out, err = run("report", "merge", s1, s2, "--json", "merged.json")
    assert code == 0 and err == "", err
    note = "cut short: s1.json spent its time budget; the cells it did not reach are missing"
    assert note in out.splitlines()
    assert out.rstrip().endswith("2 reports, 2 cells (0 not as declared), 1 failure; cut short")
    doc = json.loads(Path("merged.json").read_text())
    assert doc["complete"] is True and doc["cut_short"] is True and doc["notes"] == [note]
    assert merge_reports([Path(s2)] + [Path(_write(Path("s1b.json"), _shard_doc(1)))])["cut_short"] is False


def test_a_cell_with_two_outcomes_is_a_problem(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _shard_doc(1, shard=None))
    flipped = _shard_doc(1, shard=None)
    flipped["results"][0].update(passed=False, properties=["accuracy"])
    b = _write(tmp_path / "b.json", flipped)
    with pytest.raises(IncompleteMerge) as caught:
        merge_reports([Path(a), Path(b)])
    assert caught.value.problems == [f"{b}: k1 x tiny is also in {a}, with another outcome"]


def test_a_merged_report_that_cannot_be_written_after_all_is_one_line_exit_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import normprops.jsonio

    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.chdir(tmp_path)
    paths = [_write(Path(f"s{k}.json"), _shard_doc(k)) for k in (1, 2)]
    monkeypatch.setattr(normprops.jsonio.os, "replace", disk_full)
    code, out, err = run("report", "merge", *paths, "--json", "merged.json")
    assert code == 4 and "2 reports, 2 cells (0 not as declared), 1 failure" in out
    assert err == "normprops report merge: error: cannot write merged.json: No space left on device\n"


# --- end to end: the shards of a hunt of a user's kernel -------------------------------------------


def test_impl_shards_record_their_shard_and_only_all_of_them_merge(user_module: str,
                                                                   tmp_path: Path) -> None:
    common = ["hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families",
              "ordinary,ragged,tiny", "--max-examples", "5", "--seed", "0", "--no-fixtures"]
    for k, hunted in ((1, "2 families"), (2, "1 family")):
        code, out, _ = run(*common, "--shard", f"{k}/2", "--json", f"s{k}.json")
        assert code == 0, out
        header = out.splitlines()[0]  # says which shard it is
        assert f", {hunted} (shard {k}/2 of the 3 asked for), 5 examples each" in header, header
    docs = [json.loads(Path(f"s{k}.json").read_text()) for k in (1, 2)]
    assert [d["shard"] for d in docs] == ["1/2", "2/2"]
    assert all(d["families"] == ["ordinary", "ragged", "tiny"] for d in docs)  # asked for, not hunted
    assert [[r["family"] for r in d["results"]] for d in docs] == [["ordinary", "tiny"], ["ragged"]]
    code, out, err = run("report", "merge", "s1.json", "s2.json", "--json", "all.json")
    assert code == 0 and "2 reports, 3 cells, 0 failures" in out, out + err
    assert json.loads(Path("all.json").read_text())["complete"] is True
    code, _, err = run("report", "merge", "s1.json")
    assert code == 3 and "shard 2/2 is missing" in err
    # Another kernel flag is another hunt, even with the same --impl.
    assert run(*common, "--shard", "2/2", "--ftz", "--json", "s2ftz.json")[0] == 0
    code, _, err = run("report", "merge", "s1.json", "s2ftz.json")
    assert code == 3 and "error: s2ftz.json: ftz True, but s1.json: ftz False\n" in err


def test_a_replay_report_is_not_merged_as_a_clean_hunt(tmp_path: Path) -> None:
    """A replay's report holds failures and no cells: merged, the failures left the matrix and the
    merge exited 0."""
    doc = {**_shard_doc(1, 1), "command": "replay", "shard": None, "results": [],
           "failures": [{"target": "softmax[k]", "family": "ordinary", "property": "accuracy"}]}
    code, _, err = run("report", "merge", _write(tmp_path / "replay.json", doc))
    assert code == 2
    assert "replay.json: a report of 'normprops replay', not of a hunt" in err


def test_a_picture_without_matplotlib_is_refused_before_anything_is_merged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else find_spec(name, *a))
    merged = tmp_path / "m.json"
    code, out, err = run("report", "merge", _write(tmp_path / "a.json", _shard_doc(1, 1)),
                         "--json", str(merged), "--png", str(tmp_path / "m.png"))
    assert code == 2 and out == "" and not merged.exists()
    assert err.strip() == ("normprops report merge: error: --png needs matplotlib, which is not "
                           "installed: pip install 'normprops[plot]'")


@pytest.mark.parametrize("change, message", [
    ({"complete": "yes"}, "'complete' is 'yes', not true or false"),
    ({"shard": 5}, "'shard' is 5, not K/N (as --shard writes it)"),
    ({"hints": 5}, "'hints' is not a list of strings"),
    ({"hints": "abc"}, "'hints' is not a list of strings"),
    ({"targets": [5]}, "'targets' is not a list of objects"),
])
def test_a_report_with_a_malformed_field_is_refused_by_name(tmp_path: Path, change: dict,
                                                            message: str) -> None:
    code, _, err = run("report", "merge", _write(tmp_path / "a.json", {**_shard_doc(1, 1), **change}))
    assert code == 2 and f"a.json: {message}" in err, err


def test_a_merge_keeps_the_shards_targets_and_hints(tmp_path: Path) -> None:
    target = {"label": "rmsnorm[k1]", "name": "k1", "dtype": "bfloat16"}
    hint = "hint: --arithmetic bfloat16 (arithmetic=\"bfloat16\") explains every accuracy finding here"
    paths = [_write(tmp_path / "s1.json", _shard_doc(1, targets=[target])),
             _write(tmp_path / "s2.json", _shard_doc(2, targets=[target], hints=[hint]))]
    merged = merge_reports(paths)
    # A hint was checked on its own report's findings: it keeps that report's name.
    assert merged["targets"] == [target] and merged["hints"] == [f"{paths[1]}: {hint}"]
    code, out, _ = run("report", "merge", *paths)
    assert code == 0 and f"{paths[1]}: {hint}" in out


def test_a_cell_no_report_holds_is_drawn_and_explained_as_not_hunted() -> None:
    """A shard cut short leaves holes in the merged matrix: drawn "-", and the legend says what it
    means (a hole is not a family that does not apply: each op has its own table)."""
    from normprops.report import Cell, matrix_legend, render_matrix

    cells = [Cell("softmax (numpy)", "a", "tiny", "pass"), Cell("softmax (numpy)", "a", "huge", "pass"),
             Cell("softmax (numpy)", "b", "tiny", "pass")]
    assert render_matrix(cells).splitlines()[-1].split() == ["b", "pass", "-"]
    assert "-: not hunted" in matrix_legend(cells)
    assert "-: not hunted" not in matrix_legend(cells[:2])


# --- hunts of users' kernels: each kernel its own cells, whatever its function is called ---------


def _impl_doc(impl: str, *, op: str = "softmax", dtype: str = "float32", passed: bool = True,
              family: str = "ordinary", **changes: Any) -> dict[str, Any]:
    """The report of a hunt of ``--impl impl``: one cell."""
    name = impl.split(":")[1]
    label = f"{op}[{name}]"
    doc = {"format": "normprops-report/1", "normprops": __version__, "command": "hunt", "op": op,
           "impl": impl, "policy": "default", "oracle": "float64", "max_examples": 20, "seed": 1,
           "families": [family], "shard": None, "complete": True, "error": None, "notes": [],
           "targets": [{"label": label, "name": name, "op": op, "backend": "python",
                        "framework": "numpy", "device": "cpu", "dtype": dtype}],
           "results": [{"target": label, "kernel": name, "op": op, "backend": "python",
                        "family": family, "passed": passed, "properties": [] if passed else ["finite"],
                        "examples": 20}],
           "failures": [] if passed else [{"target": label, "family": family, "property": "finite"}]}
    doc.update(changes)
    return doc


def test_kernels_of_one_function_name_merge_side_by_side_each_named(tmp_path: Path) -> None:
    """A cell is its kernel's, not its function name's: two modules' ``fwd`` are two rows, whichever
    report comes first, and a softmax and a layer norm both called ``fwd`` are both kept."""
    good = _write(tmp_path / "good.json", _impl_doc("mine:fwd"))
    bad = _write(tmp_path / "bad.json", _impl_doc("fast:fwd", passed=False))
    norm = _write(tmp_path / "norm.json", _impl_doc("norms:fwd", op="layernorm"))
    for order in ((good, bad, norm), (norm, bad, good)):
        code, out, err = run("report", "merge", *order)
        assert code == 1 and err == "", out + err  # the failing kernel is seen, in either order
        assert "3 reports, 3 cells, 1 failure" in out, out
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if ":fwd" in line}
        assert rows == {"mine:fwd": ["pass"], "fast:fwd": ["finite"]}, out
        assert "layernorm (python)" in out
    merged = merge_reports([Path(good), Path(bad)])
    (failure,) = merged["failures"]
    assert failure["impl"] == "fast:fwd"  # which kernel's, in the merged report too
    # A merged report merges again as its kernels: nothing counted twice, every row named apart.
    again = _write(tmp_path / "merged.json", merged)
    remerged = merge_reports([Path(again), Path(bad), Path(norm)])
    assert remerged["complete"] is True and len(remerged["failures"]) == 1
    rows = sorted((r["op"], r.get("row") or r["kernel"]) for r in remerged["results"])
    assert rows == [("layernorm", "fwd"), ("softmax", "fast:fwd"), ("softmax", "mine:fwd")]
    assert {r["kernel"] for r in remerged["results"]} == {"fwd"}  # the name, as each hunt gave it


def test_the_shards_of_one_kernel_on_two_gpus_are_one_row(tmp_path: Path) -> None:
    docs = [_impl_doc("mine:fwd", family=family, shard=f"{k}/2", families=["ordinary", "tiny"])
            for k, family in ((1, "ordinary"), (2, "tiny"))]
    for k, doc in enumerate(docs):
        doc["targets"][0].update(framework="torch", device=f"cuda:{k}")
    merged = merge_reports([Path(_write(tmp_path / f"s{k}.json", d)) for k, d in enumerate(docs)])
    assert merged["complete"] is True
    assert [(r.get("row"), r["kernel"], r["device"]) for r in merged["results"]] == [
        (None, "fwd", "cuda"), (None, "fwd", "cuda")]


def test_a_refused_merge_never_writes_over_a_report_it_was_given(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s1 = _write(Path("all.json"), _shard_doc(1))  # shard 2/2 missing: refused
    before = Path(s1).read_text()
    code, out, err = run("report", "merge", s1, "--json", "all.json")
    assert code == 3 and Path(s1).read_text() == before
    assert "normprops report merge: all.json not written: it is one of the reports given" in err


def test_one_function_at_two_storage_types_is_two_kernels(tmp_path: Path) -> None:
    # Each storage type's hunt spread over shards of its own: each must be whole on its own.
    docs = [_impl_doc("mine:fwd", dtype=dtype, family=family, shard=f"{k}/2", families=["ordinary", "tiny"],
                      passed=dtype == "float32")
            for dtype in ("float32", "bfloat16") for k, family in ((1, "ordinary"), (2, "tiny"))]
    paths = [Path(_write(tmp_path / f"r{i}.json", doc)) for i, doc in enumerate(docs)]
    merged = merge_reports(paths)
    assert merged["complete"] is True and len(merged["results"]) == 4
    assert {(r["row"], r["family"]): r["passed"] for r in merged["results"]} == {
        ("fwd float32", "ordinary"): True, ("fwd float32", "tiny"): True,
        ("fwd bfloat16", "ordinary"): False, ("fwd bfloat16", "tiny"): False}
    assert len(merged["failures"]) == 2
    with pytest.raises(IncompleteMerge) as caught:
        merge_reports(paths[:3])
    assert caught.value.problems == ["shard 2/2 of the hunt of --impl mine:fwd (numpy bfloat16) is missing "
                                     "(the reports hold 1/2)"]


def test_an_empty_shard_is_a_part_of_the_whole(user_module: str, tmp_path: Path) -> None:
    """More shards than families: the empty one says so and exits 0, and its report merges, so a
    fixed job matrix fits any selection of families."""
    common = ["hunt", "--op", "softmax", "--impl", f"{user_module}:softmax_good", "--families",
              "ordinary,tiny", "--max-examples", "5", "--seed", "0", "--no-fixtures"]
    for k in (1, 2, 3):
        code, out, err = run(*common, "--shard", f"{k}/3", "--json", f"s{k}.json")
        assert code == 0, out + err
    assert "shard 3/3 holds none of the 2 families asked for: nothing to hunt here" in out
    empty = json.loads(Path("s3.json").read_text())
    assert empty["results"] == [] and empty["complete"] is True and empty["shard"] == "3/3"
    code, out, err = run("report", "merge", "s1.json", "s2.json", "s3.json")
    assert code == 0 and "3 reports, 2 cells, 0 failures" in out, out + err
    code, _, err = run("report", "merge", "s1.json", "s2.json")
    assert code == 3 and "shard 3/3 is missing (the reports hold 1/3, 2/3)" in err
