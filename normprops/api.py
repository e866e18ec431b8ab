"""Hunting a whole kernel: every family, fixtures saved, one report. The Python API lives here.

:func:`hunt_families` is the loop the CLI, the API and scripts share: it hunts one target family by
family, saves fixtures, and stops early (with the reason) when the target cannot be called again,
when Ctrl-C arrives, or when a second family fails the calling contract for the same cause (one
message, not one per family).

:func:`hunt_kernel` and :func:`assert_robust` are the user-facing entry points::

    import normprops

    def test_my_rms_norm():
        normprops.assert_robust(my_rms_norm, op="rmsnorm", dtype="bfloat16", framework="torch")
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

from hypothesis import settings as hypothesis_settings

from normprops.call_defaults import SessionDefaults, current_defaults, use_session_defaults
from normprops.case import ShapeConstraints
from normprops.declaration import Declaration
from normprops.engine import (
    HuntRun,
    check_families_drawable,
    choose_seed,
    deadline_after,
    hunt_families,
    parse_families,
    profile_config,
)
from normprops.errors import UsageError
from normprops.flags import flag
from normprops.hints import hints
from normprops.jsonio import output_dir_problem
from normprops.launch import Target, target_from_callable
from normprops.ops import get_op
from normprops.report import Report, format_finding
from normprops.strategies import families_for
from normprops.timeouts import call_timeout_problem

__all__ = ["HuntRun", "hunt_families", "hunt_kernel", "assert_robust", "target_json", "deadline_after",
           "SessionDefaults", "use_session_defaults"]


def target_json(target: Target) -> dict[str, Any]:
    """What a report says about a target: where it runs and what it was hunted under (its
    declaration's :meth:`~normprops.declaration.Declaration.to_json`, with its names, backend
    and the properties hunted as information)."""
    declared = target.declaration.to_json()
    out = {"label": target.label, "name": target.name, "op": declared.pop("op"),
           "backend": target.backend}
    for key, value in declared.items():
        out[key] = value
        if key == "opt_in":
            out["information"] = sorted(target.information)
    return out


def _families(op: str, families: Iterable[str] | str | None) -> tuple[str, ...]:
    try:
        return parse_families(families, allowed=families_for(op), argument="families", op=op)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _callers_level() -> int:
    """The ``stacklevel`` of a warning issued in normprops that points at the first frame outside
    it: the user's call, through ``assert_robust`` or not."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _unknown_keywords(name: str, signature: inspect.Signature, kwargs: dict[str, Any]) -> None:
    """TypeError naming ``name`` (the function the user called) and the nearest keyword, for a
    keyword ``signature`` does not take (``max_example`` for ``max_examples``)."""
    known = list(signature.parameters)
    for key in kwargs:
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; it takes {', '.join(known)}"
            raise TypeError(f"{name}() got an unexpected keyword argument {key!r}{hint}")


def _in_users_frame(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, its argument errors (a :class:`UsageError`, a keyword it does not take) raised from
    the user's own call: pytest shows their line and the one-line message, not normprops' frames
    down to where the argument was checked."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def called(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            _unknown_keywords(fn.__name__, signature, kwargs)
            return fn(*args, **kwargs)
        except (UsageError, TypeError) as exc:
            if isinstance(exc, TypeError) and not str(exc).startswith(f"{fn.__name__}()"):
                raise  # a TypeError from inside, not the call's own
            raise exc.with_traceback(None) from None

    return called


@_in_users_frame
def hunt_kernel(fn: Callable[..., Any], *, op: str, dtype: str = "float32",
                framework: str = "numpy", device: str | None = None,
                families: Iterable[str] | str | None = None, ignore: Iterable[str] = (),
                cols_multiple_of: int = 1, min_cols: int | None = None,
                max_cols: int | None = None, max_examples: int | None = None,
                seed: int | None = None, fixtures_dir: str | Path | None = None,
                ftz: bool = False, threads: int | None = None, reduction: str = "sequential",
                arithmetic: str = "float32", opt_in: Iterable[str] = (),
                call_timeout: float | None = 60.0, time_budget: float | None = None,
                row_reduction: str | None = None, mask: str = "bool",
                mask_fill: float | str | None = None, variance: str = "two_pass",
                mask_layouts: Iterable[str] | str | None = None, empty_rows: str | None = None,
                returns_lse: bool | None = None, p_dtype: str | None = None,
                online: bool | None = None, shape_pool: int | None = None, softcap: float | None = None,
                z_loss: float | None = None, loss_reduction: str | None = None,
                smoothing: bool | None = None) -> Report:
    """Hunt ``fn`` for numerical bugs in every family of ``op`` (or ``families``).

    ``fn`` has the op's user signature (softmax ``fn(x)``, layernorm ``fn(x, gamma, beta, eps)``,
    rmsnorm ``fn(x, gamma, eps)``, masked_softmax ``fn(x, mask, scale)``; the gradients
    ``softmax_backward`` ``fn(dy, y) -> dx``, ``rmsnorm_backward`` ``fn(dy, x, gamma, eps) ->
    (dx, dgamma)``, ``layernorm_backward`` ``fn(dy, x, gamma, beta, eps) -> (dx, dgamma, dbeta)``)
    on ``framework``'s arrays of ``dtype`` on ``device`` (torch: ``"cuda"`` when available, else
    ``"cpu"``), and returns the same kind of array (a gradient: one per output, dgamma and dbeta of
    gamma's shape).

    - ``ignore``: properties ``fn`` does not promise (e.g. ``"batch_invariance"``): not judged.
    - ``cols_multiple_of``, ``min_cols``, ``max_cols``: the row widths ``fn`` accepts.
    - ``seed``: the hunt's Hypothesis seed; by default a fresh one, kept in
      ``report.settings["seed"]`` (pytest's ``--hypothesis-seed``, where given; none under a
      derandomized profile, which repeats by itself).
    - ``max_examples``: per family and property; default the active Hypothesis profile's (100
      unless a profile, such as the pytest plugin's ``deep``, says otherwise).
    - ``fixtures_dir``: save each finding there as a replayable fixture (default: not saved, or
      under pytest ``--normprops-fixtures-dir``), and try the newest ``fn`` saved there before
      first, so a re-run meets its last failure at once.
    - ``ftz``: ``fn`` flushes subnormals to zero; the tolerance allows for it.
    - ``threads``: threads that cooperate on a row in ``fn``'s reduction (default 32);
      ``reduction``: "sequential" (each adds its share in turn) or "tree" (pairwise).
    - ``arithmetic``: the type ``fn`` computes in: "float32", or "bfloat16" when every operation
      rounds to bfloat16 (the bounds then use bfloat16's unit roundoff; needs ``dtype="bfloat16"``).
    - ``opt_in``: optional properties ``fn`` promises too (``"exact_constant"``: an exactly
      constant layer-norm row gives beta, a zero RMS-norm row 0; ``"range_safety"``: right also
      on the rows where the declared arithmetic must overflow, a norm's x*x or a masked softmax's
      ``scale * x``, which are otherwise hunted as information only).
    - ``call_timeout``: seconds one call of ``fn`` may take before the hunt stops (default 60, as
      ``--call-timeout``; None: no limit). It is kept with SIGALRM, which only the main thread of
      a Unix process has: elsewhere a call is not stopped (a ``RuntimeWarning`` says so where
      ``call_timeout`` was given). An
      alarm already set (pytest-timeout's) is kept and fires in its own time.
    - ``time_budget``: seconds the whole hunt may take; when they are spent it ends with what it
      found (``report.cut_short``, each result's ``examples`` says how far it got). Under pytest,
      ``--normprops-time-budget`` bounds it too, and ``--normprops-policy`` and
      ``--normprops-oracle`` set how it is judged.
    - ``row_reduction``: gradient ops, how ``fn`` combines rows into dgamma and dbeta, the depth
      of their bounds: "sequential" (one running sum over the rows, the default: it bounds every
      order, ``np.sum(axis=0)``'s, ``torch.sum(dim=0)``'s and ``jnp.sum(axis=0)``'s among them),
      "blocks" (per-block partials over ``threads`` blocks joined in a tree, a sharper bound) or
      "tree" (pairwise). Other ops take none.
    - ``mask_layouts``, ``empty_rows``, ``returns_lse``, ``p_dtype``, ``online`` (attention only,
      ``fn(q, k, v, mask, scale) -> out or (out, lse)``): the masks it takes (some of none,
      causal_top_left, causal_bottom_right, key_padding, arbitrary; the hunt draws only those),
      what a query row with no kept key gives ("zero", "nan" or "either"), whether it returns lse
      (None: either), the type P is rounded to before P.V, and whether a running max rescales its
      sums (default True; False tightens the P.V bound). ``shape_pool`` (attention and its
      backward): each family draws its cases in at most this many shapes, for an ``fn`` that
      compiles for every new shape (``jax.jit``, ``torch.compile``). docs/hunting.md, "Attention".
    - ``softcap``, ``z_loss``, ``loss_reduction``, ``smoothing`` (cross_entropy and its gradient
      only): the cap ``c`` of ``c tanh(x / c)`` applied to the logits first (Gemma 2: 30), the
      coefficient of ``lse^2`` added to each row's loss, what the loss is ("none", the default:
      per row; "sum"; "mean" over the rows not ignored) and whether ``fn`` takes a label smoothing
      other than 0 (default True).
    - ``mask`` (masked_softmax only): ``"bool"`` hands ``fn`` a boolean mask (True: the entry
      takes part); ``"additive"`` a float one of 0 and ``mask_fill`` (``"-inf"``, the default;
      ``"lowest"``, the storage type's lowest finite value; or a negative number), for an ``fn``
      computing ``softmax(scale * x + mask)``, judged against the exact result of that sum.
    - ``variance`` (layer norm and its gradient only): ``"two_pass"`` (the default: a variance
      around the mean, or Welford's) or ``"one_pass"`` for an ``fn`` that computes
      ``E[x^2] - E[x]^2``, judged with a bound that grows like ``kappa^2`` instead of ``kappa``
      (``kappa = mean|x| / sqrt(var + eps)``).

    Returns a :class:`~normprops.report.Report`: ``.passed``, ``.failures`` with one entry per
    (family, property) that failed, ``.information`` (e.g. a norm that is not range-safe) and
    ``.hints`` (declarations checked to explain the failures). Raises :class:`~normprops.errors.UsageError` (a
    ``ValueError``) naming a bad argument."""
    __tracebackhide__ = True  # a skip (the session's time budget spent) is reported at the caller
    try:
        get_op(op)
        constraints = ShapeConstraints(cols_multiple_of=cols_multiple_of,
                                       min_cols=1 if min_cols is None else min_cols,
                                       max_cols=max_cols)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    declaration = Declaration.declare(
        op=op, dtype=dtype, framework=framework, device=device, ignore=ignore,
        constraints=constraints, threads=threads, ftz=ftz, reduction=reduction,
        arithmetic=arithmetic, opt_in=opt_in, call_timeout=call_timeout,
        row_reduction=row_reduction, mask=mask, mask_fill=mask_fill, variance=variance,
        **{key: value for key, value in (("mask_layouts", mask_layouts), ("empty_rows", empty_rows),
                                         ("returns_lse", returns_lse), ("p_dtype", p_dtype),
                                         ("online", online), ("shape_pool", shape_pool),
                                         ("softcap", softcap),
                                         ("z_loss", z_loss), ("loss_reduction", loss_reduction),
                                         ("smoothing", smoothing)) if value is not None})
    target = target_from_callable(fn, declaration=declaration)
    # The default object itself (not an equal value the caller passed): asked for by default, a
    # timeout that cannot be kept is dropped quietly; asked for by name, it is said.
    default = call_timeout is _DEFAULT_CALL_TIMEOUT
    problem = None if call_timeout is None else call_timeout_problem()
    if problem:
        if not default:
            warnings.warn(f"call_timeout={call_timeout:g} cannot be kept here ({problem}): a call of "
                          f"{getattr(fn, '__name__', 'fn')} that hangs is not stopped; pass "
                          f"call_timeout=None to hunt without one, or hunt from the main thread",
                          RuntimeWarning, stacklevel=_callers_level())
        call_timeout = None
    chosen = _families(op, families)
    session = current_defaults()
    fixtures = session.fixtures_dir if fixtures_dir is None else _fixtures_dir(fixtures_dir)
    deadline = deadline_after(time_budget)
    if session.deadline is not None:
        if session.when_spent is not None and time.monotonic() >= session.deadline:
            session.when_spent("the session's normprops time budget was spent before this hunt")
        deadline = session.deadline if deadline is None else min(deadline, session.deadline)
    # A seed drawn and kept, as the CLI does, so that a failure can be repeated (seed=N); one
    # pytest forces (--hypothesis-seed) is taken as it is; none under a derandomized profile.
    seed = choose_seed(seed, derandomized_seed=None)
    try:
        config = profile_config(max_examples=max_examples, seed=seed, policy=session.policy,
                                oracle=session.oracle, deadline=deadline)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # Said before any family is hunted, as the CLI does.
    check_families_drawable(target, families=chosen, config=config,
                            fix=lambda why, family: f"{why}: widen min_cols or max_cols, or leave "
                                                    f"{family} out (families=)")
    run = hunt_families(target, families=chosen, config=config, fixtures_dir=fixtures)
    report = Report("hunt", settings={"op": op, "max_examples": config.max_examples, "seed": seed,
                                      "families": list(chosen), "policy": config.policy,
                                      "oracle": config.oracle,
                                      "fixtures_dir": None if fixtures is None else str(fixtures)},
                    targets=[target_json(target)], results=[(r, None) for r in run.results])
    if run.interrupted:  # Ctrl-C is the user's, not ours to swallow
        raise KeyboardInterrupt
    if run.cut_short:
        report.cut_short = True
    if run.stopped:
        report.notes.append(f"stopped: {run.stopped}")
    if not any(r.fatal for r in run.results):  # a target that hung or faulted is not run again
        report.hints = hints(report.failures, target=target, policy=config.policy,
                             oracle=config.oracle)
    return report


def _fixtures_dir(value: Any) -> Path:
    """``fixtures_dir`` as a folder findings can be saved in, checked before the hunt rather than
    when its first finding is saved."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise UsageError(f"fixtures_dir must be a folder's path (a str or Path; None saves nothing) "
                         f"but was {value!r}")
    path = Path(value)
    problem = output_dir_problem(path)
    if problem:
        raise UsageError(f"fixtures_dir={str(path)!r}{problem}")
    return path


def assert_robust(fn: Callable[..., Any], **kwargs: Any) -> Report:
    """:func:`hunt_kernel`, raising ``AssertionError`` when anything fails. The message holds each
    verdict, its minimal input and its fixture; the traceback stops at the caller (pytest hides
    this frame). Meant for a user's own tests."""
    __tracebackhide__ = True
    _unknown_keywords("assert_robust", inspect.signature(hunt_kernel), kwargs)
    report = hunt_kernel(fn, **kwargs)
    if report.passed and report.cut_short and not any(r.examples for r, _ in report.results):
        # A hunt that judged nothing is no evidence: not a pass (as the CLI's exit status 5). The
        # session's budget spent skips the test, as a hunt that starts after it; the call's own fails.
        why = "nothing judged: the time budget was spent before the first example"
        session = current_defaults()
        if (session.when_spent is not None and session.deadline is not None
                and time.monotonic() >= session.deadline):
            session.when_spent(why)
        raise AssertionError(f"normprops: {why}; give the hunt more time (time_budget=)")
    if report.passed:
        return report
    target = report.targets[0]
    lines = [f"normprops: {target['label']} ({target['framework']} {target['dtype']}) failed "
             f"{len(report.failures)} propert{'y' if len(report.failures) == 1 else 'ies'}:"]
    lines += [format_finding(f, indent="  ") for f in report.failures]
    if report.settings.get("seed") is not None:
        lines.append(f"seed {report.settings['seed']}: pass seed={report.settings['seed']} to repeat "
                     f"this hunt")
    elif hypothesis_settings().derandomize:
        lines.append("derandomized (a profile such as ci): the same call repeats this hunt")
    lines += report.notes
    lines += report.hints
    if any(f.fixture for f in report.failures):
        module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if module and name and "<" not in name and module != "__main__":
            lines.append(f"replay: {_import_path(module)}normprops replay {flag('op')} {target['op']} "
                         f"{flag('impl')} {module}:{name} {flag('fixtures_dir')} "
                         f"{shlex.quote(report.settings['fixtures_dir'])}"
                         f"{replay_flags(target, policy=report.settings['policy'])}")
        else:
            lines.append(f"replay: {name or fn!r} cannot be imported by name (defined inside a function, "
                         f"a lambda or a script run as __main__); define it at a module's top level to "
                         f"replay its fixtures with normprops replay")
    raise AssertionError("\n".join(lines))


def _import_path(module: str | None) -> str:
    """``PYTHONPATH=DIR `` where the replay command could not import ``module`` from the current
    directory: a kernel defined in a test file, which pytest imported from the test's folder."""
    file = getattr(sys.modules.get(module or ""), "__file__", None)
    if not module or not file:
        return ""
    root = Path(file).resolve().parents[module.count(".")]
    if root == Path.cwd().resolve() or "site-packages" in root.parts:
        return ""
    # Ahead of the user's own PYTHONPATH, which may be what finds normprops or their kernels' imports.
    keep = ":$PYTHONPATH" if os.environ.get("PYTHONPATH") else ""
    return f"PYTHONPATH={shlex.quote(os.path.relpath(root))}{keep} "


def replay_flags(target: dict[str, Any], *, policy: str = "default") -> str:
    """The flags that make ``normprops replay`` take the fixtures of the kernel ``target`` describes
    (:func:`target_json`) and judge them as the hunt did, under the hunt's tolerance ``policy``
    (:meth:`~normprops.declaration.Declaration.to_flags`)."""
    return Declaration.from_json(target).to_flags(policy=policy)


# help(), IDEs and inspect show hunt_kernel's keywords, which assert_robust takes as they are.
assert_robust.__signature__ = inspect.signature(hunt_kernel)  # type: ignore[attr-defined]


#: hunt_kernel's call_timeout default, the object itself (see hunt_kernel).
_DEFAULT_CALL_TIMEOUT = inspect.signature(hunt_kernel).parameters["call_timeout"].default
