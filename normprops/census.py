"""``normprops census``: worked numbers, printed from the kernels themselves.

The eight values against the PyTorch RMSNorm formula, with both eps conventions (1e-5, and
eps=None, i.e. float32's machine epsilon). Then a softmax row spanning 200 in logit space, its
results counted as normal, subnormal and zero, for the default and the flush-to-zero build, beside
the exact census from the float64 reference. Then the deliberate overflow row: the naive kernel's
non-finite count and the safe kernel's row sum and its error.
"""

from __future__ import annotations

from typing import Callable, TextIO

import numpy as np

from normprops.case import Case
from normprops.ops import FLOAT32_EPS
from normprops.oracles import FLT_MIN, reference
from normprops.specs import KERNELS

__all__ = ["census", "classify"]

F32 = np.float32
EIGHT = np.array([[-1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 1.75, 2.25]], F32)
SPAN_ROW = np.linspace(0.0, -200.0, 1024, dtype=np.float64).astype(F32)[None, :]
OVERFLOW_ROW = np.linspace(-10.0, 120.0, 1024, dtype=np.float64).astype(F32)[None, :]


def classify(values: np.ndarray) -> dict[str, int]:
    """Counts of float32 results (or exact values, rounded as float32 would round them)."""
    v = np.abs(values.astype(np.float64))
    smallest = 2.0**-149
    return {"normal": int(np.sum(v >= FLT_MIN)),
            "subnormal": int(np.sum((v < FLT_MIN) & (v >= smallest / 2))),
            "zero": int(np.sum(v < smallest / 2))}


def _kernel(backend: str, name: str, build: str = "default") -> Callable[..., np.ndarray] | None:
    spec = next((k for k in KERNELS if k.backend == backend and k.name == name), None)
    if spec is None:
        return None
    fn = spec.load()
    if build == "default":
        return fn
    if backend != "cuda":
        return None
    return lambda *args: fn(*args, build=build)


def census(*, backend: str, out: TextIO) -> None:
    print(f"normprops census on the {backend} backend", file=out)

    print("\nthe eight values: RMS norm, x / sqrt(mean(x^2) + eps), gamma = 1", file=out)
    rms = _kernel(backend, "rmsNormRow")
    gamma = np.ones(8, F32)
    print("  x        " + " ".join(f"{v:9.4f}" for v in EIGHT[0]), file=out)
    for label, eps in (("eps=1e-5", 1e-5), ("eps=None", FLOAT32_EPS)):
        eps32 = float(F32(eps))
        exact = reference(Case("rmsnorm", "ordinary", EIGHT, gamma, None, eps32)).z[0]
        got = rms(EIGHT, gamma, eps32)[0]
        print(f"  {label:8s} " + " ".join(f"{v:9.6f}" for v in got)
              + f"   max |err| vs float64 {np.max(np.abs(got - exact)):.2e}", file=out)
    a = reference(Case("rmsnorm", "ordinary", EIGHT, gamma, None, float(F32(1e-5)))).z[0]
    b = reference(Case("rmsnorm", "ordinary", EIGHT, gamma, None, float(F32(FLOAT32_EPS)))).z[0]
    print(f"  the two eps conventions differ by up to {np.max(np.abs(a - b)):.2e} "
          f"(relative {np.max(np.abs(a - b) / np.abs(b)):.1e})", file=out)

    print("\nthe wide row: softmax of a row spanning 200 in logit space (1024 columns, 0 down to -200)",
          file=out)
    exact = reference(Case("softmax", "wide_span", SPAN_ROW)).z[0]
    rows = [("exact (float64)", exact)]
    for build in ("default", "ftz"):
        fn = _kernel(backend, "softmaxRowSafe", build)
        if fn is not None:
            rows.append((f"softmaxRowSafe {build}", fn(SPAN_ROW)[0]))
    for label, values in rows:
        c = classify(values)
        print(f"  {label:24s} normal {c['normal']:5d}  subnormal {c['subnormal']:5d}  zero {c['zero']:5d}",
              file=out)
    if backend != "cuda":
        print("  (ftz build: GPU only)", file=out)

    print("\nthe deliberate overflow row (1024 logits from -10 up to 120)", file=out)
    naive = _kernel(backend, "softmaxRowNaive")(OVERFLOW_ROW)[0]
    safe = _kernel(backend, "softmaxRowSafe")(OVERFLOW_ROW)[0]
    total = float(np.sum(safe.astype(np.float64)))
    exact = reference(Case("softmax", "overflow_logits", OVERFLOW_ROW)).z[0]
    print(f"  softmaxRowNaive: {int(np.sum(~np.isfinite(naive)))} non-finite outputs of 1024", file=out)
    print(f"  softmaxRowSafe:  {int(np.sum(~np.isfinite(safe)))} non-finite; row sum {total:.9f} "
          f"(|sum - 1| = {abs(total - 1):.2e}); max |err| vs float64 "
          f"{np.max(np.abs(safe - exact)):.2e}", file=out)
