"""Properties a kernel does not promise but that are worth knowing: hunted on their own and shown
as information, never as a failure (``Target.information``: range safety for a norm that does not
ask for it with ``--check range_safety``).

The hunt proper does not judge them (:func:`normprops.properties.evaluate` skips what a target does
not promise); :func:`hunt_information` hunts the families that show one with that property alone
judged, and :class:`InformedResult` carries what it found beside the family's judged findings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from normprops.hunt import Finding, HuntConfig, HuntResult, hunt
from normprops.launch import Target
from normprops.ops import IGNORABLE, get_op

__all__ = ["InformedResult", "WORDS", "hunt_information", "information_of", "shown_in"]

def shown_in(prop: str, op: str) -> tuple[str, ...]:
    """The families whose rows the informative property ``prop`` is judged on for ``op``: for
    range safety, the families that draw rows outside the op's accuracy domain (judge.range_rows)."""
    if prop != "range_safety":
        raise ValueError(f"prop must be an informative property (range_safety) but was {prop!r}")
    return get_op(op).range_families


#: What a finding of each means, in a matrix cell and a report line.
WORDS: dict[str, str] = {"range_safety": "not range-safe"}


@dataclass(frozen=True)
class InformedResult(HuntResult):
    """A family hunted, with the findings of properties the target does not promise (shown as
    information; ``passed``, ``findings`` and ``properties`` hold the judged ones only)."""

    information: tuple[Finding, ...] = ()


def information_of(result: HuntResult) -> tuple[Finding, ...]:
    """The information findings of ``result`` (none for a plain :class:`HuntResult`)."""
    return result.information if isinstance(result, InformedResult) else ()


def hunt_information(target: Target, result: HuntResult, *, config: HuntConfig) -> HuntResult:
    """``result`` (``target`` hunted on one family) with what the target's informative properties
    show in that family, each hunted alone; ``result`` itself when none applies or the hunt could
    not go on. A contract failure that stops the target (a hang) is kept as the judged finding it is."""
    shown = frozenset(p for p in target.information if result.family in shown_in(p, target.op))
    if not shown or result.fatal or result.interrupted or result.cut_short:
        return result
    alone = target.declared(opt_in=target.opt_in | shown, ignore=IGNORABLE - shown)
    extra = hunt(alone, family=result.family, config=config)
    stopped = tuple(f for f in extra.findings if extra.fatal and f.property == "contract")
    values = {f.name: getattr(result, f.name) for f in fields(HuntResult)}
    values.update(findings=result.findings + stopped, fatal=extra.fatal,
                  interrupted=extra.interrupted, cut_short=extra.cut_short,
                  examples=result.examples + extra.examples,
                  elapsed_s=result.elapsed_s + extra.elapsed_s)
    return InformedResult(**values, information=tuple(f for f in extra.findings if f.property in shown))
