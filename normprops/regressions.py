"""Regression fixtures: failing inputs saved as data, replayed against every kernel that claims them.

A fixture is one JSON file, ``<dir>/<op>/<family>-<id>.json``, holding the minimal and (where it
differs) the worst input of one finding (one property of one kernel failing in one family) with
its verdicts, the versions that produced it and when it was saved (``saved``, ISO 8601 UTC).
Values are exact: arrays of up to 256 elements are lists of hex floats (``float.hex``, readable
and exact); larger ones are base64 of little-endian float32 bytes (of bfloat16 bytes where every
value is one); a masked softmax's mask is rows of 0s and 1s (or base64 of its packed bits), its
scale and additive fill hex floats. No pickle, no seeds (numpy
does not promise seed streams across versions). ``<id>`` is a hash of the kernel, the property and
the minimal input: the same finding found twice is written once, and the same input failing two
kernels gives two files. Files are written atomically (temporary file, then rename).

A replay runs the fixtures that belong to a kernel (:func:`select_fixtures`: its op, its storage
type, the widths it accepts), each judged on every property, its own first (:func:`replay_fixture`).

Loading checks everything it reads: a truncated, garbled or incomplete file raises
:class:`~normprops.errors.FixtureError` naming the file and what is wrong, never anything else.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import hypothesis
import numpy as np

from normprops import interrupt
from normprops.case import Case, ShapeConstraints
from normprops.dtypes import DTYPES, to_dtype
from normprops.errors import FatalTargetError, FixtureError, WriteError
from normprops.fixture_codec import (
    decode_array,
    decode_case,
    decode_mask,
    encode_array,
    encode_case,
    encode_mask,
)
from normprops.hunt import Finding, HuntResult, with_fixtures
from normprops.jsonio import read_json_document, write_json_atomically
from normprops.judge import Verdict
from normprops.launch import FILE_SUFFIXES, Target, same_source
from normprops.ops import OPS, PROPERTIES, get_op, is_backward
from normprops.properties import evaluate
from normprops.strategies import FAMILIES, families_for

__all__ = ["dloss_reduction", "Fixture", "save_fixture", "save_findings", "load_fixture", "iter_fixtures",
           "list_fixtures", "FixtureListing", "Unreadable", "select_fixtures", "Selection", "Skipped",
           "OTHER_DTYPE", "OTHER_WIDTH", "encode_array", "decode_array", "replay", "replay_fixture",
           "replay_selection", "Replayed", "case_id", "FORMAT", "encode_mask", "decode_mask"]

FORMAT = "normprops-fixture/1"
def case_id(case: Case, *, kernel: str | None = None, property: str | None = None) -> str:
    """A short hash of the input, and of the kernel and property whose finding it is."""
    h = hashlib.sha256()
    h.update(f"{case.op}/{case.family}/{case.shape}".encode())
    if case.dtype != "float32":  # float32 ids stay what they were before narrow types existed
        h.update(case.dtype.encode())
    for a in case.float_arrays():
        h.update(np.ascontiguousarray(a, dtype="<f4").tobytes())
    if get_op(case.op).named is not None:  # the mask and the scalars by name
        for name, value in case.fields().items():
            if isinstance(value, np.ndarray) and value.dtype == bool:
                h.update(name.encode() + np.packbits(value).tobytes() + str(value.shape).encode())
            elif isinstance(value, float):
                h.update(name.encode() + value.hex().encode())
    else:
        if case.eps is not None:
            h.update(float(case.eps).hex().encode())
        if case.mask is not None:
            h.update(np.packbits(case.mask).tobytes() + float(case.scale).hex().encode())
            if case.mask_fill is not None:
                h.update(float(case.mask_fill).hex().encode())
    if kernel is not None:
        h.update(f"kernel={kernel}/property={property}".encode())
    return h.hexdigest()[:12]


def _versions() -> dict[str, str]:
    from normprops import __version__

    return {"normprops": __version__, "numpy": np.__version__,
            "hypothesis": hypothesis.__version__, "python": platform.python_version()}


def save_fixture(finding: Finding, *, target: Target, directory: Path) -> Path:
    """Write ``finding``'s minimal and worst inputs under ``directory/<op>/`` (the worst only where
    it is another input); return the path.

    The same finding (kernel, property, minimal input) is written once. The folders are created
    as needed; :class:`~normprops.errors.WriteError` names the file that could not be written."""
    kernel = target.kernel
    fixture_id = case_id(finding.minimal, kernel=kernel, property=finding.property)
    folder = Path(directory) / target.op
    path = folder / f"{finding.family}-{fixture_id}.json"
    if path.exists():
        if not _another_source(path, target.source):
            return path
        # The same finding of a kernel of the same name defined elsewhere: a file of its own.
        fixture_id = case_id(finding.minimal, kernel=f"{kernel}@{target.source}",
                             property=finding.property)
        path = folder / f"{finding.family}-{fixture_id}.json"
        if path.exists():
            return path
    doc = {
        "format": FORMAT,
        "id": fixture_id,
        "op": target.op,
        "impl": target.name,
        "backend": target.backend,
        **({} if target.source is None else {"source": target.source}),
        "framework": target.adapter.framework,
        "family": finding.family,
        "property": finding.property,
        "message": finding.message,
        "verdict": finding.verdict.to_json(),
        "minimal": encode_case(finding.minimal),
    }
    worst = encode_case(finding.worst)
    if worst != doc["minimal"]:  # the same input is kept once
        doc.update(worst_verdict=finding.worst_verdict.to_json(), worst=worst)
    doc |= {
        "versions": _versions(),
        "saved": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create the fixtures folder {folder}: {exc.strerror or exc}") from exc
    write_json_atomically(path, doc)
    return path


def _another_source(path: Path, source: str | None) -> bool:
    """Whether the fixture at ``path`` records a kernel source that is not ``source`` (a file that
    cannot be read is taken as the same kernel's, as before sources were recorded)."""
    if source is None:
        return False
    try:
        theirs = read_json_document(path, format=FORMAT, kind="fixture", error=ValueError).get("source")
    except ValueError:
        return False
    return isinstance(theirs, str) and not same_source(theirs, source)


def save_findings(result: HuntResult, *, target: Target, directory: Path) -> HuntResult:
    """Save every finding of ``result``; the result with their fixture paths."""
    paths = {f.property: save_fixture(f, target=target, directory=directory)
             for f in result.findings}
    return with_fixtures(result, paths)


@dataclass(frozen=True)
class Fixture:
    path: Path
    id: str
    op: str
    impl: str
    backend: str
    family: str
    property: str
    message: str
    minimal: Case
    worst: Case | None
    saved: datetime | None = None  # when it was written, where the fixture records it
    source: str | None = None  # where its kernel is defined (Target.source), where recorded

    def cases(self) -> tuple[Case, ...]:
        return (self.minimal,) if self.worst is None else (self.minimal, self.worst)

    @property
    def kernel(self) -> str:
        """The kernel whose finding it holds, as ``backend:name`` (``python:rms_norm``)."""
        return f"{self.backend}:{self.impl}"

    def of_kernel(self, name: str) -> bool:
        """Whether it holds a finding of the kernel ``name``: ``rms_norm``, ``python:rms_norm`` or
        where it lives, ``MODULE:FUNC`` (``FILE:KERNEL`` for CUDA source)."""
        if name in (self.impl, self.kernel):
            return True
        return self.source is not None and same_source(name, self.source)

    def of_package(self, name: str) -> bool:
        """Whether its kernel lives in a module of the package ``name`` names, under that name:
        ``pkg:rms_norm`` for ``pkg._impl:rms_norm``, a function the package re-exports."""
        package, _, attr = name.rpartition(":")
        if self.source is None or not package or "/" in package:
            return False
        module, _, what = self.source.rpartition(":")
        if "/" in module or module.endswith(FILE_SUFFIXES):  # a file: a CUDA source, a script
            return False
        return what == attr and module.startswith(package + ".")

    def saved_at(self) -> tuple[datetime, bool]:
        """When it was saved (UTC), and whether the fixture says so itself; if it does not, its
        file's modification time, which a copy or a checkout resets."""
        if self.saved is not None:
            return self.saved, True
        return datetime.fromtimestamp(self.path.stat().st_mtime, tz=timezone.utc), False

    @property
    def dtype(self) -> str:
        """The storage type its values are exact in."""
        return self.minimal.dtype

    def fits(self, dtype: str) -> bool:
        """Whether a kernel of storage type ``dtype`` can replay it (its values are exact there)."""
        return all(a is None or np.array_equal(to_dtype(a, dtype), a, equal_nan=True)
                   for case in self.cases() for a in case.float_arrays())


def _text(doc: dict[str, Any], key: str, allowed: Any = None) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{key}' is missing or not a string")
    if allowed is not None and value not in allowed:
        raise ValueError(f"'{key}' is {value!r}, not one of {', '.join(allowed)}")
    return value


def _saved(doc: dict[str, Any]) -> datetime | None:
    if "saved" not in doc:
        return None
    try:
        saved = datetime.fromisoformat(doc["saved"])
    except (TypeError, ValueError):
        raise ValueError(f"'saved' is {doc['saved']!r}, not an ISO 8601 time") from None
    return saved.astimezone(timezone.utc) if saved.tzinfo else saved.replace(tzinfo=timezone.utc)


def load_fixture(path: Path) -> Fixture:
    """Read one fixture. Raises :class:`~normprops.errors.FixtureError` naming the file and what is
    wrong (unreadable, not JSON, not a fixture, a missing or malformed part, another op's folder)."""
    path = Path(path)
    doc = read_json_document(path, format=FORMAT, kind="fixture", error=FixtureError)
    try:
        op = _text(doc, "op", OPS)
        folder = path.parent.name
        # Replayed with the folder's op, it would read as a contract failure of that op's kernel.
        if folder in OPS and folder != op:
            raise ValueError(f"the file's op is {op!r} but its folder's is {folder!r} (each op's "
                             f"fixtures live in DIR/<op>/); move it to {path.parent.parent / op}/")
        family = _text(doc, "family", families_for(op) if is_backward(op) or OPS[op].named is not None
                       else FAMILIES)
        prop = _text(doc, "property", PROPERTIES)
        minimal = decode_case(doc.get("minimal"), op=op, family=family, what="minimal")
        worst = (decode_case(doc["worst"], op=op, family=family, what="worst")
                 if "worst" in doc else None)
        return Fixture(path, _text(doc, "id"), op, _text(doc, "impl"), _text(doc, "backend"),
                       family, prop, str(doc.get("message", "")), minimal, worst,
                       saved=_saved(doc), source=_text(doc, "source") if "source" in doc else None)
    except ValueError as exc:
        raise FixtureError(f"{path}: {exc}") from None


def iter_fixtures(directory: Path, *, op: str | None = None) -> list[Path]:
    """Every fixture file under ``directory`` (``directory/<op>/*.json``), sorted."""
    root = Path(directory)
    pattern = f"{op}/*.json" if op else "*/*.json"
    return sorted(p for p in root.glob(pattern) if not p.name.startswith("."))


@dataclass(frozen=True)
class Unreadable:
    """A fixture file that cannot be read, and why (the message names the file)."""

    path: Path
    reason: str


@dataclass(frozen=True)
class FixtureListing:
    """The fixtures under a directory: those that load, sorted by path, and those that do not."""

    fixtures: tuple[Fixture, ...]
    unreadable: tuple[Unreadable, ...]

    @property
    def paths(self) -> list[Path]:
        return sorted([f.path for f in self.fixtures] + [u.path for u in self.unreadable])


def list_fixtures(directory: Path, *, op: str | None = None) -> FixtureListing:
    """Load every fixture under ``directory`` (of ``op``, or of every op); a file that cannot be
    read is listed as :class:`Unreadable`, never raised."""
    if op is not None and op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)} but was {op!r}")
    fixtures: list[Fixture] = []
    unreadable: list[Unreadable] = []
    for path in iter_fixtures(directory, op=op):
        if path.parent.name not in OPS:  # replay and prune read DIR/<op>/ only
            unreadable.append(Unreadable(path, f"{path}: not in an op's folder, so never replayed; "
                                               f"fixtures live in DIR/<op>/ ({', '.join(OPS)})"))
            continue
        try:
            fixtures.append(load_fixture(path))
        except FixtureError as exc:
            unreadable.append(Unreadable(path, str(exc)))
    return FixtureListing(tuple(fixtures), tuple(unreadable))


#: Why a fixture is left out of a replay: it holds another storage type than the one replayed,
#: rows of a width the kernel does not accept, or (a loss's gradient) a dloss shaped for another
#: reduction than the kernel's (a mean's is one number, a per-row loss's one per row).
OTHER_DTYPE, OTHER_WIDTH, OTHER_REDUCTION = "dtype", "width", "reduction"


def dloss_reduction(fixture: Fixture) -> str | None:
    """The loss reduction a loss gradient's fixture has its dloss shaped for; None for any other."""
    case = fixture.minimal
    return getattr(case, "reduction", None) if getattr(case, "dloss", None) is not None else None


@dataclass(frozen=True)
class Skipped:
    fixture: Fixture
    why: str  # OTHER_DTYPE, OTHER_WIDTH or OTHER_REDUCTION
    reason: str  # in words, for a report


@dataclass(frozen=True)
class Selection:
    """The fixtures a kernel is replayed on, each with the storage type it is replayed in, and
    those left out."""

    replays: tuple[tuple[Fixture, str], ...]
    skipped: tuple[Skipped, ...]

    def skipped_for(self, why: str) -> list[Fixture]:
        return [s.fixture for s in self.skipped if s.why == why]


def select_fixtures(fixtures: Iterable[Fixture], *, dtype: str = "float32", all_dtypes: bool = False,
                    widths: ShapeConstraints = ShapeConstraints(),
                    reduction: str | None = None) -> Selection:
    """The fixtures that belong to a kernel of storage type ``dtype`` taking rows of ``widths``:
    those saved in ``dtype`` (with ``all_dtypes``, every fixture, each in its own storage type) whose
    rows all have a width it accepts, and, for a loss's gradient of ``reduction`` (None: any),
    whose dloss is shaped for it. A fixture holds the failure of one kernel in one storage type;
    replayed on a kernel of another, it tests something that kernel never promised (a float32
    kernel handed bfloat16 arrays fails its contract; a per-row gradient handed a mean's one dloss
    too)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} but was {dtype!r}")
    replays: list[tuple[Fixture, str]] = []
    skipped: list[Skipped] = []
    for fixture in fixtures:
        outside = [] if OPS[fixture.op].named is not None else sorted(  # widths are rows'
            {c.cols for c in fixture.cases() if not widths.allows(c.cols)})
        if not all_dtypes and fixture.dtype != dtype:
            skipped.append(Skipped(fixture, OTHER_DTYPE, f"saved in {fixture.dtype}, not {dtype}"))
        elif outside:
            skipped.append(Skipped(fixture, OTHER_WIDTH,
                                   f"rows {outside[0]} wide, outside {widths.describe()}"))
        elif reduction is not None and dloss_reduction(fixture) not in (None, reduction):
            why = f"its dloss is for reduction={dloss_reduction(fixture)!r}, not {reduction!r}"
            skipped.append(Skipped(fixture, OTHER_REDUCTION, why))
        else:
            replays.append((fixture, fixture.dtype if all_dtypes else dtype))
    return Selection(tuple(replays), tuple(skipped))


def _judge(target: Target, case: Case, *, prop: str, policy: str) -> list[Verdict]:
    """Every failure of ``target`` on ``case``, those of ``prop`` first.

    The metamorphic properties (determinism, batch, shift and scale invariance) are judged only on
    an output that passes the others. The hunt that saved a fixture of one of them had set aside
    the properties it had already found, so its input may well fail those too: they are set aside
    here in turn until ``prop`` itself is judged, and the fixture fails under its own name."""
    found = list(evaluate(target, case, policy=policy).failures)
    skip = frozenset(v.property for v in found)
    while found and prop not in skip and "contract" not in skip:
        more = evaluate(target, case, policy=policy, skip=skip).failures
        if not more:
            break
        found += more
        skip |= {v.property for v in more}
    return sorted(found, key=lambda v: v.property != prop)


@dataclass(frozen=True)
class Replayed:
    """One fixture replayed: each of its inputs (the minimal, then the worst) as the target took
    it, with its failures, those of the fixture's own property first."""

    fixture: Fixture
    judged: tuple[tuple[Case, tuple[Verdict, ...]], ...]
    stopped: str | None = None  # why the target cannot be called again (the replay stops here)
    # The fixture's own property is one the target does not promise (--ignore, or an optional
    # property not asked for): it was not judged, so passing says nothing about it.
    unjudged: bool = False

    @property
    def dtype(self) -> str:
        """The storage type it was replayed in."""
        return self.judged[0][0].dtype

    @property
    def failures(self) -> list[Verdict]:
        found = [v for _, verdicts in self.judged for v in verdicts]
        return sorted(found, key=lambda v: v.property != self.fixture.property)

    @property
    def passed(self) -> bool:
        return not self.failures

    def finding(self) -> Finding | None:
        """The failure as a hunt reports one (None when the fixture passes): the verdict of the
        fixture's own property where it still fails, on the input it failed, and the other
        failing input as the worst."""
        failing = [(case, verdicts) for case, verdicts in self.judged if verdicts]
        if not failing:
            return None
        own = [item for item in failing if item[1][0].property == self.fixture.property]
        case, verdicts = (own or failing)[0]
        worst, worst_verdicts = next(((c, vs) for c, vs in failing if c is not case),
                                     (case, verdicts))
        return Finding(verdicts[0].label, self.fixture.family, verdicts[0].property, verdicts[0],
                       case, worst, worst_verdicts[0], fixture=self.fixture.path)


def replay_fixture(target: Target, fixture: Fixture, *, policy: str = "default") -> Replayed:
    """Run ``target`` on the fixture's inputs. The fixture's values must be exact in the target's
    storage type (:meth:`Fixture.fits`). A target that cannot be called again (a hang, a GPU
    fault) ends it: a ``contract`` failure on the input that did it, and ``stopped`` says why."""
    if not fixture.fits(target.dtype):
        raise ValueError(f"{fixture.path} holds {fixture.dtype} values that {target.label} "
                         f"({target.dtype}) cannot take exactly")
    judged: list[tuple[Case, tuple[Verdict, ...]]] = []
    for case in fixture.cases():
        if case.dtype != target.dtype:
            case = case.replace(dtype=target.dtype)
        if case.mask_fill != target.mask_fill:  # the mask as this kernel takes it
            case = case.replace(mask_fill=target.mask_fill)
        try:
            found = _judge(target, case, prop=fixture.property, policy=policy)
        except FatalTargetError as exc:
            verdict = Verdict.contract(target.label, fixture.family,
                                       f"{exc} (input shape {case.shape}); replay stopped")
            judged.append((case, (verdict,)))
            return Replayed(fixture, tuple(judged), stopped=str(exc))
        judged.append((case, tuple(found)))
    return Replayed(fixture, tuple(judged), unjudged=fixture.property in target.unjudged)


def replay_selection(selection: Selection, target_for: Callable[[str], Target], *,
                     policy: str = "default") -> Iterator[Replayed]:
    """Replay each fixture of ``selection`` on ``target_for(its storage type)``, in order; the
    replay ends after a fixture on which the target stopped (it cannot be called again)."""
    for fixture, dtype in selection.replays:
        interrupt.check()  # a Ctrl-C that a finalizer swallowed still stops the replay here
        replayed = replay_fixture(target_for(dtype), fixture, policy=policy)
        yield replayed
        if replayed.stopped is not None:
            return


def replay(target: Target, fixture: Fixture, *, policy: str = "default") -> list[Verdict]:
    """Run ``target`` on the fixture's inputs; the failures (empty when it passes), those of the
    fixture's own property first. Raises :class:`~normprops.errors.FatalTargetError` when the
    target cannot be called again."""
    replayed = replay_fixture(target, fixture, policy=policy)
    if replayed.stopped is not None:
        raise FatalTargetError(replayed.stopped)
    return replayed.failures
