"""How a kernel's reduction is shaped, which sets the depth ``k`` of its error bounds
(docs/tolerances.md): the model every oracle, hint and registry entry reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from normprops.row_shape import Shape, cluster_shape, elements_per_thread, shape_for

__all__ = ["ErrorModel", "FOREIGN_ERROR_MODEL", "REDUCTIONS", "ROW_REDUCTIONS", "TREE_LEAF_DEPTH",
           "VARIANCES"]

#: What a reduction may look like (``ErrorModel.reduction``; docs/tolerances.md, "Reduction depth").
REDUCTIONS = ("sequential", "tree")
#: Additions on a tree reduction's longest path beyond ceil(log2 C): short sequential leaves and
#: an unrolled fold. numpy's np.sum (blocks of 128 summed by 8 accumulators of 16 values, folded
#: in 3 steps, then a tail of up to 7) reaches ceil(log2 C) + 18.
TREE_LEAF_DEPTH = 18
#: How a layer norm forms its variance (``ErrorModel.variance``; docs/tolerances.md, "Layer norm").
VARIANCES = ("two_pass", "one_pass")
#: How a gradient kernel combines its rows into dgamma and dbeta (``ErrorModel.row_reduction``;
#: docs/tolerances.md, "Gradients"): ``blocks`` per-block partials over ``threads`` blocks, each
#: adding its rows in turn, then a tree; ``sequential`` one running sum over the rows; ``tree`` a
#: pairwise sum.
ROW_REDUCTIONS = ("blocks", "sequential", "tree")


@dataclass(frozen=True)
class ErrorModel:
    """The shape of a kernel's reduction, which sets the depth ``k`` in the error bounds.

    ``reduction="sequential"``: ``k = ceil(C / threads) - 1 + tree_depth``, each thread adds its
    strided share sequentially, then the partials meet in a tree (or a fold) ``tree_depth``
    additions deep. ``reduction="tree"``: a pairwise tree over the whole row,
    ``k = ceil(log2 C) + TREE_LEAF_DEPTH`` whatever ``threads`` says. ``rho`` and ``c_x`` are the
    softmax constants: ``rho`` 2 for two-pass, 6 for online (rescaling) softmax; ``c_x`` 1 for a
    faithful ``expf``, 3.5 for ``__expf`` / fast math.
    """

    threads: int = 32
    tree_depth: int | None = None
    # Threads that grow with the row (normprops/cuda/prod.cu): the register path's launch shape for
    # at most ``per_thread`` elements per thread in 16-byte vectors of ``vector_width`` elements
    # (normprops.row_shape), the streaming path's ``threads`` beyond it. None: always ``threads``.
    per_thread: int | None = None
    vector_width: int = 4
    # Rows past one block's registers may instead take the cluster path (prod.cu's softmax on sm_90
    # and later, decided by the GPU): the depth is then the larger of the two paths'.
    cluster: bool = False
    rho: float = 6.0
    c_x: float = 3.5
    # Flush-to-zero arithmetic: subnormal operands and results may become 0. A kernel declares it
    # (--ftz); our CUDA builds are IEEE (normprops.cuda.build.build_flushes measures it) except where a
    # kernel asks for a flushing instruction itself.
    ftz: bool = False
    reduction: str = "sequential"
    # The type the kernel computes in: float32 (the default, whatever the storage type), or
    # bfloat16 for a kernel whose every operation rounds to bfloat16 (JAX's and Flax's defaults on
    # bfloat16 arrays). The bounds keep their shape with u = 2^-8 in place of 2^-24; bfloat16 has
    # float32's exponent range, so the only other change is the rounding of a subnormal result,
    # half of bfloat16's smallest subnormal 2^-133 (docs/tolerances.md).
    arithmetic: str = "float32"
    # How a layer norm forms its variance: "two_pass" (around the computed mean, or Welford's
    # update), whose error grows like k u kappa; "one_pass" (E[x^2] - E[x]^2, in any order), whose
    # error grows like k u kappa^2 (docs/tolerances.md, "Layer norm"). The other ops have none.
    variance: str = "two_pass"
    # Gradient ops: how the kernel combines rows into dgamma and dbeta (ops.ROW_REDUCTIONS), the
    # depth of their bounds; a forward op sums no rows and leaves it unread.
    row_reduction: str = "blocks"

    def __post_init__(self) -> None:
        if not isinstance(self.ftz, bool):
            raise ValueError(f"ftz must be True or False but was {self.ftz!r}")
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1 but was {self.threads}")
        if self.arithmetic not in ("float32", "bfloat16"):
            raise ValueError(f"arithmetic must be 'float32' or 'bfloat16' but was {self.arithmetic!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS} but was {self.reduction!r}; "
                             f"'sequential' with threads=T for T threads that each add their share "
                             f"in turn, 'tree' for a pairwise reduction")
        if self.variance not in VARIANCES:
            raise ValueError(f"variance must be one of {VARIANCES} but was {self.variance!r}; "
                             f"'two_pass' for a variance around the mean (or Welford's), 'one_pass' "
                             f"for E[x^2] - E[x]^2")
        if self.row_reduction not in ROW_REDUCTIONS:
            raise ValueError(f"row_reduction must be one of {', '.join(ROW_REDUCTIONS)} but was "
                             f"{self.row_reduction!r}")

    @property
    def unit_roundoff(self) -> float:
        """u of the arithmetic: 2^-24 for float32, 2^-8 for bfloat16."""
        return 2.0**-24 if self.arithmetic == "float32" else 2.0**-8

    @property
    def smallest_subnormal(self) -> float:
        """The arithmetic's smallest subnormal, the grid IEEE gradual underflow rounds to: 2^-149 for
        float32, 2^-133 for bfloat16. A rounding there loses at most half of it."""
        return 2.0**-149 if self.arithmetic == "float32" else 2.0**-133

    def layernorm_e1(self, cols: int, kappa: Any) -> Any:
        """Layer norm's ``e1`` per row, relative to ``s = sqrt(var + eps)``: the centred value's
        error ``(k + 4) u kappa``, and for a one-pass variance also its error, ``2 (k + 2) u
        kappa^2`` (docs/tolerances.md, "Layer norm"). ``kappa`` is ``mean|x| / s``, a number or an
        array."""
        k, u = self.k(cols), self.unit_roundoff
        e1 = (k + 4) * u * kappa
        if self.variance == "one_pass":
            e1 = e1 + 2 * (k + 2) * u * kappa * kappa
        return e1

    def _shape(self, cols: int) -> Shape:
        shape = shape_for(max(cols, 1), vector_width=self.vector_width, per_thread=self.per_thread)
        return shape if shape.vpt else Shape(0, self.threads, 1)

    def threads_for(self, cols: int) -> int:
        if self.per_thread is None:
            return self.threads
        return self._shape(cols).tpr

    def per_thread_for(self, cols: int) -> int:
        """The most elements one thread adds in turn."""
        if self.per_thread is None:
            return math.ceil(cols / self.threads)
        return elements_per_thread(max(cols, 1), self._shape(cols), vector_width=self.vector_width)

    def depth_of_tree(self, threads: int) -> int:
        if self.tree_depth is not None:
            return self.tree_depth
        return math.ceil(math.log2(threads)) if threads > 1 else 0

    def k(self, cols: int) -> int:
        if self.reduction == "tree":
            return max(1, math.ceil(math.log2(max(cols, 1))) + TREE_LEAF_DEPTH)
        k = max(1, self.per_thread_for(cols) - 1 + self.depth_of_tree(self.threads_for(cols)))
        if self.cluster and self.per_thread is not None and self._shape(cols).vpt == 0:
            shape = cluster_shape(cols, vector_width=self.vector_width)
            if shape is not None:  # a block's tree, then ceil(log2(blocks)) levels across the cluster
                held = elements_per_thread(cols, shape, vector_width=self.vector_width)
                k = max(k, held - 1 + self.depth_of_tree(shape.tpr) + self.depth_of_tree(shape.cluster))
        return k


#: A kernel we did not write (a user's function, PyTorch's): T = 32 and the looser softmax
#: constants, so any correct algorithm (online softmax, fast-math exp) passes; IEEE arithmetic
#: (subnormals kept) unless the kernel declares flushing: ``replace(model, ftz=True)``.
FOREIGN_ERROR_MODEL = ErrorModel(threads=32, rho=6.0, c_x=3.5, ftz=False)
