"""Each term of attention's bound is needed: a correct example kernel passes the full bound on a
small case and fails the bound without that term (docs/tolerances.md, "Attention", "The bound").

A term no correct kernel can need is named in :data:`UNWITNESSED` with the reason, so that a term
added to the bound without a witness fails :func:`test_every_term_has_a_witness_or_a_reason`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from normprops.examples.attention_kernels import CORRECT
from normprops.ops.attention_math import (
    BOUND_TERMS,
    AttentionCase,
    attention_reference,
    attention_tolerance,
    judge_attention,
)

F32 = np.float32
U = 2.0**-24


def _case(q, k, v, *, scale: float = 1.0, dtype: str = "float32") -> AttentionCase:
    """One batch element and head: q (Lq, D), k (Lk, D), v (Lk, Dv)."""
    q = np.asarray(q, F32)
    k = np.asarray(k, F32).reshape(-1, q.shape[-1])
    v = np.asarray(v, F32).reshape(k.shape[0], -1)
    return AttentionCase(q[None, None], k[None, None], v[None, None], None, scale, dtype=dtype,
                         family="explicit")


def _cancelling_products() -> AttentionCase:
    """(a) Products of 1e4 that cancel to scores of a few units: a kernel that rounds each product
    to float32 moves every score by about u 1e4, far past the softmax's own u |s_j - m|, and the
    lse by as much (lse itself is a few units, so its rounding terms are small)."""
    rng = np.random.default_rng(1)
    x = rng.uniform(8, 16, 8).astype(F32)
    y = (x + rng.uniform(-4e-3, 4e-3, 8)).astype(F32)
    return _case([[1000.0, 1000.0]], np.stack([x, -y], axis=-1), rng.standard_normal((8, 2)))


def _dropped_sum_terms() -> AttentionCase:
    """(b) One key of weight 1 and 63 of weight 0.99 u each: a plain float32 loop adds each small
    weight below half an ulp of the running sum S, so all are lost (S too small by 62 u), and with
    values -1/2 the P.V sum loses each of its terms too (too large by 31 u). The output is off by
    about 1.5 k(Lk) u, more than the P.V term's (k(Lk) + 1) u alone: the softmax's rho k(Lk) u is
    what holds the row sum's error."""
    small = float(F32(math.log(0.99 * U)))  # exp(small) just under 2^-24
    return _case([[1.0]], [[0.0]] + [[small]] * 63, [[1.0]] + [[-0.5]] * 63)


def _one_weight_below_one() -> AttentionCase:
    """(b) Weights exp(0) and exp(-0.3): 0.741 is 0.35 of a bfloat16 ulp from its neighbours, so P
    rounded to bfloat16 moves the output by 1.8e-3 relatively, against float32's 1e-7."""
    return _case([[1.0]], [[0.0], [-0.3]], [[0.0], [1.0]])


def _subnormal_float16_weight() -> AttentionCase:
    """A key 13.96 below the other: its weight exp(-13.96) is 14.52 units of float16's subnormal
    step 2^-24, rounded to 15 when P is rounded to float16, off by 0.48 of a unit (2.9e-8, 3.3%
    of the weight, against u_P = 2^-11); its value 1e4 turns that into 2.9e-4 in out (8.7e-3)."""
    return _case([[1.0]], [[0.0], [-13.96]], [[0.0], [1e4]])


def _midpoint(dtype: str, low: float, high: float) -> AttentionCase:
    """(e) Two keys of equal score: out = (v0 + v1) / 2, exact in float32, halfway between two
    values of ``dtype``, so its rounding to ``dtype`` errs by half a unit there."""
    return _case([[1.0]], [[0.0], [0.0]], [[low], [high]], dtype=dtype)


def _subnormal_weight() -> AttentionCase:
    """A key 100 below the max: exp(-100) = 3.7e-44 is a float32 subnormal, 26.55 units of 2^-149,
    rounded by 0.45 of one; its value 1e30 turns that into 6e-16 in out, where every relative term
    of the bound is about 1e-18."""
    return _case([[1.0]], [[0.0], [-100.0]], [[0.0], [1e30]])


def _small_lse_case() -> AttentionCase:
    """Small scores (q of size 1e-2): lse is ln 3 plus a little, its error that of ln and of the
    addition to m, where the scores' ln Q is a few u times 1e-2."""
    rng = np.random.default_rng(0)
    return _case(rng.standard_normal((4, 8)) * 0.01, rng.standard_normal((3, 8)), rng.standard_normal((3, 4)),
                 scale=float(F32(8**-0.5)))


@dataclass(frozen=True)
class Witness:
    """A correct kernel and a case it passes only with ``term`` in the bound."""

    term: str
    kernel: str
    case: Callable[[], AttentionCase]


WITNESSES = (
    Witness("scores", "attention_scores_first", _cancelling_products),
    Witness("lse_scores", "attention_scores_first", _cancelling_products),
    Witness("softmax", "attention_scores_first", _dropped_sum_terms),
    Witness("p_rounding", "attention_online_p_bf16", _one_weight_below_one),
    Witness("p_floor", "attention_online_p_f16", _subnormal_float16_weight),
    # bfloat16: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7, and ties to 1.
    Witness("output", "attention_two_pass", lambda: _midpoint("bfloat16", 1.0, 1.0 + 2.0**-7)),
    # float16 subnormals: 1.5 units of 2^-24 rounds to 2 units, off by 2^-25 where |out| u_d is 4e-11.
    Witness("tiny", "attention_two_pass", lambda: _midpoint("float16", 3 * 2.0**-24, 0.0)),
    Witness("underflow", "attention_two_pass", _subnormal_weight),
    # float32 subnormals: 1.5 units of 2^-149 rounds to 2 units, off by 2^-150.
    Witness("flt_min", "attention_two_pass", lambda: _midpoint("float32", 3 * 2.0**-149, 0.0)),
    Witness("lse_rounding", "attention_two_pass", _small_lse_case),
)

#: Terms no correct kernel needs as the bound stands, and why (docs/tolerances.md, "Attention").
UNWITNESSED = {
    "pv_sum": "sum_j p_j eps_j |v_jc| holds r_j's rho k(Lk) u = 6 k(Lk) u of the same sum_j p_j |v_jc|, "
              "past the row sum's and the P.V sum's errors together (at most 4 k(Lk) + 2 u, online)",
    "online": "the same: the online rescaling's extra k(Lk) u lies inside rho k(Lk) u",
}


def _verdicts(witness: Witness):
    kernel = CORRECT[witness.kernel]
    case = witness.case()
    out, lse = kernel.func(*case.inputs())
    ref = attention_reference(case.q, case.k, case.v, case.mask, case.scale)
    judged = []
    for drop in (frozenset(), frozenset({witness.term})):
        tol = attention_tolerance(ref, dtype=case.dtype, declaration=kernel.declaration, drop=drop)
        judged.append(judge_attention(np.asarray(out), lse, ref, tol,
                                      empty_row=kernel.declaration.empty_row))
    return case, judged


@pytest.mark.parametrize("witness", [pytest.param(w, id=w.term) for w in WITNESSES])
def test_a_correct_kernel_needs_the_term(witness: Witness) -> None:
    case, (full, dropped) = _verdicts(witness)
    assert full.ok, f"{witness.kernel} fails the full bound: {full.reason} [{case!r}]"
    assert not dropped.ok, (f"{witness.kernel} passes the bound without {witness.term!r} (worst "
                            f"{dropped.ratio:.3g} at {dropped.where}): not needed here [{case!r}]")


def test_every_term_has_a_witness_or_a_reason() -> None:
    witnessed = {w.term for w in WITNESSES}
    assert not witnessed & set(UNWITNESSED), f"both witnessed and excused: {witnessed & set(UNWITNESSED)}"
    missing = set(BOUND_TERMS) - witnessed - set(UNWITNESSED)
    assert not missing, f"bound terms without a witness or a reason: {sorted(missing)}"


@pytest.mark.parametrize("drop", [pytest.param(frozenset({"scale"}), id="unknown-term"),
                                  pytest.param({"scores"}, id="a-set")])
def test_a_bad_drop_is_named(drop) -> None:
    ref = attention_reference(*_small_lse_case().args())
    with pytest.raises(ValueError, match="drop must be a frozenset of scores, softmax"):
        attention_tolerance(ref, drop=drop)


@pytest.mark.parametrize("term", ["pv_sum", "online"])
def test_an_excused_term_is_covered_by_rho(term: str) -> None:
    """Why the excused terms have no witness: on the witnesses' cases and every online kernel, the
    bound without them still exceeds the errors their derivation charges (the row sum's and the
    P.V sum's, each k_PV u sum_j p_j |v_jc|), through r_j's rho k(Lk)."""
    for witness in WITNESSES:
        case = witness.case()
        ref = attention_reference(*case.args())
        for name in ("attention_online", "attention_scores_first"):
            declaration = CORRECT[name].declaration
            model = declaration.model
            k_l = model.k(ref.keys)
            charged = (2 * (2 * k_l if declaration.online else k_l) + 2) * model.unit_roundoff * ref.abs_pv
            without = attention_tolerance(ref, dtype=case.dtype, declaration=declaration,
                                          drop=frozenset({term}))
            full = ~np.isnan(without.out)
            assert np.all(without.out[full] >= charged[full]), (
                f"{name}: the bound without {term!r} is below the sums' own errors [{case!r}]")
