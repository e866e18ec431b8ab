"""Regression fixtures: failing inputs saved as data, replayed against every kernel that claims them.

A fixture is one JSON file, ``<dir>/<op>/<family>-<id>.json``, holding the minimal and the worst
input of a failed hunt with their verdicts and the versions that produced them. Values are exact:
arrays of up to 256 elements are lists of hex floats (``float.hex``, readable and exact); larger ones
are base64 of little-endian float32 bytes. No pickle, no seeds (numpy does not promise seed streams
across versions). ``<id>`` is a hash of the minimal input, so the same counterexample found twice is
written once; files are written atomically (temporary file, then rename).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hypothesis
import numpy as np

from normprops.judge import Verdict
from normprops.properties import evaluate
from normprops.strategies import Case

if TYPE_CHECKING:
    from normprops.hunt import HuntResult
    from normprops.launch import Target

__all__ = ["Fixture", "save_fixture", "load_fixture", "iter_fixtures", "encode_array",
           "decode_array", "replay", "case_id", "FORMAT"]

FORMAT = "normprops-fixture/1"
INLINE_LIMIT = 256


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.size <= INLINE_LIMIT:
        return {"shape": list(a.shape), "hex": [float(v).hex() for v in a.ravel()]}
    return {"shape": list(a.shape), "f32le_base64": base64.b64encode(a.astype("<f4").tobytes()).decode()}


def decode_array(blob: dict[str, Any]) -> np.ndarray:
    shape = tuple(int(s) for s in blob["shape"])
    if "hex" in blob:
        values = np.array([float.fromhex(v) for v in blob["hex"]], dtype=np.float64)
        return values.astype(np.float32).reshape(shape)
    raw = base64.b64decode(blob["f32le_base64"])
    return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape).copy()


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (np.floating, np.integer)):
        return _jsonable(value.item())
    return value


def _encode_case(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {"shape": list(case.x.shape), "x": encode_array(case.x)}
    if case.gamma is not None:
        out["gamma"] = encode_array(case.gamma)
    if case.beta is not None:
        out["beta"] = encode_array(case.beta)
    if case.eps is not None:
        out["eps"] = float(case.eps).hex()
    if case.dtype != "float32":
        out["dtype"] = case.dtype  # the values are float32, exact in this storage type
    out["params"] = _jsonable(case.params)
    return out


def _decode_case(blob: dict[str, Any], *, op: str, family: str) -> Case:
    return Case(
        op=op,
        family=family,
        x=decode_array(blob["x"]),
        gamma=decode_array(blob["gamma"]) if "gamma" in blob else None,
        beta=decode_array(blob["beta"]) if "beta" in blob else None,
        eps=float.fromhex(blob["eps"]) if "eps" in blob else None,
        params=blob.get("params", {}),
        dtype=blob.get("dtype", "float32"),
    )


def case_id(case: Case) -> str:
    h = hashlib.sha256()
    h.update(f"{case.op}/{case.family}/{case.x.shape}".encode())
    if case.dtype != "float32":  # float32 ids stay what they were before narrow types existed
        h.update(case.dtype.encode())
    for a in (case.x, case.gamma, case.beta):
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype="<f4").tobytes())
    if case.eps is not None:
        h.update(float(case.eps).hex().encode())
    return h.hexdigest()[:12]


def _versions() -> dict[str, str]:
    from normprops import __version__

    return {"normprops": __version__, "numpy": np.__version__,
            "hypothesis": hypothesis.__version__, "python": platform.python_version()}


def save_fixture(result: HuntResult, *, target: Target, directory: Path) -> Path:
    """Write ``result``'s minimal and worst inputs under ``directory/<op>/``; return the path."""
    if result.minimal is None or result.failure is None:
        raise ValueError(f"hunt of {result.label} on {result.family} found nothing to save")
    fixture_id = case_id(result.minimal)
    folder = Path(directory) / result.op
    path = folder / f"{result.family}-{fixture_id}.json"
    if path.exists():
        return path
    doc = {
        "format": FORMAT,
        "id": fixture_id,
        "op": result.op,
        "impl": target.name,
        "backend": target.backend,
        "family": result.family,
        "property": result.failure.property,
        "message": result.failure.message(),
        "verdict": result.failure.to_json(),
        "minimal": _encode_case(result.minimal),
        "versions": _versions(),
    }
    if result.worst is not None and result.worst_verdict is not None:
        doc["worst_verdict"] = result.worst_verdict.to_json()
        doc["worst"] = _encode_case(result.worst)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


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

    def cases(self) -> tuple[Case, ...]:
        return (self.minimal,) if self.worst is None else (self.minimal, self.worst)

    @property
    def dtype(self) -> str:
        """The storage type its values are exact in (a target of another type cannot replay it)."""
        return self.minimal.dtype


def load_fixture(path: Path) -> Fixture:
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read fixture {path}: {exc}") from exc
    if doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a normprops fixture (format {doc.get('format')!r}, "
                         f"expected {FORMAT!r})")
    op, family = doc["op"], doc["family"]
    worst = _decode_case(doc["worst"], op=op, family=family) if "worst" in doc else None
    return Fixture(path, doc["id"], op, doc["impl"], doc["backend"], family, doc["property"],
                   doc["message"],
                   _decode_case(doc["minimal"], op=op, family=family), worst)


def iter_fixtures(directory: Path, *, op: str | None = None) -> list[Path]:
    """Every fixture file under ``directory`` (``directory/<op>/*.json``), sorted."""
    root = Path(directory)
    pattern = f"{op}/*.json" if op else "*/*.json"
    return sorted(p for p in root.glob(pattern) if not p.name.startswith("."))


def replay(target: Target, fixture: Fixture, *, policy: str = "default") -> list[Verdict]:
    """Run ``target`` on the fixture's inputs; the failures (empty when it passes)."""
    found: list[Verdict] = []
    for case in fixture.cases():
        found.extend(evaluate(target, case, policy=policy).failures)
    return found
