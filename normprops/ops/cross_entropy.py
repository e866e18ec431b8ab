"""The loss ops ``cross_entropy``, ``fn(logits, target, ignore_index, label_smoothing) -> loss``, and
``cross_entropy_backward``, ``fn(dloss, logits, target, ignore_index, label_smoothing) -> dlogits``:
what the pipeline asks them (:class:`~normprops.ops.spec.NamedArrays`). Their mathematics (the case,
the declaration, the exact reference, the bounds) is in :mod:`normprops.ops.cross_entropy_math`,
their families in :mod:`normprops.ops.cross_entropy_families`.

Properties judged: ``contract`` (loss float32 of its shape, dlogits of the logits' shape and
storage type), ``finite`` and ``accuracy`` on every output element (an ignored row's loss and
gradient must be 0, within the storage type's least subnormal), ``determinism`` (two calls bitwise
equal) and ``batch_invariance`` (a row's loss and gradient bitwise the same computed alone; not
for a summed or averaged loss). Not judged: ``nan_propagation`` and ``range_safety`` (no family
draws a non-finite logit, and the exact loss of every drawn case is finite: a kernel that leaves
float32's range on the way, exp without the max, fails ``finite``); shift invariance is drawn as
the ``offset`` family, judged by accuracy, since the bound grows with the offset.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np

from normprops.errormodel import ErrorModel
from normprops.ops.cross_entropy_math import (
    FOREIGN_CROSS_ENTROPY,
    LOSS_REDUCTIONS,
    CrossEntropyCase,
    CrossEntropyDeclaration,
    cross_entropy_reference,
    grad_tolerance,
    loss_tolerance,
)
from normprops.ops.spec import NamedArrays, NamedExact, OpSpec
from normprops.verdict import Verdict

__all__ = ["CROSS_ENTROPY", "CROSS_ENTROPY_BACKWARD", "CROSS_ENTROPY_PROPERTIES", "FOREIGN_CROSS_ENTROPY",
           "SMOOTHINGS", "CrossEntropyCase", "CrossEntropyDeclaration", "as_declared", "loss_cases",
           "loss_description", "loss_fields", "loss_outputs", "loss_pieces"]

#: The properties a cross-entropy kernel is judged on (the module's docstring says why not the others).
CROSS_ENTROPY_PROPERTIES = frozenset({"contract", "finite", "accuracy", "determinism", "batch_invariance"})

#: The families in report order, as :mod:`normprops.ops.cross_entropy_families` defines them (that
#: module imports Hypothesis, which the op's registration must not).
_FAMILIES = ("ordinary", "offset", "large_logits", "target_extremes", "dominant", "ignored", "softcap",
             "vocab", "ragged")
#: The label smoothings drawn for a kernel that takes one (both loss ops).
SMOOTHINGS = (0.0, 0.1, 1.0)


def as_declared(case: CrossEntropyCase, *, declaration: CrossEntropyDeclaration) -> CrossEntropyCase:
    """``case`` computing what the kernel declared on top of the plain loss (its softcap, z-loss
    and reduction), recorded in its params so that a fixture replays it the same."""
    params = dict(case.params)
    params.update(softcap=declaration.softcap, z_loss=declaration.z_loss, reduction=declaration.reduction)
    return case.replace(softcap=declaration.softcap, z_loss=declaration.z_loss,
                        reduction=declaration.reduction if case.dloss is None else case.reduction,
                        params=params)


def loss_cases(*, gradient: bool, families: tuple[str, ...], strategy: str,
               as_declared: Callable[..., Any]) -> Callable[[str, str, Any], Any]:
    """A loss op's case strategy (:attr:`NamedArrays.cases`): the family's cases drawn by
    ``strategy`` (``"module:function"`` of a families module, imported at the first draw: it imports
    Hypothesis, which the ops' registration must not), with the label smoothings the declaration
    takes (0 alone where it takes none), its reduction and, for ``gradient``, a dloss; each case
    then computing what the kernel declared (``as_declared``)."""
    module, _, name = strategy.partition(":")

    def cases(family: str, dtype: str, declaration: CrossEntropyDeclaration) -> Any:
        if family not in families:
            raise ValueError(f"family must be one of {', '.join(families)} but was {family!r}")
        draw = getattr(importlib.import_module(module), name)
        drawn = draw(family, dtypes=(dtype,), smoothing=SMOOTHINGS if declaration.smoothing else (0.0,),
                     gradient=gradient, reduction=declaration.reduction,
                     vocab_multiple_of=declaration.vocab_multiple_of)
        return drawn.map(lambda case: as_declared(case, declaration=declaration))
    return cases


def loss_outputs(case: Any, declaration: CrossEntropyDeclaration,
                 returned: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    """A loss op's one output: float32, a row's loss each (N,) or their sum or mean ()."""
    if returned != 1:
        raise ValueError(f"returned {returned} arrays; {case.op} returns loss alone")
    shape = (case.shape[0],) if declaration.reduction == "none" else ()
    return (("loss", shape, "float32"),)


def _grad_outputs(case: CrossEntropyCase, declaration: CrossEntropyDeclaration,
                  returned: int) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    if returned != 1:
        raise ValueError(f"returned {returned} arrays; cross_entropy_backward returns dlogits alone")
    return (("dlogits", tuple(case.logits.shape), case.dtype),)


def _judged_as(case: CrossEntropyCase, declaration: CrossEntropyDeclaration) -> CrossEntropyCase:
    """The case as the kernel declared to compute it: a fixture saved from another kernel's hunt is
    replayed on its inputs with this kernel's softcap, z-loss and (a loss) reduction. A gradient
    keeps the case's reduction, which its dloss's shape is."""
    if (case.softcap, case.z_loss) == (declaration.softcap, declaration.z_loss) and (
            case.dloss is not None or case.reduction == declaration.reduction):
        return case
    return case.replace(softcap=declaration.softcap, z_loss=declaration.z_loss,
                        reduction=declaration.reduction if case.dloss is None else case.reduction)


def _loss_exact(case: CrossEntropyCase, declaration: CrossEntropyDeclaration, oracle: str) -> NamedExact:
    case = _judged_as(case, declaration)
    ref = cross_entropy_reference(case, oracle=oracle)
    tol = loss_tolerance(ref, case, declaration=declaration)
    judged = np.isfinite(ref.loss) & np.isfinite(tol)
    return NamedExact({"loss": ref.loss}, {"loss": np.where(judged, tol, np.nan)}, {"loss": judged}, ref)


def _grad_exact(case: CrossEntropyCase, declaration: CrossEntropyDeclaration, oracle: str) -> NamedExact:
    case = _judged_as(case, declaration)
    ref = cross_entropy_reference(case, oracle=oracle)
    tol = grad_tolerance(ref, case, declaration=declaration)
    judged = np.isfinite(ref.dlogits) & np.isfinite(tol)
    return NamedExact({"dlogits": ref.dlogits}, {"dlogits": np.where(judged, tol, np.nan)},
                      {"dlogits": judged}, ref)


def _check(case: CrossEntropyCase, outs: dict[str, np.ndarray], exact: NamedExact,
           declaration: CrossEntropyDeclaration, label: str) -> list[Verdict]:
    """Nothing beyond accuracy: an ignored row's exact loss and gradient are 0 with a bound of the
    least subnormal, which accuracy judges."""
    return []


def _element(name: str, index: tuple[int, ...]) -> str:
    if not index:
        return "the reduced loss"
    words = ("row", "col")
    return " ".join(f"{w} {int(i)}" for w, i in zip(words, index))


def loss_pieces(case: Any) -> tuple[tuple[Any, tuple[slice, ...], str], ...]:
    """Batch invariance of a loss per row: the middle row alone (N = 1) must give its loss bitwise."""
    if case.reduction != "none":
        return ()  # a sum or a mean of one row is another loss
    i = case.shape[0] // 2
    return ((case.rows(np.array([i])), (slice(i, i + 1),), f"row {i} alone (N = 1)"),)


def loss_fields(op: str, fields: dict[str, Any], params: dict[str, Any], *, arrays: tuple[str, ...],
                gradient: bool) -> dict[str, Any]:
    """A loss case's scalars and target from a fixture's ``fields`` and ``params``, checked (each
    missing field named, integer targets, a known reduction): the keywords both loss cases take
    beside their float arrays ``arrays``."""
    need = {*arrays, "target", "ignore_index", "label_smoothing"} | ({"dloss"} if gradient else set())
    missing = sorted(need - set(fields))
    if missing:
        raise ValueError(f"{op} needs {', '.join(missing)}")
    target = np.asarray(fields["target"])
    if not np.array_equal(target, np.round(target)):
        raise ValueError("target must hold integers")
    reduction = params.get("reduction", "none")
    if reduction not in LOSS_REDUCTIONS:
        raise ValueError(f"reduction must be one of {LOSS_REDUCTIONS} but was {reduction!r}")
    cap = params.get("softcap")
    dloss = None
    if gradient:
        dloss = np.asarray(fields["dloss"], dtype=np.float32)
        dloss = dloss.reshape(()) if reduction != "none" else dloss
    return dict(target=target.astype(np.int64), ignore_index=int(fields["ignore_index"]),
                label_smoothing=float(fields["label_smoothing"]),
                softcap=None if cap is None else float(cap), z_loss=float(params.get("z_loss") or 0.0),
                reduction=reduction, dloss=dloss)


def _build(gradient: bool) -> Any:
    def build(family: str, dtype: str, fields: dict[str, Any], params: dict[str, Any]) -> CrossEntropyCase:
        scalars = loss_fields(f"cross_entropy{'_backward' if gradient else ''}", fields, params,
                              arrays=("logits",), gradient=gradient)
        target = scalars.pop("target")
        return CrossEntropyCase(np.asarray(fields["logits"], dtype=np.float32), target, **scalars,
                                dtype=dtype, family=family, params=params)
    return build


def loss_description(case: Any, *, shape: str, logits: np.ndarray, span: str) -> str:
    """A few lines a person reads about a loss case: ``shape`` ("N=3 V=7"), the drawn parameters,
    the logits' range (``span``: how they were formed, before their extremes) and, where rows are
    kept, how far each target sits below its row's max; dloss's range for a gradient."""
    x = logits.astype(np.float64)
    valid, n = case.valid, x.shape[0]
    lines = [f"input: {shape} {case.dtype}, ignore_index={case.ignore_index}, label_smoothing="
             f"{case.label_smoothing!r}, reduction={case.reduction}"
             + (f", softcap={case.softcap!r}" if case.softcap is not None else "")
             + (f", z_loss={case.z_loss!r}" if case.z_loss else "") + "; drawn with "
             + ", ".join(f"{k}={val!r}" for k, val in case.params.items()
                         if k not in ("softcap", "z_loss", "reduction")),
             f"{span} {x.min():.6g} to {x.max():.6g}; {int(valid.sum())} of {n} rows not ignored"]
    if valid.any():
        rows = np.nonzero(valid)[0]
        below = x[rows].max(axis=1) - x[rows, case.target[rows]]
        lines.append(f"target logit below its row's max by {below.min():.6g} to {below.max():.6g}")
    if case.dloss is not None:
        d = case.dloss.astype(np.float64)
        lines.append(f"dloss {d.min():.6g} to {d.max():.6g}")
    return "\n".join(lines)


def _describe(case: CrossEntropyCase, verdict: Any = None) -> str:
    n, v = case.logits.shape
    return loss_description(case, shape=f"N={n} V={v}", logits=case.logits, span="logits")


def _from_json(doc: Any, model: ErrorModel) -> CrossEntropyDeclaration:
    return CrossEntropyDeclaration.from_json(doc, model)


def _declare(model: ErrorModel, *, dtype: str, **keywords: Any) -> CrossEntropyDeclaration:
    return CrossEntropyDeclaration.declare(model, dtype=dtype, **keywords)


def _reference(case: CrossEntropyCase, oracle: str = "float64") -> Any:
    return cross_entropy_reference(case, oracle=oracle)


_KEYWORDS = ("softcap", "z_loss", "loss_reduction", "smoothing")


def _named(gradient: bool) -> NamedArrays:
    return NamedArrays(
        cases=loss_cases(gradient=gradient, families=_FAMILIES, as_declared=as_declared,
                         strategy="normprops.ops.cross_entropy_families:cross_entropy_cases"),
        outputs=_grad_outputs if gradient else loss_outputs,
        exact=_grad_exact if gradient else _loss_exact, check=_check, element=_element,
        pieces=loss_pieces, build=_build(gradient), describe=_describe,
        default_declaration=FOREIGN_CROSS_ENTROPY, declare=_declare, from_json=_from_json,
        keywords=_KEYWORDS, float32_inputs=("dloss",))


CROSS_ENTROPY = OpSpec(
    "cross_entropy", ("logits", "target", "ignore_index", "label_smoothing"), None,
    "F.cross_entropy(logits.float(), target, ignore_index=, label_smoothing=, reduction=) per row, "
    "float32 (N,) (0 on ignored rows), or its sum or mean as declared; optionally softcapped logits "
    "and a z-loss",
    outputs=("loss",), returns="loss (float32)", families=_FAMILIES, properties=CROSS_ENTROPY_PROPERTIES,
    reference=_reference,
    bound=lambda case, ref, declaration=FOREIGN_CROSS_ENTROPY: loss_tolerance(
        ref, case, declaration=declaration),
    named=_named(False),
    # Planted bugs caught at worst at example 6 of 20 seeds (ce_mean_over_all_rows): 3 x 6 = 18.
    gate_examples=30,
)

CROSS_ENTROPY_BACKWARD = OpSpec(
    "cross_entropy_backward", ("dloss", "logits", "target", "ignore_index", "label_smoothing"), None,
    "the gradient of cross_entropy: dloss (float32, the loss's shape) times softmax(x) - onehot "
    "(smoothed), per row; dlogits (N, V) in the storage type, 0 on ignored rows",
    outputs=("dlogits",), returns="dlogits", families=_FAMILIES, properties=CROSS_ENTROPY_PROPERTIES,
    reference=_reference,
    bound=lambda case, ref, declaration=FOREIGN_CROSS_ENTROPY: grad_tolerance(
        ref, case, declaration=declaration),
    named=_named(True),
    # Planted bugs caught at the first example in each of 20 seeds.
    gate_examples=30,
)
