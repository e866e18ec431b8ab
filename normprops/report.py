"""Everything people read: case descriptions, findings, the robustness matrix, and the JSON report.

The CLI, the Python API and the pytest plugin all format through here, so a verdict reads the same
wherever it shows up. The JSON report (:class:`Report`) is written atomically, on every exit path,
with an ``error`` field when the run did not finish; :func:`normprops.merge.load_report` reads one
back, checking what it reads (for ``normprops report merge``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from normprops.case import Case
from normprops.flags import flag
from normprops.hunt import Finding, HuntResult
from normprops.information import WORDS, information_of
from normprops.jsonio import write_json_atomically
from normprops.judge import Verdict
from normprops.masking import describe_fill
from normprops.ops import get_op
from normprops.strategies import FAMILIES

__all__ = ["REPORT_FORMAT", "Cell", "Report", "declared", "declared_json", "describe_case",
           "format_finding", "render_matrix", "matrix_legend", "cell_text", "cell_from_json",
           "matrix_png", "SHORT"]

REPORT_FORMAT = "normprops-report/1"

#: Short names of the properties for matrix cells (the legend spells them out).
SHORT = {"contract": "contract", "finite": "finite", "nan_propagation": "nan",
         "masked_rows": "masked", "range_safety": "range", "accuracy": "acc", "sum_to_one": "sum",
         "bounds": "bounds", "argmax": "argmax", "determinism": "det", "batch_invariance": "batch",
         "shift_invariance": "shift", "scale_invariance": "scale", "permutation_invariance": "perm"}


def _value(v: float) -> str:
    return np.format_float_positional(np.float32(v), unique=True, trim="-") if abs(v) >= 1e-4 or v == 0 \
        else repr(float(np.float32(v)))


def describe_case(case: Case, verdict: Verdict | None = None) -> str:
    """A few lines a person can read: shape, parameters, and the failing row's input.

    When the verdict's output came from another input than the case (a stress batch, a reordered
    batch), that input is named first; its failing row is a copy of one of the case's rows. An
    op of named arrays (attention) describes its own case: the drawn parameters, not the arrays."""
    named = get_op(case.op).named
    if named is not None:
        return named.describe(case, verdict)
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
    # The array the kernel takes: a softmax gradient is given y where the others are given x.
    name = name or ("y" if "y" in get_op(case.op).params else "x")
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
    kernel = result.get("row") or result.get("kernel") or result["target"]  # "row": merge.py
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
    cells = list(cells)
    informed = {c.text for c in cells}
    if _gaps(cells):  # render_matrix draws a cell no result filled as "-"
        informed.add("-")
    texts = {_without_information(t) for t in informed}
    words = {w.strip("()").split(":", 1)[0] for w in texts}
    parts = []
    if "pass" in words:
        parts.append("pass: hunted, nothing found")
    for prop, word in WORDS.items():
        if any(word in t for t in informed):
            parts.append(f"{word}: information, not a failure ({prop} is hunted but not judged; "
                         f"{flag('opt_in')} {prop} judges it)")
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


def _gaps(cells: list[Cell]) -> bool:
    """Whether some kernel of a group has no cell in a family another kernel of it has: a cell
    not hunted (a shard cut short before it, a family left out of one kernel's hunt)."""
    groups: dict[str, tuple[set[str], set[str], set[tuple[str, str]]]] = {}
    for c in cells:
        kernels, families, filled = groups.setdefault(c.group, (set(), set(), set()))
        kernels.add(c.kernel)
        families.add(c.family)
        filled.add((c.kernel, c.family))
    return any(len(k) * len(f) > len(filled) for k, f, filled in groups.values())


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
        # None: no example was judged (cut short before the first), which a ratio of 0 would hide.
        "max_ratio": _finite_or_text(result.worst_ratio) if result.examples else None,
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


def failure_json(finding: Finding, *, expected: str | None = None,
                 backend: str | None = None) -> dict[str, Any]:
    doc = finding.verdict.to_json()
    doc["target"] = finding.label
    if backend:  # one label may be hunted on several backends (numpy's and CUDA's softmaxRowSafe)
        doc["backend"] = backend
    doc["fixture"] = None if finding.fixture is None else str(finding.fixture)
    doc["minimal_shape"] = list(finding.minimal.shape)
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
    # Cells a resumed hunt took over from its earlier report, as that report wrote them: their
    # ``results`` entries, then their ``failures`` and ``information`` (written before this run's).
    carried: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

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

    def __str__(self) -> str:
        """What the run found, as the command line prints it (``print(report)``): the matrix, each
        finding with its minimal input, the information, the notes and hints, and a last line."""
        results = self.to_json()["results"]
        cells = [cell_from_json(r) for r in results]
        lines = [render_matrix(cells), matrix_legend(cells)] if cells else []
        lines += [format_finding(f) for f in self.failures]
        lines += [f"{WORDS[f.property]} ({f.family}): information, not a failure\n"
                  f"{format_finding(f, indent='      ')}" for f in self.information]
        lines += self.notes + self.hints
        examples = sum(r.get("examples") or 0 for r in results)
        if self.error is not None:
            lines.append(f"did not finish: {self.error}")
        elif self.failures:
            lines.append(f"{len(self.failures)} failure{'s' * (len(self.failures) != 1)} "
                         f"({examples} examples)")
        else:
            lines.append(f"no counterexample in {examples} examples"
                         + (" (cut short by its time budget)" if self.cut_short else ""))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        from normprops import __version__

        # A registry hunt's kernels come from several backends, and one name may be on two (numpy's
        # and CUDA's softmaxRowSafe): its findings name their backend too.
        several = bool(self.settings.get("backend"))
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
            "results": self.carried.get("results", [])
                       + [result_json(r, expected=e, bug_property=self.bug_properties.get(i))
                          for i, (r, e) in enumerate(self.results)],
            "failures": self.carried.get("failures", [])
                        + [failure_json(f, expected=e, backend=r.backend if several else None)
                           for r, e in self.results for f in r.findings]
                        + [failure_json(f) for f in self.fixture_failures],
            "information": self.carried.get("information", [])
                           + [failure_json(f, backend=r.backend if several else None)
                              for r, _ in self.results for f in information_of(r)],
            **self.extra,
        }

    def write(self, path: Path | None) -> None:
        """Write the JSON report to ``path`` atomically (a temporary file, then a rename)."""
        if path is None:
            return
        write_json_atomically(Path(path), self.to_json())


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
