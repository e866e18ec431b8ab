"""The planted bugs of :mod:`normprops.examples.planted`: for each function, the input family
expected to expose it and, when one property shows it, that property; other families may catch the
same bug.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PLANTED", "Planted"]


@dataclass(frozen=True)
class Planted:
    """One planted-bug implementation and the family expected to catch it; ``opt_in`` names the
    optional properties (``Target.opt_in``) the catch needs."""

    op: str
    func: str
    family: str
    bug: str
    property: str | None = None
    opt_in: frozenset[str] = frozenset()


PLANTED: tuple[Planted, ...] = (
    Planted("softmax", "softmax_no_shift", "overflow_logits", "exp without max subtraction overflows"),
    Planted("layernorm", "layernorm_one_pass", "large_mean", "one-pass E[x^2]-E[x]^2 variance cancels"),
    Planted("rmsnorm", "rmsnorm_eps_outside", "eps_scale", "eps added outside the sqrt"),
    Planted("layernorm", "layernorm_unbiased", "ordinary", "variance divided by cols-1"),
    Planted("rmsnorm", "rmsnorm_dropped_tail", "ragged", "vectorised reduction drops cols % 4 tail"),
    Planted("softmax", "softmax_partial_max", "overflow_logits", "row max over first 1024 columns only"),
    Planted("rmsnorm", "rmsnorm_fp16_accum", "ordinary", "sum of squares accumulated in float16"),
    Planted("softmax", "softmax_coarse_exp", "ordinary", "cubic exp2 approximation, ~1e-4 error"),
    Planted("rmsnorm", "rmsnorm_coarse_rsqrt", "ordinary", "bit-hack rsqrt with one Newton step"),
    Planted("rmsnorm", "rmsnorm_batch_scale", "nonfinite", "prescale by whole-batch max leaks across rows"),
    Planted("softmax", "softmax_batch_dependent", "ordinary", "sum order depends on batch size",
            "batch_invariance"),
    # Random per call: shows as determinism or, by chance, as batch_invariance; no single property.
    Planted("layernorm", "layernorm_nondeterministic", "ordinary", "random reduction order per call"),
    Planted("softmax", "softmax_masked_chunk_nan", "masked", "fully masked thread share gives NaN merge"),
    Planted("softmax", "softmax_leading_block_nan", "masked",
            "split-row merge starts from block 0 unchecked: NaN when block 0 is all -inf", "finite"),
    Planted("masked_softmax", "masked_softmax_leading_chunk_nan", "masked",
            "online merge starts from chunk 0 unchecked: NaN when chunk 0 keeps nothing", "finite"),
    Planted("rmsnorm", "rmsnorm_square_overflow", "huge", "x*x overflows without prescaling",
            "range_safety", opt_in=frozenset({"range_safety"})),
    Planted("rmsnorm", "rmsnorm_unscaled_eps", "eps_scale", "eps not rescaled with the prescaled row"),
    Planted("rmsnorm", "rmsnorm_reciprocal_scale", "tiny", "1/max|x| overflows for subnormal rows"),
    Planted("layernorm", "layernorm_no_eps", "constant", "eps forgotten, zero variance gives NaN"),
    Planted("softmax", "softmax_mean_shift", "wide_span", "shift by row mean instead of max"),
    Planted("softmax", "softmax_exp_error", "ordinary", "exp with 1e-6 relative error", "ratios"),
    Planted("softmax", "softmax_wide_exp_error", "ordinary",
            "exp with 1e-5 relative error on rows wider than 2048", "ratios"),
    Planted("rmsnorm", "rmsnorm_flush_inputs", "tiny", "subnormal inputs flushed to zero", "accuracy"),
    Planted("layernorm", "layernorm_flush_inputs", "tiny", "subnormal inputs flushed to zero",
            "accuracy"),
    Planted("layernorm", "layernorm_textbook", "constant", "constant rows give +-gamma, not beta",
            "exact_constant", opt_in=frozenset({"exact_constant"})),
)
