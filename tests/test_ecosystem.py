"""The ecosystem's kernels in the registry (torch.compile, Liger-Kernel, QuACK, JAX, Flax), and
hunts spread over shards whose reports merge into one matrix."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cli_harness import run

from normprops.dtypes import split_exact, to_dtype
from normprops.report import Cell, cell_text
from normprops.specs import KERNELS, backend_status

ECOSYSTEM = ("torch-compile", "liger", "quack", "jax", "flax")


def test_kernels_lists_every_ecosystem_backend_with_its_status() -> None:
    code, out, _ = run("kernels")
    assert code == 0
    for backend in ECOSYSTEM:
        line = next(line for line in out.splitlines() if line.startswith(f"backend {backend}:"))
        ok, why = backend_status(backend)
        assert ("available" if ok else "unavailable") in line and why in line


def test_each_ecosystem_entry_records_what_it_promises() -> None:
    entries = [k for k in KERNELS if k.backend in ECOSYSTEM]
    assert {(k.backend, k.dtype) for k in entries} >= {(b, d) for b in ECOSYSTEM
                                                      for d in ("float32", "bfloat16")}
    assert len(entries) >= 12
    for k in entries:
        assert k.framework in ("torch", "jax") and "batch_invariance" in k.exempt
        if k.op != "softmax":
            assert "huge" not in k.claims  # none of the norms scales its rows
    quack_softmax = {k.dtype: k for k in entries if k.name.startswith("quack.softmax")}
    assert quack_softmax["float32"].constraints.cols_multiple_of == 4
    assert quack_softmax["bfloat16"].constraints.cols_multiple_of == 8
    # Liger's launchers refuse rows past 65536 columns: every forward entry declares it, so
    # long_rows draws up to that width rather than meeting the refusal as a contract failure.
    # (Its cross-entropy and fused linear cross-entropy loop over the vocabulary in blocks: no
    # limit there.)
    liger = [k for k in entries if k.backend == "liger" and not k.op.endswith("_backward")
             and "cross_entropy" not in k.op]
    assert len(liger) == 8 and all(k.constraints.max_cols == 65536 for k in liger)
    # E[x^2] - E[x]^2 cancels on large means and on the constant family's spiked rows alike: the
    # entries that compute it declare it, and are judged by its bound.
    one_pass = [k for k in entries if k.name.startswith(("flax.LayerNorm", "jax.nn.standardize"))]
    assert len(one_pass) == 4 and all(k.error_model.variance == "one_pass" for k in one_pass)


def test_every_known_bug_must_be_caught_none_only_sometimes() -> None:
    """No known bug is excused when a hunt misses it: QuACK's magnitude error, which random draws
    meet only sometimes in ordinary and nonfinite rows, is hunted with its finding as an explicit
    example, and its cells read caught or MISSED like any other bug's."""
    from normprops.hunt import HuntResult

    spec = next(k for k in KERNELS if k.name == "quack.softmax-f32")
    assert spec.expectation("ordinary") == "bug" and spec.expectation("huge") == "bug"
    assert spec.bug_in("ordinary").example and spec.bug_in("wide_span").example
    assert spec.expectation("ragged") == "claim"
    assert {b.detector for k in KERNELS for b in k.bugs} == {"hunt", "racecheck"}
    # The race is compute-sanitizer's to find: a registry hunt that does not meet it is no surprise.
    race = next(k for k in KERNELS if k.name == "softmaxRowNoBarrier")
    assert race.expectation("ordinary") == "unclaimed"
    assert cell_text(HuntResult(race.label, "softmax", "ordinary", 100, 1.0, 1.0, ()),
                     expected=race.expectation("ordinary")) == "(pass)"
    # Its bugs are hunted at the widths it accepts: a width it refuses is no catch.
    assert spec.bug_constraints.cols_multiple_of == 4
    norm = next(k for k in KERNELS if k.name == "quack.rmsnorm-bf16")
    assert norm.constraints.cols_multiple_of == 2 and norm.bug_constraints.cols_multiple_of == 1
    for passed in (True, False):
        findings = () if passed else (SimpleNamespace(property="ratios"),)
        result = HuntResult(spec.label, "softmax", "ordinary", 100, 1.0, 1.0, findings)
        assert cell_text(result, expected="bug") == ("MISSED" if passed else "caught")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_exact_split_of_the_fused_kernels(dtype: str) -> None:
    rng = np.random.default_rng(0)
    x = to_dtype((rng.standard_normal((4, 33)) * 10.0 ** rng.integers(-30, 30, (4, 33))), dtype)
    a, b = split_exact(x, dtype)
    assert np.array_equal(to_dtype(a, dtype), a) and np.array_equal(to_dtype(b, dtype), b)
    assert np.array_equal((a.astype(np.float64) + b).astype(np.float32), x)
    # The sum of the two halves must give x bit for bit in the kernel's arithmetic, signed zeros
    # included: -0 + +0 is +0, which once made a correct fused kernel look wrong.
    z = to_dtype(np.array([[-0.0, 0.0, -1e-40, 3.0]], np.float32), dtype)
    a, b = split_exact(z, dtype)
    with np.errstate(all="ignore"):
        s = a + b  # float32 arithmetic, round to nearest
    assert np.array_equal(s.view(np.uint32), z.view(np.uint32))


def _cells(doc: dict) -> dict:
    return {(r["kernel"], r["family"]): (r["passed"], tuple(r["properties"])) for r in doc["results"]}


def test_sharded_hunts_merge_into_the_unsharded_matrix(tmp_path: Path) -> None:
    common = ["hunt", "--backend", "numpy", "--op", "layernorm", "--max-examples", "15",
              "--seed", "3", "--no-fixtures"]
    run(*common, "--json", str(tmp_path / "all.json"))
    shards = []
    for k in (1, 2, 3):
        path = tmp_path / f"shard{k}.json"
        run(*common, "--shard", f"{k}/3", "--json", str(path))
        shards.append(path)
    sizes = [len(json.loads(p.read_text())["results"]) for p in shards]
    assert min(sizes) >= 1 and sum(sizes) == len(json.loads((tmp_path / "all.json").read_text())["results"])
    code, out, _ = run("report", "merge", *map(str, shards), "--json", str(tmp_path / "merged.json"))
    assert code == 0, out
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert _cells(merged) == _cells(json.loads((tmp_path / "all.json").read_text()))
    assert "layerNormRowOnePass" in out and "caught" in out


def test_merge_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run("report", "merge", str(bad))
    assert code == 2 and "bad.json: not valid JSON" in err
    code, _, err = run("report", "merge", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json: cannot be read" in err


def test_merge_refuses_two_reports_that_disagree_on_a_cell(tmp_path: Path) -> None:
    doc = {"format": "normprops-report/1", "results": [
        {"target": "rmsnorm[k]", "kernel": "k", "backend": "numpy", "op": "rmsnorm",
         "family": "tiny", "passed": True, "properties": []}], "failures": []}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    doc["results"][0].update(passed=False, properties=["accuracy"])
    (tmp_path / "b.json").write_text(json.dumps(doc))
    code, _, err = run("report", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert code == 3 and f"b.json: k x tiny is also in {tmp_path / 'a.json'}, with another outcome" in err


@pytest.mark.parametrize("shard, message", [("0/3", "1 <= K <= N"), ("4/3", "1 <= K <= N"),
                                            ("x", "expected K/N")])
def test_bad_shards_are_usage_errors(shard: str, message: str) -> None:
    code, _, err = run("hunt", "--shard", shard)
    assert code == 2 and message in err


def test_merge_draws_the_matrix(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    run("hunt", "--backend", "numpy", "--op", "rmsnorm", "--max-examples", "5", "--seed", "0",
        "--no-fixtures", "--json", str(tmp_path / "r.json"))
    code, _, err = run("report", "merge", str(tmp_path / "r.json"), "--png", str(tmp_path / "m.png"))
    assert code == 0, err
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sorted_matrix_keeps_the_families_in_the_hunts_order() -> None:
    from normprops.report import render_matrix

    cells = [Cell("softmax (x)", "k", family, "pass") for family in ("tiny", "huge", "ordinary")]
    header = render_matrix(cells, sort=True).splitlines()[1].split()
    assert header == ["ordinary", "huge", "tiny"]


def test_xla_flushing_a_subnormal_input_is_within_the_entries_bound() -> None:
    """XLA does not promise subnormals (on the CPU it flushes them): jax.nn.standardize in
    bfloat16 standardized [6.39e-38, 1.05e-38] as if the second were 0. The JAX and Flax entries
    are judged as flushing; without that declaration the same output fails its bound."""
    from dataclasses import replace as dc_replace

    from normprops.case import Case
    from normprops.oracles import reference, tolerance

    x = np.array([[1.2581462973644796e-38, -1.3224311446750734e-38],
                  [6.391750532596188e-38, 1.0469246562010998e-38]], np.float32)
    case = Case("layernorm", "tiny", x, np.ones(2, np.float32), np.zeros(2, np.float32),
                float(np.float32(1e-5)), dtype="bfloat16")
    spec = next(k for k in KERNELS if k.name == "jax.nn.standardize-bf16")
    assert all(k.error_model.ftz for k in KERNELS if k.framework == "jax")
    ref = reference(case)
    got = 1.0109e-35  # what XLA returned at row 1, col 0: (x - x[1, 0] / 2) / sqrt(eps)
    err = abs(got - ref.y[1, 0])
    assert err <= tolerance(case, ref, model=spec.error_model).tol[1, 0]
    assert err > tolerance(case, ref, model=dc_replace(spec.error_model, ftz=False)).tol[1, 0]


def test_a_one_pass_variance_is_judged_by_its_own_bound_on_ragged_rows() -> None:
    """ragged's zero-mean rows of 2 columns have |mean| / std spread like a Cauchy variable, and
    E[x^2] - E[x]^2 in float32 errs like kappa^2 u: flax.LayerNorm gave 0.94367 for the row
    [-1.1936, -1.1758] (kappa 125), 9x the two-pass bound. The entries declare the formula, and
    the one-pass bound holds it, so their float32 entries claim ragged."""
    from dataclasses import replace as dc_replace

    from normprops.case import Case
    from normprops.oracles import reference, tolerance

    x = np.array([[-1.1935980319976807, -1.1757656335830688]], np.float32)
    case = Case("layernorm", "ragged", x, np.ones(2, np.float32), np.zeros(2, np.float32),
                float(np.float32(1e-5)))
    spec = next(k for k in KERNELS if k.name == "flax.LayerNorm-f32")
    ref = reference(case)
    err = abs(0.94367 - ref.y[0, 1])
    assert err > 5 * tolerance(case, ref, model=dc_replace(spec.error_model, variance="two_pass")).tol[0, 1]
    assert err < tolerance(case, ref, model=spec.error_model).tol[0, 1]
    for name in ("flax.LayerNorm", "jax.nn.standardize"):
        claims = {k.dtype: k.claims for k in KERNELS if k.name.startswith(name + "-")}
        assert "ragged" in claims["float32"] and "ragged" in claims["bfloat16"]
