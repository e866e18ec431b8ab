"""The kernel's declaration: checked once, and the same value after a trip through a report's
JSON and the replay command's flags."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normprops.case import ShapeConstraints
from normprops.declaration import Declaration
from normprops.errors import UsageError
from normprops.flags import spelled
from normprops.kernelspec import KernelSpec

ROUND_TRIPS = [
    pytest.param({"op": "softmax"}, id="softmax-defaults"),
    pytest.param({"op": "layernorm", "variance": "one_pass", "opt_in": ("exact_constant",),
                  "dtype": "bfloat16", "arithmetic": "bfloat16", "ftz": True}, id="layernorm-declared"),
    pytest.param({"op": "rmsnorm_backward", "row_reduction": "blocks", "threads": 64,
                  "reduction": "tree", "call_timeout": 5.0}, id="gradient-blocks"),
    pytest.param({"op": "masked_softmax", "mask": "additive", "mask_fill": "lowest",
                  "ignore": ("batch_invariance",)}, id="additive-mask"),
    pytest.param({"op": "masked_softmax", "mask": "additive"}, id="additive-mask-inf"),
    pytest.param({"op": "softmax", "constraints": ShapeConstraints(cols_multiple_of=8, min_cols=16,
                                                                   max_cols=4096)}, id="widths"),
]


@pytest.mark.parametrize("keywords", ROUND_TRIPS)
def test_json_gives_back_the_declaration(keywords: dict) -> None:
    declared = Declaration.declare(**keywords)
    assert Declaration.from_json(declared.to_json()) == declared


@pytest.mark.parametrize("keywords", ROUND_TRIPS)
def test_flags_name_what_differs_from_the_defaults(keywords: dict) -> None:
    declared = Declaration.declare(**keywords)
    flags = declared.to_flags()
    for name, value in keywords.items():
        if name in ("op", "constraints", "mask"):
            continue
        assert spelled(name).split()[0] in flags, f"{name}={value!r} missing from {flags!r}"
    assert Declaration.declare(op=keywords["op"]).to_flags() == ""


def test_flags_of_a_policy_and_a_fill() -> None:
    declared = Declaration.declare(op="masked_softmax", mask="additive", ftz=True)
    assert declared.to_flags(policy="table") == " --mask additive --mask-fill -inf --policy table --ftz"


BAD = [
    pytest.param({"op": "softmax", "variance": "one_pass"},
                 "--variance (variance=) applies to --op layernorm and layernorm_backward only",
                 id="variance-on-softmax"),
    pytest.param({"op": "layernorm", "variance": "three_pass"}, "must be one of two_pass, one_pass",
                 id="unknown-variance"),
    pytest.param({"op": "softmax", "arithmetic": "bfloat16"}, "add --dtype bfloat16", id="bf16-on-f32"),
    pytest.param({"op": "softmax", "row_reduction": "tree"}, "applies to the gradient ops only",
                 id="row-reduction-forward"),
    pytest.param({"op": "softmax", "opt_in": ("exact_constant",)}, "applies to layernorm and rmsnorm",
                 id="exact-constant-softmax"),
    pytest.param({"op": "masked_softmax", "ignore": ("range_safety",), "opt_in": ("range_safety",)},
                 "both ignored and checked", id="ignored-and-checked"),
    pytest.param({"op": "softmax", "mask": "additive"}, "takes no mask", id="mask-without-mask"),
    pytest.param({"op": "masked_softmax", "mask_fill": -1.0}, "needs --mask additive",
                 id="fill-on-bool"),
    pytest.param({"op": "softmax", "threads": 0}, "threads must be a positive integer but was 0",
                 id="no-threads"),
    pytest.param({"op": "softmax", "call_timeout": -1}, "must be a positive number of seconds",
                 id="negative-timeout"),
    pytest.param({"op": "nosuch"}, "nosuch", id="unknown-op"),
]


@pytest.mark.parametrize(("keywords", "message"), BAD)
def test_a_bad_declaration_names_the_argument(keywords: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Declaration.declare(**keywords)


def test_an_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="varience"):
        Declaration.declare(op="layernorm", varience="one_pass")


def test_a_registry_entry_declares_its_row_reduction_in_its_model() -> None:
    from normprops.errormodel import ErrorModel

    spec = KernelSpec("k", "rmsnorm_backward", "numpy", "m:f", 4, ErrorModel(threads=128),
                      frozenset(), "a gradient", row_reduction="sequential")
    declared = Declaration.from_spec(spec)
    assert declared.error_model.row_reduction == declared.row_reduction == "sequential"
    assert declared.error_model.threads == 128 and declared.opt_in == {"range_safety"}
    assert replace(spec, row_reduction="tree").error_model.row_reduction == "tree"
