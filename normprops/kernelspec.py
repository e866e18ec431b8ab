"""What a registry entry says about a kernel: its op, backend and entry point, how its reduction is
shaped, which families it claims, and the bugs it is known to have. The entries themselves live
beside each backend's code; :mod:`normprops.specs` joins them."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from normprops.case import ShapeConstraints
from normprops.errormodel import ErrorModel

__all__ = ["KnownBug", "KernelSpec", "SOFTMAX_FAMILIES", "NORM_FAMILIES", "BACKEND_MODULES",
           "for_backend"]

@dataclass(frozen=True)
class KnownBug:
    """The bug a kept-bad kernel demonstrates, the family that must catch it, and (when one property
    shows it) that property."""

    family: str
    summary: str
    property: str | None = None
    # "hunt": a hunt of the family catches it within the ci profile's 100 examples, whatever the
    # seed (docs/registry.md, "Examples to catch", measures it; ``example`` makes sure of it where
    # draws need luck);
    # "racecheck": a race the hunt may never see on a given GPU, caught by compute-sanitizer
    # --tool racecheck (tests/test_gpu.py).
    detector: str = "hunt"
    # The narrowest rows that show it: a shrunk counterexample is expected within twice this (or
    # 64 columns), on at most three rows.
    shows_from_cols: int = 1
    # A fixture in normprops/known/ whose minimal input shows the bug: a registry hunt of the
    # family tries it first (a Hypothesis explicit example), so a bug that random draws reach only
    # with luck (a wide row of one shape, an error just past the bound) is met by every hunt.
    example: str | None = None


@dataclass(frozen=True)
class KernelSpec:
    name: str
    op: str
    backend: str
    entry: str  # "module:attribute", imported only when the kernel is run
    touches: int  # row touches: reads + writes of the row, counting re-reads
    error_model: ErrorModel
    claims: frozenset[str]
    summary: str
    # Known bugs, each in the family that shows it: our kept-bad kernels', and what the hunt found
    # in other projects' kernels (docs/ecosystem.md). A family with a known bug is hunted for it
    # (it must still be caught), not as a claim.
    bugs: tuple[KnownBug, ...] = ()
    # Properties the kernel does not promise on its claimed families (a known bug in them is
    # hunted separately, as a bug): e.g. PyTorch's CUDA softmax is not batch-invariant.
    exempt: frozenset[str] = frozenset()
    bench: bool = True  # a row of the bandwidth table (normprops bench) on the GPU
    dtype: str = "float32"  # storage type it reads and writes (arithmetic is float32 throughout)
    # The arrays the entry point takes: "numpy" (float32 values exact in ``dtype``, whatever the
    # storage type: our launchers convert) or a framework's own ("torch", "jax") in ``dtype``.
    framework: str = "numpy"
    # For a framework's arrays: where they live (None: its default). "cuda": the entry needs a
    # CUDA GPU its framework sees, and where there is none it is not usable here, skipped rather than
    # failed (normprops.specs.kernel_status), even on a backend that runs without one (jax).
    device: str | None = None
    # Modules the entry point imports beyond its backend's (optax, on the jax backend): where one is
    # missing the entry is not usable here, skipped rather than failed (normprops.specs.kernel_status).
    imports: tuple[str, ...] = ()
    constraints: ShapeConstraints = ShapeConstraints()  # the widths its claims are hunted at
    # The widths its known bugs are hunted at, where a bug of its own takes some widths away from
    # the claims (QuACK's bfloat16 norms at odd widths); None: the same as ``constraints``.
    bug_widths: ShapeConstraints | None = None
    # Gradient ops: how the kernel combines rows into dgamma and dbeta (ops.ROW_REDUCTIONS), which
    # sets the depth of their bounds; where its order is not known for every batch size,
    # "sequential" (R - 1 additions deep), which bounds every order of a sum of R rows.
    row_reduction: str = "blocks"
    # The families a registry hunt runs when it is not given --families (None: every family of its
    # op). An entry names fewer where hunting them all would slow the first `normprops hunt` for
    # little news: the numpy backend's example pairs, a correct kernel beside a planted one, each
    # hunted where the planted bug shows. `--families` (`all`: every one) hunts the others.
    default_families: frozenset[str] | None = None
    # An op of named arrays (attention): the kernel's own declaration of it (None: the op's default).
    op_declaration: Any = None

    def __post_init__(self) -> None:
        # An entry names its row reduction beside its model; the model carries it from here on
        # (the declaration, the bounds), so both always agree.
        if self.error_model.row_reduction != self.row_reduction:
            object.__setattr__(self, "error_model",
                               replace(self.error_model, row_reduction=self.row_reduction))

    @property
    def bug_constraints(self) -> ShapeConstraints:
        return self.constraints if self.bug_widths is None else self.bug_widths

    @property
    def label(self) -> str:
        return f"{self.op}[{self.name}]"

    @property
    def bug(self) -> KnownBug | None:
        """The first known bug (our kept-bad kernels have one)."""
        return self.bugs[0] if self.bugs else None

    def bug_in(self, family: str) -> KnownBug | None:
        return next((b for b in self.bugs if b.family == family), None)

    def expectation(self, family: str) -> str:
        """What the registry declares on ``family``: "bug" (a known bug lives there, and every hunt
        of the family must catch it), "claim", or "unclaimed". A race found by compute-sanitizer
        (``detector="racecheck"``) is no hunt's to catch: its family is hunted as unclaimed."""
        bug = self.bug_in(family)
        if bug is not None and bug.detector == "hunt":
            return "bug"
        return "claim" if family in self.claims and bug is None else "unclaimed"

    @property
    def known_bad(self) -> bool:
        return bool(self.bugs)

    def load(self) -> Callable[..., np.ndarray]:
        module_name, _, attr = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), attr)


# Families each op's correct kernels claim; a kernel drops the ones its algorithm cannot honour.
SOFTMAX_FAMILIES = frozenset(
    {"ordinary", "overflow_logits", "wide_span", "large_mean", "huge", "tiny", "constant", "ragged",
     "masked", "nonfinite"}
)
NORM_FAMILIES = frozenset(
    {"ordinary", "wide_span", "large_mean", "huge", "tiny", "eps_scale", "constant", "ragged",
     "nonfinite"}
)

#: Where each backend's callables live; a kernel's entry is ``<module>:<name>``.
BACKEND_MODULES = {
    "numpy": "normprops.backends.numpy_kernels",
    "cuda": "normprops.cuda.textbook",
    "cuda-prod": "normprops.cuda.prod",
    # prod.cu's cluster path, forced at every width (it needs thread-block clusters: sm_90 and later)
    "cuda-cluster": "normprops.cuda.prod",
    "torch-cuda": "normprops.backends.torch_kernels",
    "torch-cpu": "normprops.backends.torch_kernels",
}


def for_backend(backend: str, spec: KernelSpec) -> KernelSpec:
    return replace(spec, backend=backend, entry=f"{BACKEND_MODULES[backend]}:{spec.name}")
