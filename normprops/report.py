"""Everything people read: case descriptions, findings, the robustness matrix, and the JSON report.

The CLI, the Python API and the pytest plugin all format through here, so a verdict reads the same
wherever it shows up. The JSON report (:class:`Report`) is written atomically, on every exit path,
with an ``error`` field when the run did not finish; :func:`load_report` reads one back, checking
what it reads (for ``normprops report merge``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from normprops.case import Case
from normprops.errors import WriteError
from normprops.hunt import Finding, HuntResult
from normprops.information import WORDS, information_of
from normprops.judge import Verdict
from normprops.masking import describe_fill
from normprops.ops import PROPERTIES
from normprops.strategies import FAMILIES

__all__ = ["REPORT_FORMAT", "Cell", "Report", "declared", "declared_json", "describe_case",
           "format_finding", "render_matrix",
           "matrix_legend", "cell_text", "cell_from_json", "load_report", "merge_reports",
           "matrix_png", "ReportError", "IncompleteMerge", "HUNT_KERNELS", "SHARD_SETTINGS",
           "SHORT", "write_json_atomically", "check_can_create_in"]

REPORT_FORMAT = "normprops-report/1"

#: Short names of the properties for matrix cells (the legend spells them out).
SHORT = {"contract": "contract", "finite": "finite", "nan_propagation": "nan",
         "masked_rows": "masked", "range_safety": "range", "accuracy": "acc", "sum_to_one": "sum",
         "bounds": "bounds", "argmax": "argmax", "determinism": "det", "batch_invariance": "batch",
         "shift_invariance": "shift", "scale_invariance": "scale"}


class ReportError(ValueError):
    """A JSON report that cannot be read: the message names the file and what is wrong."""


def _value(v: float) -> str:
    return np.format_float_positional(np.float32(v), unique=True, trim="-") if abs(v) >= 1e-4 or v == 0 \
        else repr(float(np.float32(v)))


def describe_case(case: Case, verdict: Verdict | None = None) -> str:
    """A few lines a person can read: shape, parameters, and the failing row's input.

    When the verdict's output came from another input than the case (a stress batch, a reordered
    batch), that input is named first; its failing row is a copy of one of the case's rows."""
    eps = "" if case.eps is None else f", eps={_value(case.eps)}"
    if case.mask is not None:
        eps += f", {describe_fill(case.mask_fill)} mask"
    lines = [f"input: {case.rows} x {case.cols} {case.dtype}{eps}; drawn with "
             + ", ".join(f"{k}={v!r}" for k, v in case.params.items())]
    row = None if verdict is None else verdict.row
    col = None if verdict is None else verdict.col
    if verdict is not None and verdict.batch:
        lines.append(f"failing output: {verdict.batch}")
    if row is not None and not 0 <= row < case.rows:
        lines.append(f"(row {row} is outside the case's {case.rows} rows)")
        row = None
    if col is not None and not 0 <= col < case.cols:
        col = None
    r = 0 if row is None else row
    lines.append(_row_line(case, r))
    if case.cols > 12 and col is not None:
        lines.append(f"{'y' if case.op == 'softmax_backward' else 'x'}[{r}, {col}] = "
                     f"{float(case.x[r, col])!r}")
    # The other rows too, when there are few: a row can spoil its neighbours (a batch-wide max, a
    # NaN that leaks), and the failing row alone would then look harmless.
    if case.rows <= 4:
        lines += [_row_line(case, other) for other in range(case.rows) if other != r]
    if case.dy is not None:  # a gradient op's upstream gradient, the same rows
        lines.append(_row_line(case, r, "dy"))
        if case.rows <= 4:
            lines += [_row_line(case, other, "dy") for other in range(case.rows) if other != r]
    for name in ("gamma", "beta"):
        arr = getattr(case, name)
        if arr is not None and case.cols <= 12:
            lines.append(f"{name} = [{', '.join(repr(float(v)) for v in arr)}]")
        elif arr is not None and col is not None:
            lines.append(f"{name}[{col}] = {float(arr[col])!r}")
    return "\n".join(lines)


def _row_line(case: Case, r: int, name: str | None = None) -> str:
    name = name or ("y" if case.op == "softmax_backward" else "x")  # the array the kernel takes
    values = (case.dy if name == "dy" else case.x)[r]
    if case.cols <= 12:
        line = f"{name}[{r}] = [{', '.join(repr(float(v)) for v in values)}]"
    else:
        finite = values[np.isfinite(values)].astype(np.float64)
        stats = (f"min {finite.min():.6g}, max {finite.max():.6g}, mean {finite.mean():.6g}, "
                 f"std {finite.std():.6g}" if finite.size else "no finite values")
        line = f"{name}[{r}]: {stats}; {np.count_nonzero(~np.isfinite(values))} non-finite"
    return line if case.mask is None or name == "dy" else f"{line}; {_mask_text(case.mask[r])}"


def _mask_text(keep: np.ndarray) -> str:
    """Which columns of a row a mask keeps: as 0s and 1s for a short row, else as runs."""
    if keep.size <= 64:
        return "mask " + "".join("1" if v else "0" for v in keep)
    edges = np.flatnonzero(np.diff(np.concatenate([[False], keep, [False]]).astype(np.int8)))
    runs = [f"[{a}, {b})" for a, b in zip(edges[::2], edges[1::2])]
    shown = ", ".join(runs[:4]) + (f" and {len(runs) - 4} more" if len(runs) > 4 else "")
    return f"mask keeps {int(keep.sum())} of {keep.size}" + (f": {shown}" if runs else "")


def format_finding(finding: Finding, *, indent: str = "    ") -> str:
    """The verdict, the minimal input, the worst seen and the fixture, indented."""
    lines = [finding.message]
    lines += ["  " + line for line in describe_case(finding.minimal, finding.verdict).splitlines()]
    if finding.worst is not finding.minimal:
        lines.append(f"  worst seen: {finding.worst_verdict.message()}")
    if finding.flaky:
        lines.append("  (flaky: the failure did not reproduce on replay; nondeterminism?)")
    if finding.fixture is not None:
        lines.append(f"  fixture: {finding.fixture}")
    return "\n".join(indent + line for line in lines)


def declared(*, passed: bool, properties: Iterable[str], stopped: bool, expected: str | None,
             bug_property: str | None = None) -> bool:
    """Whether a registry cell behaved as declared: a claim clean, a known bug caught on its own
    property (``bug_property``; any property when None). A cell cut short (Ctrl-C, a time budget)
    before anything was found is no surprise, nor is an unclaimed family or a kernel that declares
    nothing (``expected`` None: anything found is a finding, not a surprise of the registry)."""
    if stopped and passed:
        return True
    if expected == "bug":
        return not passed and (bug_property is None or bug_property in properties)
    if expected == "claim":
        return passed
    return True


def cell_text(result: HuntResult | None, *, expected: str | None = None,
              bug_property: str | None = None) -> str:
    """A matrix cell. ``expected`` is the registry's word for the family: "claim", "bug" (the
    kernel's known bug lives here), "unclaimed", or None for a kernel that declares nothing."""
    if result is None:
        return "-"
    return _cell(result.passed, result.properties, result.interrupted or result.cut_short, expected,
                 information=[f.property for f in information_of(result)], bug_property=bug_property)


def _cell(passed: bool, properties: Iterable[str], interrupted: bool, expected: str | None, *,
          information: Iterable[str] = (), bug_property: str | None = None) -> str:
    text = _judged_cell(passed, tuple(properties), interrupted, expected, bug_property)
    words = ", ".join(WORDS.get(p, p) for p in information)
    if not words:
        return text
    return words if text == "pass" else f"{text} ({words})"


def _judged_cell(passed: bool, properties: tuple[str, ...], interrupted: bool, expected: str | None,
                 bug_property: str | None) -> str:
    props = "+".join(SHORT.get(p, p) for p in properties)
    if interrupted and passed:
        return "stopped"
    if expected == "bug":
        if passed:
            return "MISSED"
        # A known bug is caught on its own property; a cell that failed only others missed it.
        return "caught" if bug_property is None or bug_property in properties else f"MISSED({props})"
    if expected == "claim":
        return "pass" if passed else f"FAIL:{props}"
    if expected == "unclaimed":
        return "(pass)" if passed else f"(fail:{props})"
    return "pass" if passed else props


def cell_from_json(result: dict[str, Any]) -> Cell:
    """The matrix cell of one entry of a JSON report's ``results``."""
    backend = result.get("backend") or ""
    op = result.get("op") or result["target"].split("[", 1)[0]
    kernel = result.get("kernel") or result["target"]
    return Cell(f"{op} ({backend})" if backend else op, kernel, result["family"],
                _cell(result["passed"], result["properties"],
                      bool(result.get("interrupted") or result.get("cut_short")), result.get("expected"),
                      information=result.get("information", ()), bug_property=result.get("bug_property")))


def declared_json(result: dict[str, Any]) -> bool:
    """:func:`declared` for one entry of a JSON report's ``results``."""
    return declared(passed=result["passed"], properties=result["properties"],
                    stopped=bool(result.get("interrupted") or result.get("cut_short")),
                    expected=result.get("expected"), bug_property=result.get("bug_property"))


@dataclass(frozen=True)
class Cell:
    group: str  # one table per group: "softmax (numpy)", "rmsnorm"
    kernel: str
    family: str
    text: str


def render_matrix(cells: Iterable[Cell], *, sort: bool = False) -> str:
    """kernel x family, one table per group; kernels and families in first-seen order, or sorted
    (``sort``: cells gathered from parallel workers come in no particular order): groups and
    kernels by name, families in the hunt's own order."""
    out: list[str] = []
    cells = list(cells)
    order = sorted if sort else list
    rank = {f: i for i, f in enumerate(FAMILIES)}
    for group in order(dict.fromkeys(c.group for c in cells)):
        mine = [c for c in cells if c.group == group]
        families = list(dict.fromkeys(c.family for c in mine))
        if sort:
            families.sort(key=lambda f: (rank.get(f, len(rank)), f))
        kernels = order(dict.fromkeys(c.kernel for c in mine))
        grid = {(c.kernel, c.family): c.text for c in mine}
        width = {f: max(len(f), *(len(grid.get((k, f), "-")) for k in kernels)) for f in families}
        name_w = max(len(k) for k in kernels)
        out.append(group)
        out.append("  " + " " * name_w + "  " + "  ".join(f"{f:>{width[f]}s}" for f in families))
        for k in kernels:
            out.append("  " + f"{k:{name_w}s}" + "  "
                       + "  ".join(f"{grid.get((k, f), '-'):>{width[f]}s}" for f in families))
    return "\n".join(out)


def matrix_legend(cells: Iterable[Cell]) -> str:
    """What the cells of this matrix mean, and the short property names used in it."""
    informed = {c.text for c in cells}
    texts = {_without_information(t) for t in informed}
    words = {w.strip("()").split(":", 1)[0] for w in texts}
    parts = []
    if "pass" in words:
        parts.append("pass: hunted, nothing found")
    for prop, word in WORDS.items():
        if any(word in t for t in informed):
            parts.append(f"{word}: information, not a failure ({prop} is hunted but not judged; "
                         f"--check {prop} judges it)")
    if "caught" in words or "MISSED" in words:
        parts.append("caught / MISSED: the kernel's known bug found / not found")
    if "FAIL" in words:
        parts.append("FAIL:p: a family the kernel claims failed property p")
    if any(t.startswith("(") for t in texts):
        parts.append("(pass) / (fail:p): a family the kernel does not claim")
    if "-" in texts:
        parts.append("-: not hunted")
    if "stopped" in texts:
        parts.append("stopped: cut short (Ctrl-C, the time budget) before anything was found")
    known = {"pass", "caught", "MISSED", "FAIL", "-", "stopped", ""}
    if any(not t.startswith("(") and t.split(":", 1)[0] not in known for t in texts):
        parts.append("a+b: the properties that failed")
    used = {p for t in texts for p in t.strip("()").split(":", 1)[-1].split("+")}
    short = [f"{s} {name}" for name, s in SHORT.items() if s in used and s != name]
    if short:
        parts.append("properties: " + ", ".join(short))
    return "legend: " + "; ".join(parts)


def _without_information(text: str) -> str:
    """A cell's text less its information words ("not range-safe"): what was judged."""
    for word in WORDS.values():
        text = text.replace(f" ({word})", "").replace(word, "")
    return text


def _finite_or_text(v: float) -> float | str:
    return v if math.isfinite(v) else repr(float(v))


def result_json(result: HuntResult, *, expected: str | None = None,
                bug_property: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "target": result.label,
        "kernel": result.kernel,
        "op": result.op,
        "backend": result.backend,
        "family": result.family,
        "passed": result.passed,
        "properties": list(result.properties),
        "examples": result.examples,
        "elapsed_s": round(result.elapsed_s, 4),
        "max_ratio": _finite_or_text(result.max_ratio),
        "warnings": result.warnings,
    }
    if result.first_warning:
        doc["first_warning"] = result.first_warning
    if result.interrupted:
        doc["interrupted"] = True
    if result.cut_short:
        doc["cut_short"] = True
    if result.fatal:
        doc["fatal"] = True
    if information_of(result):
        doc["information"] = [f.property for f in information_of(result)]
    if expected is not None:
        doc["expected"] = expected
        doc["as_declared"] = declared(passed=result.passed, properties=result.properties,
                                      stopped=result.interrupted or result.cut_short,
                                      expected=expected, bug_property=bug_property)
    if bug_property is not None:
        doc["bug_property"] = bug_property
    return doc


def failure_json(finding: Finding, *, expected: str | None = None) -> dict[str, Any]:
    doc = finding.verdict.to_json()
    doc["target"] = finding.label
    doc["fixture"] = None if finding.fixture is None else str(finding.fixture)
    doc["minimal_shape"] = list(finding.minimal.x.shape)
    doc["input"] = describe_case(finding.minimal, finding.verdict)
    doc["flaky"] = finding.flaky
    doc["worst"] = finding.worst_verdict.to_json()
    if expected is not None:
        doc["expected"] = expected
    return doc


@dataclass
class Report:
    """What a run found: its results per (target, family), and how the run ended.

    ``passed`` is True when nothing failed; ``failures`` has one :class:`~normprops.hunt.Finding`
    per (target, family, property) that failed, each with ``family``, ``property``, ``message``
    and ``fixture``; a replay's failing fixtures (``fixture_failures``, one each) come after."""

    command: str
    settings: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    results: list[tuple[HuntResult, str | None]] = field(default_factory=list)  # with expectation
    # A registry hunt's known-bug cells: the property each bug must be caught on, by result index.
    bug_properties: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)  # checked declarations (normprops.hints)
    error: str | None = None  # why the run did not finish
    cut_short: bool = False  # its time budget was spent before everything was hunted
    extra: dict[str, Any] = field(default_factory=dict)
    fixture_failures: list[Finding] = field(default_factory=list)  # failing fixtures of a replay

    @property
    def passed(self) -> bool:
        return self.error is None and not self.failures

    @property
    def failures(self) -> list[Finding]:
        return [f for result, _ in self.results for f in result.findings] + self.fixture_failures

    @property
    def information(self) -> list[Finding]:
        """Findings of properties hunted but not promised (a norm that is not range-safe): shown,
        never failures."""
        return [f for result, _ in self.results for f in information_of(result)]

    def to_json(self) -> dict[str, Any]:
        from normprops import __version__

        return {
            "format": REPORT_FORMAT,
            "normprops": __version__,
            "command": self.command,
            **self.settings,
            "targets": self.targets,
            "complete": self.error is None,
            "error": self.error,
            "cut_short": self.cut_short,
            "notes": self.notes,
            "hints": self.hints,
            "results": [result_json(r, expected=e, bug_property=self.bug_properties.get(i))
                        for i, (r, e) in enumerate(self.results)],
            "failures": [failure_json(f, expected=e) for r, e in self.results for f in r.findings]
                        + [failure_json(f) for f in self.fixture_failures],
            "information": [failure_json(f) for f in self.information],
            **self.extra,
        }

    def write(self, path: Path | None) -> None:
        """Write the JSON report to ``path`` atomically (a temporary file, then a rename)."""
        if path is None:
            return
        write_json_atomically(Path(path), self.to_json())


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new empty file beside ``path`` under a hidden name of its own, open for writing, with the
    mode the umask gives, as ``open`` would (``tempfile.mkstemp`` always gives 0600)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


def check_can_create_in(directory: Path) -> None:
    """Create a file in ``directory`` and remove it; OSError when that cannot be done. Asking
    ``os.access`` is not enough: it says yes to root everywhere, /proc included."""
    fd, tmp = _create_beside(Path(directory) / "normprops-probe")
    os.close(fd)
    os.unlink(tmp)


def write_json_atomically(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as JSON in ``path``, through a temporary file and a rename, so a reader never sees
    half a file; the folder must exist. :class:`~normprops.errors.WriteError` naming ``path`` when
    it cannot be written."""
    try:
        fd, tmp = _create_beside(path)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise


def read_json_document(path: Path, *, format: str, kind: str,
                       error: type[ValueError]) -> dict[str, Any]:
    """The JSON object in ``path`` whose ``"format"`` is ``format``; otherwise ``error`` with one
    line naming the file and what is wrong (unreadable, not JSON, not a normprops ``kind``)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    except ValueError as exc:
        raise error(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != format:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise error(f"{path}: not a normprops {kind} (format {found!r}, expected {format!r})")
    return doc


def load_report(path: Path) -> dict[str, Any]:
    """A JSON report written by :meth:`Report.write`, its shape checked: ReportError otherwise."""
    path = Path(path)
    doc = read_json_document(path, format=REPORT_FORMAT, kind="report", error=ReportError)
    for key in ("results", "failures"):
        if not isinstance(doc.get(key), list) or not all(isinstance(r, dict) for r in doc[key]):
            raise ReportError(f"{path}: '{key}' is missing or not a list of objects")
    for i, r in enumerate(doc["results"]):
        for key, kind in (("target", str), ("family", str), ("passed", bool), ("properties", list)):
            if not isinstance(r.get(key), kind):
                raise ReportError(f"{path}: results[{i}].{key} is missing or not a {kind.__name__}")
        for key in ("properties", "information"):
            if not isinstance(r.get(key, []), list) or not all(
                    isinstance(p, str) and p in PROPERTIES for p in r.get(key, [])):
                raise ReportError(f"{path}: results[{i}].{key} names an unknown property")
    return doc


#: Which kernels a hunt is of: reports that agree on these are of one hunt when they are shards.
HUNT_KERNELS = ("command", "backend", "op", "impl", "kernel")
#: What the shards of one hunt share besides: its seed and settings.
SHARD_SETTINGS = ("seed", "families", "max_examples", "policy", "oracle")


class IncompleteMerge(ReportError):
    """Reports that do not make one whole: ``problems`` holds one line for each thing wrong, naming
    the file(s) and what differs."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _shard(doc: dict[str, Any]) -> tuple[int, int] | None:
    k, sep, n = str(doc.get("shard") or "").partition("/")
    return (int(k), int(n)) if sep and k.isdigit() and n.isdigit() else None


def _settings(doc: dict[str, Any]) -> dict[str, Any]:
    """:data:`SHARD_SETTINGS`, and for a user's kernel how it was declared (storage type,
    framework, widths, flags), but not its device: each shard may run on a GPU of its own."""
    found = {key: doc.get(key) for key in SHARD_SETTINGS}
    if doc.get("impl"):
        for target in doc.get("targets") or []:
            found.update({k: v for k, v in target.items()
                          if k not in ("device", "label", "name", "op", "backend")})
    return found


def _shown(value: Any) -> str:
    if value is None:
        return "not recorded"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value) or "none"
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else str(value)


def _hunt_name(doc: dict[str, Any]) -> str:
    if doc.get("impl"):
        return f"--impl {doc['impl']}"
    return " ".join(f"--{key} {doc[key]}" for key in ("backend", "op", "kernel") if doc.get(key))


def _shard_problems(docs: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Reports of the same kernels (:data:`HUNT_KERNELS`) of which any is a shard must be the
    shards of one hunt: one split K/N, each K once, the same seed and settings."""
    hunts: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, doc in docs:
        hunts.setdefault(json.dumps([doc.get(key) for key in HUNT_KERNELS]), []).append((path, doc))
    problems: list[str] = []
    for group in hunts.values():
        shards = [(path, doc, _shard(doc)) for path, doc in group]
        sharded = [(path, doc, shard) for path, doc, shard in shards if shard is not None]
        if not sharded:
            continue  # whole hunts: each stands alone
        ref_path, ref, (_, n) = sharded[0]
        of = "" if len(hunts) == 1 else f" of the hunt of {_hunt_name(ref) or ref_path}"
        ref_settings = _settings(ref)
        held: dict[int, list[Path]] = {}
        for path, doc, shard in shards:
            if shard is None:
                problems.append(f"{path} is not a shard (no --shard), but {ref_path} is shard "
                                f"{ref['shard']} of the same kernels")
            elif shard[1] != n:
                problems.append(f"{path} is shard {doc['shard']}, but {ref_path} is shard "
                                f"{ref['shard']} (another split)")
            else:
                held.setdefault(shard[0], []).append(path)
            if path is ref_path:
                continue
            settings = _settings(doc)
            for key in dict.fromkeys([*ref_settings, *settings]):
                if settings.get(key) != ref_settings.get(key):
                    problems.append(f"{path}: {key} {_shown(settings.get(key))}, but {ref_path}: "
                                    f"{key} {_shown(ref_settings.get(key))}")
        for k in range(1, n + 1):
            if k not in held:
                given = ", ".join(f"{j}/{n}" for j in sorted(held))
                problems.append(f"shard {k}/{n}{of} is missing (the reports hold {given})")
            elif len(held[k]) > 1:
                problems.append(f"shard {k}/{n}{of} is given twice: {', '.join(map(str, held[k]))}")
    return problems


def merge_reports(paths: Iterable[Path], *, allow_incomplete: bool = False) -> dict[str, Any]:
    """One report from several: the shards of one hunt, or hunts of other kernels. Every result
    and failure, each (backend, kernel, family) cell once.

    What must hold: each file given once; every report finished (``"complete"``) and written by
    the same normprops version; no cell held twice with different outcomes; and where reports of
    the same kernels (:data:`HUNT_KERNELS`) are shards (``"shard": "K/N"``), every shard 1/N to
    N/N present once, all with the same seed and settings (:data:`SHARD_SETTINGS`). Reports of
    other kernels merge side by side. Otherwise :class:`IncompleteMerge` lists the problems,
    one line each, unless ``allow_incomplete``: the merged report then says ``"complete": false``
    and lists them under ``"problems"`` (a file given twice is read once). A report cut short by
    its time budget merges; the merged one says ``"cut_short": true``, with a note naming it.
    ReportError names a file that cannot be read."""
    from normprops import __version__

    docs: list[tuple[Path, dict[str, Any]]] = []
    problems: list[str] = []
    files: dict[tuple[int, int], Path] = {}
    for path in map(Path, paths):
        doc = load_report(path)
        st = path.stat()
        first = files.setdefault((st.st_dev, st.st_ino), path)
        if first is not path:
            problems.append(f"{path} is given twice" if str(first) == str(path)
                            else f"{first} and {path} are the same file")
            continue
        docs.append((path, doc))
    if not docs:
        raise ReportError("no report to merge")
    for path, doc in docs:
        if doc.get("complete") is False or doc.get("error"):
            problems.append(f"{path} did not finish ({doc.get('error') or 'incomplete'})")
    first_path, first_doc = docs[0]
    for path, doc in docs[1:]:
        if doc.get("normprops") != first_doc.get("normprops"):
            problems.append(f"{path} was written by normprops {doc.get('normprops')}, {first_path} "
                            f"by {first_doc.get('normprops')}")
    problems += _shard_problems(docs)

    results: dict[tuple[str, str, str], tuple[Path, dict[str, Any]]] = {}
    failures: list[dict[str, Any]] = []
    information: list[dict[str, Any]] = []
    for path, doc in docs:
        # (target, family) of the cells an earlier report holds, and of those it does not (the
        # failures name no backend; one label may be hunted on several).
        repeated: set[tuple[str, str]] = set()
        fresh: set[tuple[str, str]] = set()
        for r in doc["results"]:
            key = (str(r.get("backend", "")), str(r.get("kernel") or r["target"]), r["family"])
            if key not in results:
                results[key] = (path, r)
                fresh.add((r["target"], r["family"]))
                continue
            repeated.add((r["target"], r["family"]))
            earlier, held = results[key]
            if _outcome(held) != _outcome(r):
                problems.append(f"{path}: {key[1]} x {key[2]} is also in {earlier}, with another "
                                f"outcome")
        # A cell held twice keeps the earlier report's failures: none is counted twice.
        failures += [f for f in doc["failures"]
                     if (f.get("target"), f.get("family")) not in repeated - fresh]
        information += [f for f in doc.get("information", []) if isinstance(f, dict)
                        and (f.get("target"), f.get("family")) not in repeated - fresh]
    if problems and not allow_incomplete:
        raise IncompleteMerge(problems)
    # A hunt cut short by its time budget finished cleanly, so it merges; but the whole is then
    # short of the cells it never reached, and says so.
    cut_short = [path for path, doc in docs if doc.get("cut_short") is True]
    shared = {}  # what every report agrees on: a merged hunt keeps its seed and settings
    for key in HUNT_KERNELS + SHARD_SETTINGS:
        values = [doc.get(key) for _, doc in docs]
        if key != "command" and values[0] is not None and all(v == values[0] for v in values):
            shared[key] = values[0]
    return {"format": REPORT_FORMAT, "normprops": __version__, "command": "report merge", **shared,
            "merged_from": [str(p) for p, _ in docs], "complete": not problems,
            "error": "; ".join(problems) or None, "problems": problems,
            "cut_short": bool(cut_short),
            "notes": [f"cut short: {path} spent its time budget; the cells it did not reach are missing"
                      for path in cut_short]
                     + [f"{path}: {note}" for path, doc in docs for note in doc.get("notes", [])
                        if isinstance(note, str)],
            "results": [r for _, r in results.values()], "failures": failures,
            "information": information}


def _outcome(result: dict[str, Any]) -> tuple[Any, ...]:
    return result["passed"], result["properties"], result.get("information", [])


#: Cell colours of the matrix plot, by the cell's first word.
_COLOURS = {"pass": "#b7e1b0", "caught": "#a9cce3", "known": "#d6e4ee", "MISSED": "#e74c3c",
            "FAIL": "#e74c3c", "(pass)": "#e3f1df", "(fail": "#f5cba7", "-": "#eeeeee", "stopped": "#d5d8dc",
            **{word: "#fcf3cf" for word in WORDS.values()}}


def _colour(text: str) -> str:
    for word, colour in _COLOURS.items():
        if text.startswith(word):
            return colour
    return "#f1948a"  # a user kernel's failed properties


def matrix_png(cells: Iterable[Cell], path: Path, *, title: str) -> None:
    """The matrix as a picture: a coloured grid per group, the cell's text in it. Needs matplotlib
    (``pip install normprops[plot]``): ImportError otherwise."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(cells)
    groups = list(dict.fromkeys(c.group for c in cells))
    families = list(dict.fromkeys(c.family for c in cells))
    kernels = {g: list(dict.fromkeys(c.kernel for c in cells if c.group == g)) for g in groups}
    grid = {(c.group, c.kernel, c.family): c.text for c in cells}
    rows = sum(len(k) + 1 for k in kernels.values())
    fig, ax = plt.subplots(figsize=(2.0 + 1.15 * len(families), 0.8 + 0.32 * rows))
    ax.set_xlim(0, len(families))
    ax.set_ylim(rows, 0)
    ax.axis("off")
    y = 0
    for g in groups:
        ax.text(-0.05, y + 0.6, g, ha="right", va="center", fontsize=8, fontweight="bold")
        for j, f in enumerate(families):
            ax.text(j + 0.5, y + 0.6, f, ha="center", va="center", fontsize=6.5, fontweight="bold")
        y += 1
        for k in kernels[g]:
            ax.text(-0.05, y + 0.5, k, ha="right", va="center", fontsize=7)
            for j, f in enumerate(families):
                text = grid.get((g, k, f), "-")
                ax.add_patch(plt.Rectangle((j + 0.03, y + 0.06), 0.94, 0.88, color=_colour(text)))
                ax.text(j + 0.5, y + 0.5, text, ha="center", va="center", fontsize=6)
            y += 1
    ax.set_title(title, fontsize=9)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
