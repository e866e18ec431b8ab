"""The tool's own inputs, fuzzed: fixture files, JSON reports and command lines full of garbage must
end in a clear error of the documented kind, never an uncaught exception."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from normprops.cli import main
from normprops.errors import FixtureError
from normprops.merge import ReportError, load_report
from normprops.regressions import load_fixture

COMMITTED = sorted((Path(__file__).parent / "regressions").glob("*/*.json"))
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)


def _paths(doc, prefix=()):
    """Every key path into a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


@st.composite
def damaged_fixture_docs(draw):
    """A committed fixture with one part deleted or replaced by arbitrary JSON."""
    doc = json.loads(draw(st.sampled_from(COMMITTED)).read_text())
    doc = copy.deepcopy(doc)
    path = draw(st.sampled_from(list(_paths(doc))))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return doc


@FUZZ
@given(blob=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fixture_loader_on_random_bytes(tmp_path_factory, blob: bytes) -> None:
    path = tmp_path_factory.mktemp("fx") / "f.json"
    path.write_bytes(blob)
    with pytest.raises(FixtureError, match="f.json"):
        load_fixture(path)


@FUZZ
@given(doc=damaged_fixture_docs())
def test_fixture_loader_on_damaged_fixtures(tmp_path_factory, doc) -> None:
    path = tmp_path_factory.mktemp("fx") / "f.json"
    path.write_text(json.dumps(doc))
    try:
        fixture = load_fixture(path)
    except FixtureError as exc:
        assert str(path) in str(exc)
    else:  # a change the loader can accept (a message, a parameter) still gives a usable case
        arrays = fixture.minimal.float_arrays()
        assert arrays and all(a.size >= 1 for a in arrays)
        # Attention's arrays are (B, H, L, D); a row op's and cross-entropy's logits (rows, cols).
        assert arrays[0].ndim == (4 if fixture.op.startswith("attention") else 2)


@pytest.mark.parametrize("dtype", [["bfloat16"], {"name": "float32"}, 5, None, "float64"])
def test_a_fixture_whose_dtype_is_not_a_type_name_is_unreadable(tmp_path, dtype) -> None:
    """A float32 fixture stores no dtype, so the fuzzing above seldom reaches the field: a list or
    an object there once raised TypeError (unhashable) through every command that lists fixtures."""
    doc = json.loads(next(p for p in COMMITTED if "bfloat16" in p.read_text()).read_text())
    doc["minimal"]["dtype"] = dtype
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FixtureError, match=r"minimal: dtype .* is not one of float32"):
        load_fixture(path)


@pytest.mark.parametrize("where, value, message", [
    ("x", "10", r"value 0 \('10'\) is not a hex float"),  # float.fromhex reads it as 16
    ("x", "abc", r"value 0 \('abc'\) is not a hex float"),  # 2748
    ("x", "0x1p+200", r"value 0 \('0x1p\+200'\) is not a float32 value \(it would be read as inf\)"),
    ("x", "0x1.0000000000001p+0", r"is not a float32 value \(it would be read as 1\.0\)"),
    ("eps", "abc", r"needs eps as a hex float such as .* not 'abc'"),
    ("eps", "0x1.0000000000001p-23", r"eps .* is not a positive finite float32 value"),
])
def test_a_hand_edited_value_is_refused_not_reread(tmp_path, where, value, message) -> None:
    """Values a hand edit could mean otherwise are unreadable, not replayed as other numbers."""
    path = next(p for p in COMMITTED if '"hex"' in p.read_text() and '"eps"' in p.read_text())
    doc = json.loads(path.read_text())
    if where == "x":
        doc["minimal"]["x"]["hex"][0] = value
    else:
        doc["minimal"]["eps"] = value
    (tmp_path / "f.json").write_text(json.dumps(doc))
    with pytest.raises(FixtureError, match=message):
        load_fixture(tmp_path / "f.json")


def _report_doc() -> dict:
    return {"format": "normprops-report/1", "command": "hunt", "targets": [], "complete": True,
            "error": None, "notes": [],
            "results": [{"target": "softmax[k]", "family": "ordinary", "passed": False,
                         "properties": ["accuracy"], "examples": 3}],
            "failures": [{"target": "softmax[k]", "family": "ordinary", "property": "accuracy"}]}


@FUZZ
@given(data=st.data())
def test_report_reader_on_garbage(tmp_path_factory, data) -> None:
    doc = _report_doc()
    path_in_doc = data.draw(st.sampled_from(list(_paths(doc))))
    parent = doc
    for key in path_in_doc[:-1]:
        parent = parent[key]
    parent[path_in_doc[-1]] = data.draw(json_values)
    path = tmp_path_factory.mktemp("rep") / "r.json"
    path.write_text(json.dumps(doc) if data.draw(st.booleans()) else json.dumps(doc)[:40])
    try:
        loaded = load_report(path)
    except ReportError as exc:
        assert str(path) in str(exc)
    else:
        assert isinstance(loaded["results"], list)


FLAGS = ["--dtype", "--framework", "--device", "--ignore", "--threads", "--call-timeout",
         "--cols-multiple-of", "--min-cols", "--max-cols", "--families", "--seed", "--policy",
         "--oracle", "--kernel", "--json", "--fixtures-dir", "--ftz", "--backend", "--op"]
VALUES = st.sampled_from(["0", "-1", "3", "1e9", "nan", "inf", "", "bfloat16", "float16", "torch",
                          "cpu", "cuda:7", "batch_invariance", "finite", "ordinary,tiny", "ragged",
                          "huge", "x" * 300, "\x00", "softmax", "rmsnorm", "dir/", ".", "/",
                          "a:b", "--", "-3.5", "65536"]) | st.text(max_size=8)


# The command line runs a (one-example) hunt, itself a Hypothesis test: nesting is intended.
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.nested_given])
@given(extra=st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), max_size=4))
def test_cli_arguments_never_escape_as_exceptions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  extra) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["hunt", "--op", "softmax", "--impl", "normprops.examples.correct:softmax_f64",
            "--families", "ordinary", "--max-examples", "1", "--no-fixtures"]
    for flag, value in extra:
        argv += [flag] if flag == "--ftz" else [flag, value]
    err = io.StringIO()
    code = main(argv, out=io.StringIO(), err=err)
    assert code in (0, 1, 2), (argv, err.getvalue())
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
