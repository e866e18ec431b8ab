"""The ops: the generic op type every op module builds (:class:`OpSpec`, :mod:`normprops.ops.spec`),
the registry of ops, and the properties a kernel of them is judged on.

One module per op family holds everything about its ops (signature and outputs, references, bounds,
families, applicable properties, its own checks and metamorphic copies): :mod:`normprops.ops.softmax`
(with ``softmax_backward``), :mod:`normprops.ops.masked_softmax`, :mod:`normprops.ops.layernorm`
(with ``layernorm_backward``), :mod:`normprops.ops.rmsnorm` (with ``rmsnorm_backward``) and
:mod:`normprops.ops.attention` (with :mod:`normprops.ops.attention_backward`) and
:mod:`normprops.ops.cross_entropy` (whose cases are named arrays of any shape), with the fused
:mod:`normprops.ops.linear_cross_entropy` (and its backward). An op of
one's own is an :class:`OpSpec` handed to :func:`register`.
"""

from __future__ import annotations

from normprops.ops.attention import ATTENTION
from normprops.ops.attention_backward import ATTENTION_BACKWARD
from normprops.ops.cross_entropy import CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD
from normprops.ops.layernorm import LAYERNORM, LAYERNORM_BACKWARD
from normprops.ops.linear_cross_entropy import LINEAR_CROSS_ENTROPY
from normprops.ops.linear_cross_entropy_backward import LINEAR_CROSS_ENTROPY_BACKWARD
from normprops.ops.masked_softmax import MASKED_SOFTMAX
from normprops.ops.rmsnorm import RMSNORM, RMSNORM_BACKWARD
from normprops.ops.softmax import SOFTMAX, SOFTMAX_BACKWARD
from normprops.ops.spec import (
    APPLICABLE,
    BACKWARD_FAMILIES,
    EVERY_OP,
    FLOAT32_EPS,
    IGNORABLE,
    INFORMATIVE,
    OPS,
    OPTIONAL,
    PROPERTIES,
    ROW_REDUCTIONS,
    USER_ROW_REDUCTION,
    NamedArrays,
    NamedExact,
    OpSpec,
    Transform,
    check_ignore,
    check_opt_in,
    get_op,
    is_backward,
    register,
    unregister,
)

__all__ = ["OpSpec", "NamedArrays", "NamedExact", "Transform",
           "OPS", "get_op", "register", "unregister", "FLOAT32_EPS", "PROPERTIES",
           "IGNORABLE", "check_ignore", "OPTIONAL", "INFORMATIVE", "check_opt_in", "EVERY_OP",
           "BACKWARD_FAMILIES", "is_backward", "ROW_REDUCTIONS", "USER_ROW_REDUCTION", "APPLICABLE"]

# The built-in ops, in report order: the forward ops, then their gradients.
for _op in (SOFTMAX, LAYERNORM, RMSNORM, MASKED_SOFTMAX, SOFTMAX_BACKWARD, RMSNORM_BACKWARD,
            LAYERNORM_BACKWARD, ATTENTION, ATTENTION_BACKWARD, CROSS_ENTROPY, CROSS_ENTROPY_BACKWARD,
            LINEAR_CROSS_ENTROPY, LINEAR_CROSS_ENTROPY_BACKWARD):
    if _op.name not in OPS:
        register(_op)
del _op
