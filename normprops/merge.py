"""Reading JSON reports back, their shape checked, and merging reports (the shards of one hunt, or
hunts of other kernels side by side) into one (``normprops report merge``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from normprops.flags import flag
from normprops.jsonio import read_json_document
from normprops.ops import PROPERTIES
from normprops.report import REPORT_FORMAT

__all__ = ["ReportError", "load_report", "merge_reports", "refused_merge", "IncompleteMerge", "HUNT_KERNELS",
           "SHARD_SETTINGS", "RESUME_SETTINGS", "Carried", "resume_problems", "carried_cells"]


class ReportError(ValueError):
    """A JSON report that cannot be read: the message names the file and what is wrong."""


#: The commands whose reports hold a hunt's cells.
MERGEABLE = ("hunt", "report merge")


def _command(doc: dict[str, Any]) -> str:
    command = doc.get("command")
    return f"'normprops {command}'" if isinstance(command, str) and command else "no command"



def load_report(path: Path) -> dict[str, Any]:
    """A JSON report written by :meth:`Report.write`, its shape checked: ReportError otherwise."""
    path = Path(path)
    doc = read_json_document(path, format=REPORT_FORMAT, kind="report", error=ReportError)
    # A replay's or a bench's report holds no hunt's cells: merged, its failures would vanish from
    # the matrix and the merge would read clean. (One that names no command is taken as a hunt's.)
    if doc.get("command", "hunt") not in MERGEABLE:
        raise ReportError(f"{path}: a report of {_command(doc)}, not of a hunt; report merge takes the "
                          f"{flag('json')} reports of 'normprops hunt' (or of an earlier merge)")
    if not isinstance(doc.get("complete", True), bool):
        raise ReportError(f"{path}: 'complete' is {doc['complete']!r}, not true or false")
    if doc.get("shard") is not None and _shard(doc) is None:
        raise ReportError(f"{path}: 'shard' is {doc['shard']!r}, not K/N (as {flag('shard')} writes it)")
    for key in ("results", "failures"):
        if not isinstance(doc.get(key), list) or not all(isinstance(r, dict) for r in doc[key]):
            raise ReportError(f"{path}: '{key}' is missing or not a list of objects")
    for key, kind, what in (("targets", dict, "objects"), ("hints", str, "strings")):
        if not isinstance(doc.get(key, []), list) or not all(isinstance(v, kind) for v in doc.get(key, [])):
            raise ReportError(f"{path}: '{key}' is not a list of {what}")
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
        framework, dtype = (",".join(v) for v in _impl_kernel(doc))
        return f"{flag('impl')} {doc['impl']} ({framework} {dtype})"
    return " ".join(f"--{key} {doc[key]}" for key in ("backend", "op", "kernel") if doc.get(key))


#: What names a user's kernel besides its ``--impl``: the arrays it was hunted with. Its device is
#: not among them when shards are grouped (each shard may run on a GPU of its own).
IMPL_KERNEL = ("framework", "dtype")


def _impl_kernel(doc: dict[str, Any]) -> list[Any]:
    """:data:`IMPL_KERNEL` of a hunt of ``--impl`` (one target), as its report recorded them."""
    targets = [t for t in doc.get("targets") or [] if isinstance(t, dict)]
    return [sorted({str(t.get(key)) for t in targets}) for key in IMPL_KERNEL]


def _hunt_of(doc: dict[str, Any]) -> str:
    """Which kernels a report's hunt is of (:data:`HUNT_KERNELS`; for a user's kernel also the
    framework and storage type it was hunted in: the same ``--impl`` at bfloat16 is another hunt)."""
    return json.dumps([doc.get(key) for key in HUNT_KERNELS]
                      + (_impl_kernel(doc) if doc.get("impl") else []))


def _shard_problems(docs: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """Reports of the same kernels (:func:`_hunt_of`) of which any is a shard must be the
    shards of one hunt: one split K/N, each K once, the same seed and settings."""
    hunts: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path, doc in docs:
        hunts.setdefault(_hunt_of(doc), []).append((path, doc))
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
                problems.append(f"{path} is not a shard (no {flag('shard')}), but {ref_path} is shard "
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

    results: dict[tuple[str, ...], tuple[Path, dict[str, Any]]] = {}
    failures: list[dict[str, Any]] = []
    information: list[dict[str, Any]] = []
    for path, doc in docs:
        # (target, family) of the cells an earlier report holds, and of those it does not (the
        # failures name no backend; one label may be hunted on several).
        repeated: set[tuple[str, str]] = set()
        fresh: set[tuple[str, str]] = set()
        for r in map(_with_kernel(doc), doc["results"]):
            key = _cell_key(r)
            if key not in results:
                results[key] = (path, r)
                fresh.add((r["target"], r["family"]))
                continue
            repeated.add((r["target"], r["family"]))
            earlier, held = results[key]
            if _outcome(held) != _outcome(r):
                problems.append(f"{path}: {_shown_kernel(r)} x {r['family']} is also in {earlier}, "
                                f"with another outcome")
        # A cell held twice keeps the earlier report's failures: none is counted twice.
        failures += [f for f in map(_with_kernel(doc), doc["failures"])
                     if (f.get("target"), f.get("family")) not in repeated - fresh]
        informed = [f for f in doc.get("information", []) if isinstance(f, dict)]
        information += [f for f in map(_with_kernel(doc), informed)
                        if (f.get("target"), f.get("family")) not in repeated - fresh]
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
            "targets": _unique(t for _, doc in docs for t in doc.get("targets", [])),
            "results": _told_apart([r for _, r in results.values()]), "failures": failures,
            "information": information,
            # Each report checked its hints on its own findings only: each is kept with its file.
            "hints": _unique(f"{path}: {h}" for path, doc in docs for h in doc.get("hints", []))}


#: What a cell of a user's kernel carries in a merged report besides the hunt's own fields: the
#: kernel it is of, so that hunts of other kernels of one name stay apart. Its device is the kind
#: (``cuda``, not ``cuda:1``): the shards of one hunt may each run on a GPU of their own.
CELL_KERNEL = ("impl", "framework", "dtype", "device")


def _with_kernel(doc: dict[str, Any]):
    """A result of ``doc`` with the user's kernel it is of (:data:`CELL_KERNEL`), from the report's
    ``impl`` and its target; a registry's kernel is named by its backend and name alone."""
    targets = {t.get("label"): t for t in doc.get("targets") or [] if isinstance(t, dict)}

    def add(result: dict[str, Any]) -> dict[str, Any]:
        if not doc.get("impl") or result.get("impl"):
            return result  # a registry's cell, or one an earlier merge already named
        target = targets.get(result.get("target"), {})
        kernel = {k: target.get(k) for k in CELL_KERNEL[1:]}
        kernel["device"] = None if kernel["device"] is None else str(kernel["device"]).split(":")[0]
        return {**result, "impl": doc["impl"], **kernel}

    return add


def _cell_key(result: dict[str, Any]) -> tuple[str, ...]:
    """One cell: (op, backend, kernel, family), and for a user's kernel :data:`CELL_KERNEL`."""
    return (str(result.get("op") or result["target"].split("[", 1)[0]), str(result.get("backend", "")),
            str(result.get("kernel") or result["target"]), result["family"],
            *(str(result.get(k)) for k in CELL_KERNEL if result.get("impl")))


def _shown_kernel(result: dict[str, Any]) -> str:
    return str(result.get("kernel") or result["target"])


def _told_apart(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``results``, the cells of users' kernels that would share a row of the matrix (one op, one
    function name) given a ``row`` to be shown as, by what tells them apart: their ``--impl``
    where those differ, then their framework, storage type or device (``softmax`` from two modules
    reads ``a:softmax`` and ``b:softmax``; one function at two storage types ``f float32`` and
    ``f bfloat16``). Their ``kernel`` stays as it is: it is what a later merge tells cells by."""
    rows: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
    for r in results:
        if r.get("impl"):
            rows.setdefault(_cell_key(r)[:3], set()).add(_cell_key(r)[4:])
    out = []
    for r in results:
        kernels = rows.get(_cell_key(r)[:3], set()) if r.get("impl") else set()
        if len(kernels) > 1:
            differ = [i for i, k in enumerate(CELL_KERNEL) if len({kernel[i] for kernel in kernels}) > 1]
            name = str(r["impl"]) if 0 in differ else _shown_kernel(r)
            r = {**r, "row": " ".join([name, *(str(r.get(CELL_KERNEL[i])) for i in differ if i)])}
        else:
            r = {k: v for k, v in r.items() if k != "row"}  # named apart in an earlier merge only
        out.append(r)
    return out


def refused_merge(paths: Iterable[Path], problems: list[str]) -> dict[str, Any]:
    """The report of a merge refused for ``problems`` (:class:`IncompleteMerge`): no cell, and
    why, so that whoever reads it does not take it for a clean one."""
    from normprops import __version__

    return {"format": REPORT_FORMAT, "normprops": __version__, "command": "report merge",
            "merged_from": [str(p) for p in paths], "complete": False,
            "error": "nothing merged: " + "; ".join(problems), "problems": problems,
            "cut_short": False, "notes": [], "targets": [], "results": [], "failures": [],
            "information": [], "hints": []}


def _unique(items: Iterable[Any]) -> list[Any]:
    """``items`` in order, each once (JSON objects compared by their content)."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _outcome(result: dict[str, Any]) -> tuple[Any, ...]:
    return result["passed"], result["properties"], result.get("information", [])


#: Cell colours of the matrix plot, by the cell's first word.


# --- a registry hunt resumed from its earlier report (normprops hunt --resume) -------------------

#: What a resumed registry hunt must share with the report it resumes: all but its time budget.
RESUME_SETTINGS = ("backend", "op", "kernel", "families", "policy", "oracle", "max_examples", "seed",
                   "shard")

Key = tuple[str, str, str]  # (backend, kernel, family): one cell of a registry hunt


@dataclass(frozen=True)
class Carried:
    """The cells a resumed hunt takes over from its earlier report, as that report wrote them."""

    path: Path
    results: dict[Key, dict[str, Any]]
    failures: list[dict[str, Any]]
    information: list[dict[str, Any]]
    targets: list[dict[str, Any]]


def _same_setting(key: str, there: Any, here: Any) -> bool:
    # Families and backends as sets: the plan follows the registry's order, not the order named.
    if key == "families" and isinstance(there, list) and isinstance(here, list):
        return sorted(map(str, there)) == sorted(here)
    if key == "backend" and isinstance(there, str) and isinstance(here, str):
        return sorted(there.split(",")) == sorted(here.split(","))
    return type(there) is type(here) and there == here


def resume_problems(doc: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """How the hunt that wrote ``doc`` differs from one of ``settings`` (:data:`RESUME_SETTINGS`),
    one phrase each (``seed 0 there, 1 here``); empty when a resume may take its cells over."""
    differ = []
    for key in RESUME_SETTINGS:
        there, here = doc.get(key), settings.get(key)
        if not _same_setting(key, there, here):
            shown = (_shown(there), _shown(here))
            if shown[0] == shown[1]:  # the same text, another JSON type
                shown = (json.dumps(there), json.dumps(here))
            differ.append(f"{key} {shown[0]} there, {shown[1]} here")
    return differ


def carried_cells(doc: dict[str, Any], *, path: Path, cells: set[Key]) -> Carried:
    """The cells of ``doc`` (read by :func:`load_report` from ``path``) among ``cells`` that its hunt
    finished: each hunted to its end, not cut short by a time budget, interrupted, or stopped by a
    kernel that could not be called again. ReportError when its findings cannot be read."""
    entries = {}
    for key in ("failures", "information"):
        listed = doc.get(key, [])
        if not isinstance(listed, list) or not all(
                isinstance(f, dict) and isinstance(f.get("target"), str) and isinstance(f.get("family"), str)
                and isinstance(f.get("backend", ""), str) for f in listed):
            raise ReportError(f"{path}: '{key}' is not a list of findings, each with its target and "
                              f"family; hunt afresh")
        entries[key] = listed
    finished: dict[Key, dict[str, Any]] = {}
    by_label: dict[tuple[str, str], list[Key]] = {}  # (target, family): the cells of that label
    for r in doc["results"]:
        key = (str(r.get("backend")), str(r.get("kernel")), r["family"])
        by_label.setdefault((r["target"], r["family"]), []).append(key)
        if key in cells and not (r.get("cut_short") or r.get("interrupted") or r.get("fatal")):
            finished.setdefault(key, r)

    def cell_of(finding: dict[str, Any]) -> Key | None:
        # By its backend, or where it names none (one label hunted on one backend) by its label.
        held = by_label.get((finding["target"], finding["family"]), [])
        if "backend" in finding:
            held = [c for c in held if c[0] == finding["backend"]]
        return held[0] if len(set(held)) == 1 else None

    # A finding that cannot be told to one cell keeps its cells from being carried: they are hunted
    # again rather than reported with another cell's findings.
    for finding in entries["failures"] + entries["information"]:
        if cell_of(finding) is None:
            for cell in by_label.get((finding["target"], finding["family"]), []):
                finished.pop(cell, None)
    labels = {(r["target"], r.get("backend")) for r in finished.values()}
    return Carried(
        Path(path), finished,
        failures=[f for f in entries["failures"] if cell_of(f) in finished],
        information=[f for f in entries["information"] if cell_of(f) in finished],
        targets=[t for t in doc.get("targets", [])
                 if isinstance(t, dict) and (t.get("label"), t.get("backend")) in labels])
