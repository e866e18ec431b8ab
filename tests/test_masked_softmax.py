"""masked_softmax, fn(x, mask, scale), end to end: the CLI and hunt_kernel on a user's kernel, its
fixtures saved and replayed, additive masks judged against their exact result, the arrays the
kernel receives, and the usage errors."""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cli_harness import run
from hypothesis import given, settings

import normprops
from normprops.case import Case
from normprops.errormodel import FOREIGN_ERROR_MODEL
from normprops.errors import UsageError
from normprops.launch import target_from_callable
from normprops.masking import SCALES, mask_fill_value
from normprops.oracles import mp_reference, reference, tolerance
from normprops.properties import evaluate
from normprops.regressions import load_fixture
from normprops.strategies import FAMILIES, Extras, cases, families_for, make_case

USER_MODULE = textwrap.dedent('''
    import numpy as np

    def _softmax64(t):
        with np.errstate(all="ignore"):
            e = np.exp(t - t.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)

    def masked_f64(x, mask, scale):
        return _softmax64(np.where(mask, scale * x.astype(np.float64), -np.inf)).astype(np.float32)

    def masked_ignores_mask(x, mask, scale):
        return _softmax64(scale * x.astype(np.float64)).astype(np.float32)

    def additive_f32(x, mask, scale):
        # As attention kernels do: the product and the sum rounded to float32.
        return _softmax64((np.float32(scale) * x + mask).astype(np.float64)).astype(np.float32)

    def additive_ignores_mask(x, mask, scale):
        return _softmax64((np.float32(scale) * x).astype(np.float64)).astype(np.float32)

    def additive_as_bool(x, mask, scale):
        # Reads any negative entry of the mask as -inf: right for -inf, not for a finite fill.
        return masked_f64(x, mask == 0, scale)
''')
MODULE = "maskedkernels_ms"


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / f"{MODULE}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _kernel(name: str):
    namespace: dict = {}
    exec(USER_MODULE, namespace)
    return namespace[name]


def _hunt(*argv: str) -> tuple[int, str, str]:
    return run("hunt", "--op", "masked_softmax", "--seed", "0", "--no-fixtures", *argv)


# --- the op end to end -----------------------------------------------------------------------------


def test_cli_hunts_a_numpy_masked_softmax(user_module: Path) -> None:
    report = user_module / "r.json"
    code, out, err = _hunt("--impl", f"{MODULE}:masked_f64", "--families", "ordinary,masked,huge",
                           "--max-examples", "60", "--json", str(report))
    assert code == 0, out + err
    target = json.loads(report.read_text())["targets"][0]
    assert (target["op"], target["mask"], target["mask_fill"]) == ("masked_softmax", "bool", None)
    code, out, err = _hunt("--impl", f"{MODULE}:masked_ignores_mask", "--families", "masked",
                           "--max-examples", "60")
    assert code == 1, out + err
    assert "masked_softmax[masked_ignores_mask] masked accuracy" in out
    assert "mask keeps" in out or "mask 0" in out or "mask 1" in out  # the failing row's mask


def test_hunt_kernel_takes_masked_softmax() -> None:
    report = normprops.hunt_kernel(_kernel("masked_f64"), op="masked_softmax",
                                   families=["masked", "overflow_logits"], max_examples=60, seed=0)
    assert report.passed, [f.message for f in report.failures]
    report = normprops.hunt_kernel(_kernel("masked_ignores_mask"), op="masked_softmax",
                                   families=["masked"], max_examples=60, seed=0)
    assert {f.property for f in report.failures} >= {"accuracy"}
    assert all("softmax_scale" in f.minimal.params and "masks" in f.minimal.params
               for f in report.failures)


def test_the_kernel_receives_a_bool_mask_and_the_scale_as_a_float() -> None:
    seen = []

    def kernel(x, mask, scale):
        seen.append((mask.dtype, mask.shape == x.shape, type(scale), bool(mask.all())))
        return _kernel("masked_f64")(x, mask, scale)

    target = target_from_callable(kernel, op="masked_softmax")
    case = make_case(op="masked_softmax", family="masked", rows=3, cols=40, seed=1,
                     extras=Extras(scale=0.125),
                     params=_masked_params(patterns=["left_pad", "causal", "none", "none"]))
    assert evaluate(target, case, metamorphic=False).passed
    assert seen == [(np.dtype(bool), True, float, False)]


def _masked_params(**changes) -> dict:
    params = {"patterns": ["left_pad", "none", "none", "none"], "thread": 0, "fraction": 0.5,
              "scale": 1.0, "pad": ((3, 0),) * 4, "window": (2, 0), "offset": 1, "block": 4,
              "period": 2, "masked_values": "large"}
    params.update(changes)
    return params


def test_draws_hand_every_family_a_mask_and_a_scale() -> None:
    masked = make_case(op="masked_softmax", family="masked", rows=2, cols=33, seed=0,
                       extras=Extras(scale=SCALES[3]), params=_masked_params())
    assert masked.mask.dtype == bool and not masked.mask[0].all()
    assert np.all(masked.x[~masked.mask] == 1e4) and np.isfinite(masked.x).all()
    assert masked.params["masks"][0] == "left_pad masks [0, 8)"
    assert masked.params["softmax_scale"] == masked.scale == float(np.float32(1 / math.sqrt(80)))
    ordinary = make_case(op="masked_softmax", family="ordinary", rows=2, cols=5, seed=0,
                         extras=Extras(scale=1e20), params={"loc": 0.0, "scale": 1.0, "spikes": []})
    assert ordinary.mask.all() and ordinary.params["masks"] == "none"
    assert ordinary.scale == float(np.float32(1e20))


# --- additive masks ----------------------------------------------------------------------------


@pytest.mark.parametrize("fill", ["-inf", "lowest", "-10000"])
def test_additive_masks_are_judged_against_the_exact_sum(user_module: Path, fill: str) -> None:
    flags = ("--mask", "additive", "--mask-fill", fill, "--families", "masked,ordinary",
             "--max-examples", "60")
    code, out, err = _hunt("--impl", f"{MODULE}:additive_f32", *flags)
    assert code == 0, out + err
    code, out, err = _hunt("--impl", f"{MODULE}:additive_ignores_mask", *flags)
    assert code == 1, out + err
    assert f"additive {mask_fill_value(fill)!r}"[:12] in out  # the convention, in the input line


def test_the_additive_mask_holds_zero_and_the_fill_in_the_storage_type() -> None:
    seen = []

    def kernel(x, mask, scale):
        seen.append((mask.dtype, sorted(set(mask.ravel().tolist()))))
        return _kernel("additive_f32")(x, mask, scale)

    target = target_from_callable(kernel, op="masked_softmax", mask="additive", mask_fill="lowest")
    case = make_case(op="masked_softmax", family="masked", rows=2, cols=16, seed=0,
                     extras=Extras(scale=1.0), params=_masked_params(), mask_fill=target.mask_fill)
    assert evaluate(target, case, metamorphic=False).passed
    assert seen == [(np.dtype(np.float32), [-float(np.finfo(np.float32).max), 0.0])]


def _one_row(x: list[float], keep: list[bool], *, fill: float | None) -> Case:
    return Case("masked_softmax", "masked", np.array([x], dtype=np.float32), scale=1.0,
                mask=np.array([keep]), mask_fill=fill)


def test_a_finite_fill_is_judged_exactly_not_forgiven() -> None:
    # exp(-20) / (3 + exp(-20)) = 6.9e-10 at the masked entry: a kernel that reads -20 as -inf
    # returns 0 there, wrong by far more than the float32 tolerance of that element.
    case = _one_row([0.0, 0.0, 0.0, 0.0], [True, True, True, False], fill=-20.0)
    found = evaluate(target_from_callable(_kernel("additive_as_bool"), op="masked_softmax",
                                          mask="additive", mask_fill=-20), case).failures
    assert [v.property for v in found][:1] == ["accuracy"] and found[0].col == 3
    assert found[0].expected == pytest.approx(math.exp(-20) / (3 + math.exp(-20)))
    assert evaluate(target_from_callable(_kernel("additive_f32"), op="masked_softmax",
                                         mask="additive", mask_fill=-20), case).passed
    with_inf = case.replace(mask_fill=-math.inf)
    assert evaluate(target_from_callable(_kernel("additive_as_bool"), op="masked_softmax",
                                         mask="additive"), with_inf).passed


def test_a_fully_masked_row_with_the_lowest_fill_may_come_out_uniform() -> None:
    # x_j + lowest rounds to lowest for every j: float32 sees a constant row. The exact result
    # (softmax(x), the constant cancels) is past what float32 can resolve there, and the tolerance
    # says so (docs/tolerances.md, "Masked softmax").
    lowest = -float(np.finfo(np.float32).max)
    case = _one_row([0.0, 1.0, 2.0, 3.0], [False] * 4, fill=lowest)
    target = target_from_callable(_kernel("additive_f32"), op="masked_softmax", mask="additive",
                                  mask_fill="lowest")
    assert np.all(target.run(case) == 0.25)
    assert evaluate(target, case).passed


# --- exact references and the bound -----------------------------------------------------------


@pytest.mark.parametrize("fill", [None, -math.inf, -10000.0, -30.0])
@pytest.mark.parametrize("scale", [0.125, SCALES[3], -0.125])
def test_float64_reference_agrees_with_mpmath(fill: float | None, scale: float) -> None:
    case = make_case(op="masked_softmax", family="masked", rows=4, cols=40, seed=3,
                     extras=Extras(scale=scale),
                     params=_masked_params(patterns=["random", "left_pad", "full", "causal"],
                                           masked_values="drawn"), mask_fill=fill)
    ref = reference(case)
    exact = mp_reference(case)
    judged = ref.judged_rows
    assert np.allclose(ref.z[judged], exact[judged], rtol=1e-12, atol=1e-300)
    assert np.array_equal(ref.masked_rows, [False, False, fill is None or math.isinf(fill), False])


def test_the_bound_adds_the_rounding_of_scale_x_only_where_it_rounds() -> None:
    params = _masked_params(patterns=["random", "none", "none", "none"], masked_values="drawn")
    exact = make_case(op="masked_softmax", family="masked", rows=2, cols=64, seed=5,
                      extras=Extras(scale=0.125), params=params)
    # A power-of-two scale rounds nothing: the bound is softmax's on the exact logits.
    logits = np.where(exact.mask, exact.x * np.float32(0.125), -np.inf).astype(np.float32)
    plain = exact.replace(op="softmax", x=logits, mask=None, scale=None)
    tol_exact = tolerance(exact, reference(exact), model=FOREIGN_ERROR_MODEL).tol
    tol_plain = tolerance(plain, reference(plain), model=FOREIGN_ERROR_MODEL).tol
    assert np.allclose(tol_exact, tol_plain, rtol=1e-12)
    # 1/sqrt(80) rounds scale * x: each kept element gains at least u |scale * x_j|, relative.
    inexact = exact.replace(scale=float(np.float32(1 / math.sqrt(80))))
    ref = reference(inexact)
    tol = tolerance(inexact, ref, model=FOREIGN_ERROR_MODEL).tol
    s = np.abs(inexact.scale * inexact.x.astype(np.float64))
    rounds = inexact.mask & (ref.y > 0) & (s.astype(np.float32) != s)
    assert rounds.sum() > 10
    assert np.all(tol[rounds] >= ref.y[rounds] * 2.0**-24 * (10 + s[rounds]))


def test_an_exact_weight_below_float64s_range_keeps_the_bound_of_its_rounded_logit() -> None:
    # scale * x = 1e25 and 7.8e17 more: closer than float32's spacing there (2^60, 1.2e18), so
    # both round to one float32 and a float32 kernel returns [1/2, 1/2]. The exact weight of the
    # second, exp(-7.8e17), underflows float64; its bound g exp(p + ln Q) does not.
    case = _one_row([100000.0078125, 100000.0], [True, True], fill=-math.inf).replace(
        scale=float(np.float32(1e20)))
    target = target_from_callable(_kernel("additive_f32"), op="masked_softmax", mask="additive")
    assert np.all(target.run(case) == 0.5)
    assert evaluate(target, case).passed


# --- fixtures ----------------------------------------------------------------------------------


def _saved_fixture(user_module: Path) -> Path:
    code, out, err = run("hunt", "--op", "masked_softmax", "--impl", f"{MODULE}:masked_ignores_mask",
                         "--families", "masked", "--max-examples", "40", "--seed", "0")
    assert code == 1, out + err
    (path,) = sorted((user_module / "normprops-fixtures" / "masked_softmax").glob("masked-*.json"))[:1]
    return path


def test_a_masked_fixture_round_trips_and_replays(user_module: Path) -> None:
    path = _saved_fixture(user_module)
    doc = json.loads(path.read_text())
    minimal = doc["minimal"]
    assert set(minimal["mask"]) <= {"shape", "rows", "packbits_base64"}
    assert float.fromhex(minimal["scale"]) in SCALES
    fixture = load_fixture(path)
    assert fixture.minimal.mask.shape == fixture.minimal.x.shape and not fixture.minimal.mask.all()
    code, out, _ = run("replay", "--op", "masked_softmax", "--impl", f"{MODULE}:masked_ignores_mask")
    assert code == 1 and "FAIL" in out
    code, out, _ = run("replay", "--op", "masked_softmax", "--impl", f"{MODULE}:masked_f64")
    assert code == 0, out
    # The same input, handed to an additive kernel as its mask convention.
    code, out, _ = run("replay", "--op", "masked_softmax", "--impl", f"{MODULE}:additive_f32",
                       "--mask", "additive", "--mask-fill", "-inf")
    assert code == 0, out


def test_a_fixture_whose_mask_has_the_wrong_shape_is_one_clear_line(user_module: Path) -> None:
    path = _saved_fixture(user_module)
    doc = json.loads(path.read_text())
    rows = doc["minimal"]["mask"]
    doc["minimal"]["mask"] = {"shape": [rows["shape"][0], rows["shape"][1] + 1],
                              "rows": ["1" * (rows["shape"][1] + 1)] * rows["shape"][0]}
    path.write_text(json.dumps(doc))
    code, out, err = run("replay", "--op", "masked_softmax", "--impl", f"{MODULE}:masked_f64")
    assert code == 3
    lines = [line for line in (out + err).splitlines() if path.name in line]
    assert len(lines) == 1 and "minimal.mask: shape" in lines[0] and "does not match x's" in lines[0]


# --- usage errors and frameworks ---------------------------------------------------------------


@pytest.mark.parametrize("flags, named", [(("--mask", "additive"), "--mask"),
                                          (("--mask", "bool"), "--mask"),
                                          (("--mask-fill", "-inf"), "--mask-fill")])
def test_a_mask_for_another_op_is_a_usage_error(user_module: Path, flags: tuple[str, ...],
                                                named: str) -> None:
    (user_module / "plain_ms.py").write_text("def softmax(x):\n    return x\n")
    code, out, err = run("hunt", "--op", "softmax", "--impl", "plain_ms:softmax", *flags)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and named in err and "masked_softmax" in err
    with pytest.raises(UsageError, match="mask"):
        normprops.hunt_kernel(lambda x: x, op="softmax", mask="additive")


@pytest.mark.parametrize("fill", ["0", "nan", "+inf", "big"])
def test_a_bad_fill_is_a_usage_error(user_module: Path, fill: str) -> None:
    code, _, err = _hunt("--impl", f"{MODULE}:additive_f32", "--mask", "additive", "--mask-fill", fill)
    assert code == 2 and "--mask-fill" in err and repr(fill) in err


def test_a_fill_without_an_additive_mask_is_a_usage_error(user_module: Path) -> None:
    code, _, err = _hunt("--impl", f"{MODULE}:masked_f64", "--mask-fill", "-inf")
    assert code == 2 and "--mask additive" in err


def test_a_cut_counterexample_describes_the_masks_of_the_rows_it_kept() -> None:
    """Rows cut from a masked counterexample take their masks' descriptions with them: only row 4
    of 5 is wrong, so rows 0 and 4 are kept (the family draws at least 2), and ``masks`` names
    those two rows' masks, in that order, not the five drawn."""
    from dataclasses import replace

    from normprops.hunt import HuntConfig, hunt

    params = _masked_params(patterns=["left_pad", "causal", "none", "none"], masked_values="drawn")
    drawn = make_case(op="masked_softmax", family="masked", rows=5, cols=9, seed=3, params=params)
    x_last = drawn.x[4].copy()

    def kernel(x, mask, scale):
        out = _kernel("masked_f64")(x, mask, scale)
        wrong = (x == x_last).all(axis=1)
        out[wrong] = out[wrong][:, ::-1]  # the last drawn row's probabilities reversed
        return out

    target = replace(target_from_callable(kernel, op="masked_softmax"), examples=(drawn,))
    finding = hunt(target, family="masked", config=HuntConfig(max_examples=1, seed=0)).findings[0]
    kept = finding.minimal.params["rows_kept"]
    assert finding.minimal.rows == 2 and kept == [0, 4]
    assert finding.minimal.params["masks"] == [drawn.params["masks"][r] for r in kept]
    assert len(drawn.params["masks"]) == 5


def test_torch_cpu_tensors_take_a_bool_mask() -> None:
    torch = pytest.importorskip("torch", reason="torch is not importable here")

    def kernel(x, mask, scale):
        assert mask.dtype == torch.bool and mask.device == x.device
        return torch.softmax((x * scale).masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)

    report = normprops.hunt_kernel(kernel, op="masked_softmax", framework="torch", device="cpu",
                                   families=["masked", "ordinary"], max_examples=40, seed=0)
    assert report.passed, [f.message for f in report.failures]


@pytest.mark.parametrize("name", ["masked_fill_softmax", "torch_masked_softmax"])
def test_torch_masked_softmaxes_take_the_ops_arguments(name: str) -> None:
    pytest.importorskip("torch", reason="torch is not importable here")
    from normprops.backends import torch_masked

    report = normprops.hunt_kernel(getattr(torch_masked, name), op="masked_softmax",
                                   framework="torch", device="cpu", families=["masked", "ordinary"],
                                   max_examples=40, seed=0)
    assert report.passed, [f.message for f in report.failures]


def test_torch_masked_softmax_names_the_elementwise_mask_type(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch", reason="torch is not importable here")
    from normprops.backends import torch_masked

    real, seen = torch._masked_softmax, []

    def as_on_cuda(x, mask, dim=None, mask_type=None):
        seen.append(mask_type)
        if mask_type is None:  # PyTorch's CUDA kernel refuses it; the CPU one assumes type 2
            raise RuntimeError("Mask Type should be defined")
        return real(x, mask, dim, mask_type)

    monkeypatch.setattr(torch, "_masked_softmax", as_on_cuda)
    x = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]])
    mask = torch.tensor([[True, False, True], [True, True, True]])
    y = torch_masked.torch_masked_softmax(x, mask, 0.5)
    assert seen == [2]
    assert torch.allclose(y, torch_masked.masked_fill_softmax(x, mask, 0.5))


#: The registry's masked softmaxes: (backend, name) -> the function its entry calls.
TORCH_MASKED_ENTRIES = {
    (f"torch-{device}", f"{name}-{dtype}"): attr
    for device, dtypes in (("cuda", ("f32", "bf16")), ("cpu", ("f32",)))
    for dtype in dtypes
    for name, attr in (("masked_fill+softmax", "masked_fill_softmax"),
                       ("torch._masked_softmax", "torch_masked_softmax"))
}


def test_the_registry_holds_pytorchs_masked_softmaxes() -> None:
    from normprops.backends import torch_masked
    from normprops.kernelspec import BACKEND_MODULES
    from normprops.specs import KERNELS

    entries = {(k.backend, k.name): k for k in KERNELS
               if k.op == "masked_softmax" and k.backend.startswith("torch-")}
    assert entries.keys() == TORCH_MASKED_ENTRIES.keys()
    for (backend, name), spec in entries.items():
        device = backend.removeprefix("torch-")
        assert (spec.framework, spec.device) == ("torch", device), name
        assert spec.entry.startswith(f"{BACKEND_MODULES[backend]}:") and spec.entry.endswith(f"_{device}")
        assert spec.load() is getattr(torch_masked, TORCH_MASKED_ENTRIES[backend, name]), name
        assert spec.dtype == {"f32": "float32", "bf16": "bfloat16"}[name.rsplit("-", 1)[1]]
        # scale * x formed in float32 overflows on those families' largest logits: not claimed.
        assert spec.claims == set(families_for("masked_softmax")) - {"overflow_logits", "huge",
                                                                     "long_rows"}, name
        assert spec.exempt == ({"batch_invariance"} if device == "cuda" else set()), name
        assert not spec.bugs and not spec.bench


def test_a_registry_hunt_of_the_cpu_masked_softmaxes_is_as_declared(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not importable here")
    report = tmp_path / "r.json"
    code, out, err = run("hunt", "--backend", "torch-cpu", "--op", "masked_softmax", "--families",
                         "masked,huge", "--max-examples", "20", "--seed", "0", "--no-fixtures",
                         "--json", str(report))
    assert code == 0, out + err
    assert "every kernel behaved as its registry entry declares" in out
    doc = json.loads(report.read_text())
    cells = {(r["kernel"], r["family"]): r for r in doc["results"]}
    assert cells.keys() == {(name, family) for backend, name in TORCH_MASKED_ENTRIES
                            if backend == "torch-cpu" for family in ("masked", "huge")}
    for (name, family), cell in cells.items():
        assert cell["expected"] == ("claim" if family == "masked" else "unclaimed"), (name, family)
        assert cell["passed"] or family == "huge", (name, family)
        # What huge finds is information: scale * x overflows float32 before the max is subtracted.
        assert set(cell["properties"]) <= {"range_safety"}, (name, family)


def test_a_registry_hunt_of_an_op_no_entry_computes_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from normprops.cli import hunt as cli_hunt

    kept = tuple(k for k in cli_hunt.KERNELS if not (k.backend == "numpy" and k.op == "masked_softmax"))
    monkeypatch.setattr(cli_hunt, "KERNELS", kept)
    code, out, err = run("hunt", "--op", "masked_softmax", "--backend", "numpy", "--no-fixtures")
    assert code == 2 and out == ""
    assert "no registered numpy kernel computes it" in err and "--impl" in err


@pytest.mark.parametrize("family", families_for("masked_softmax"))
def test_every_family_keeps_its_promise_with_a_mask_and_a_scale(family: str) -> None:
    @settings(max_examples=30, deadline=None, database=None)
    @given(cases(op="masked_softmax", family=family, mask_fill=-10000.0))
    def check(case: Case) -> None:
        assert case.mask.dtype == bool and case.mask.shape == case.x.shape
        assert case.scale in SCALES and case.mask_fill == -10000.0
        assert case.mask.all() or family == "masked"
        assert FAMILIES[family].promise(case), f"{family} broke its promise: {case!r}"
        assert case.args()[1].dtype == np.float32  # the additive mask the kernel receives

    check()


def test_assert_robust_names_the_replay_of_an_additive_kernel(user_module: Path) -> None:
    import importlib

    kernel = importlib.import_module(MODULE).additive_ignores_mask
    with pytest.raises(AssertionError) as caught:
        normprops.assert_robust(kernel, op="masked_softmax", mask="additive", mask_fill="lowest",
                                families=["masked"], max_examples=40, seed=0,
                                fixtures_dir=user_module / "fx")
    replay = caught.value.args[0].splitlines()[-1]
    # Where the module was imported from (this test's folder, or an earlier test's, whose import
    # is kept): a folder other than the current one is named for the command to import it from.
    root = Path(kernel.__code__.co_filename).resolve().parent
    keep = ":$PYTHONPATH" if os.environ.get("PYTHONPATH") else ""  # the user's own, kept behind it
    where = "" if root == Path.cwd().resolve() else f"PYTHONPATH={os.path.relpath(root)}{keep} "
    prefix = f"replay: {where}normprops "
    assert replay.startswith(prefix + "replay --op masked_softmax"), replay
    assert replay.endswith(f"--mask additive --mask-fill {-float(np.finfo(np.float32).max)!r}")
    code, out, _ = run(*replay.removeprefix(prefix).split())
    assert code == 1 and "FAIL" in out


@pytest.mark.parametrize("fill, dtype", [("-1e-50", "float32"), ("-1e-10", "float16")])
def test_a_fill_that_rounds_to_zero_in_the_storage_type_is_a_usage_error(fill: str, dtype: str) -> None:
    """-1e-50 is -0 in float32 (and -1e-10 in float16): an additive mask of it masks nothing, and
    its fixtures could not be read back."""
    from normprops.masking import mask_fill_value

    with pytest.raises(ValueError, match=f"rounds to -0.0 in {dtype}"):
        mask_fill_value(fill, dtype=dtype)
    assert mask_fill_value("-1e-30", dtype="float32") < 0


def test_the_option_after_mask_fill_is_not_taken_for_its_value(user_module: Path) -> None:
    code, _, err = _hunt("--impl", f"{MODULE}:additive_f32", "--mask", "additive", "--mask-fill",
                         "--max-examples", "5")
    assert code == 2 and "--mask-fill" in err and "expected one argument" in err


def test_the_hunt_prints_the_replay_command_with_its_mask_flags(user_module: Path, tmp_path: Path) -> None:
    """A hunt that saved fixtures prints the whole replay command, the additive mask and its fill
    among its flags; run as printed, it finds the bug again."""
    fx = tmp_path / "fx"
    code, out, _ = run("hunt", "--op", "masked_softmax", "--seed", "0", "--impl",
                       f"{MODULE}:additive_ignores_mask", "--mask", "additive", "--mask-fill", "-10000",
                       "--families", "masked", "--max-examples", "30", "--fixtures-dir", str(fx))
    assert code == 1
    command = out.split("replay with: ", 1)[1].splitlines()[0]
    assert command == (f"normprops replay --op masked_softmax --impl {MODULE}:additive_ignores_mask "
                       f"--fixtures-dir {fx} --mask additive --mask-fill -10000.0")
    code, out, err = run(*command.split()[1:])
    assert code == 1 and "failed" in out, out + err
