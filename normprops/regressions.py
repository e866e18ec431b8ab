"""Regression fixtures: failing inputs saved as data, replayed against every kernel that claims them.

A fixture is one JSON file, ``<dir>/<op>/<family>-<id>.json``, holding the minimal and the worst
input of one finding (one property of one kernel failing in one family) with its verdicts and the
versions that produced it. Values are exact: arrays of up to 256 elements are lists of hex floats
(``float.hex``, readable and exact); larger ones are base64 of little-endian float32 bytes. No
pickle, no seeds (numpy does not promise seed streams across versions). ``<id>`` is a hash of the
kernel, the property and the minimal input: the same finding found twice is written once, and the
same input failing two kernels gives two files. Files are written atomically (temporary file, then
rename).

Loading checks everything it reads: a truncated, garbled or incomplete file raises
:class:`~normprops.errors.FixtureError` naming the file and what is wrong, never anything else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import numpy as np

from normprops.case import Case
from normprops.dtypes import DTYPES, to_dtype
from normprops.errors import FixtureError, WriteError
from normprops.hunt import Finding, HuntResult, with_fixtures
from normprops.judge import Verdict
from normprops.launch import Target
from normprops.ops import OPS, PROPERTIES
from normprops.properties import evaluate
from normprops.report import read_json_document, write_json_atomically
from normprops.strategies import FAMILIES

__all__ = ["Fixture", "save_fixture", "save_findings", "load_fixture", "iter_fixtures",
           "encode_array", "decode_array", "replay", "case_id", "FORMAT"]

FORMAT = "normprops-fixture/1"
INLINE_LIMIT = 256
MAX_ELEMENTS = 1 << 26  # a fixture's array never needs more (the hunt draws at most ~80k elements)


def encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.size <= INLINE_LIMIT:
        return {"shape": list(a.shape), "hex": [float(v).hex() for v in a.ravel()]}
    return {"shape": list(a.shape), "f32le_base64": base64.b64encode(a.astype("<f4").tobytes()).decode()}


def decode_array(blob: Any, *, what: str = "array") -> np.ndarray:
    """The float32 array a blob of :func:`encode_array` holds; ValueError naming ``what`` if the
    blob is malformed (wrong shape, wrong length, not hex, not base64)."""
    if not isinstance(blob, dict) or not isinstance(blob.get("shape"), list):
        raise ValueError(f"{what}: expected an object with a 'shape' list")
    shape = blob["shape"]
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"{what}: shape {shape!r} is not a list of non-negative integers")
    size = math.prod(shape)
    if size > MAX_ELEMENTS:
        raise ValueError(f"{what}: shape {shape!r} holds {size} elements, more than a fixture can")
    if "hex" in blob:
        values = blob["hex"]
        if not isinstance(values, list) or len(values) != size:
            raise ValueError(f"{what}: 'hex' must list {size} values for shape {shape!r}")
        try:
            floats = [float.fromhex(v) for v in values]
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"{what}: a value is not a hex float ({exc})") from None
        with np.errstate(all="ignore"):
            array = np.array(floats, dtype=np.float64).astype(np.float32)
        return array.reshape(shape)
    if "f32le_base64" in blob:
        try:
            raw = base64.b64decode(blob["f32le_base64"], validate=True)
        except (TypeError, ValueError, binascii.Error) as exc:
            raise ValueError(f"{what}: 'f32le_base64' is not base64 ({exc})") from None
        if len(raw) != 4 * size:
            raise ValueError(f"{what}: 'f32le_base64' holds {len(raw)} bytes; shape {shape!r} "
                             f"needs {4 * size}")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(shape).copy()
    raise ValueError(f"{what}: neither 'hex' nor 'f32le_base64' present")


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


def _decode_case(blob: Any, *, op: str, family: str, what: str) -> Case:
    """A case from its JSON, every part checked against the op (ValueError naming the part)."""
    if not isinstance(blob, dict):
        raise ValueError(f"{what}: expected an object")
    spec = OPS[op]
    x = decode_array(blob.get("x"), what=f"{what}.x")
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{what}.x: shape {list(x.shape)} is not (rows >= 1, cols >= 1)")
    vectors = {}
    for name in ("gamma", "beta"):
        if (name in spec.params) != (name in blob):
            raise ValueError(f"{what}: {op} {'needs' if name in spec.params else 'takes no'} {name}")
        if name in blob:
            vectors[name] = decode_array(blob[name], what=f"{what}.{name}")
            if vectors[name].shape != (x.shape[1],):
                raise ValueError(f"{what}.{name}: shape {list(vectors[name].shape)} does not match "
                                 f"x's {x.shape[1]} columns")
    eps = None
    if "eps" in spec.params:
        try:
            eps = float.fromhex(blob["eps"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise ValueError(f"{what}: {op} needs eps as a hex float") from None
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"{what}: eps {eps!r} is not a positive finite float")
    dtype = blob.get("dtype", "float32")
    if dtype not in DTYPES:
        raise ValueError(f"{what}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    for name, a in (("x", x), *vectors.items()):
        if not np.array_equal(to_dtype(a, dtype), a, equal_nan=True):
            raise ValueError(f"{what}.{name}: values are not exact in its dtype {dtype}")
    params = blob.get("params", {})
    return Case(op=op, family=family, x=x, gamma=vectors.get("gamma"), beta=vectors.get("beta"),
                eps=eps, params=params if isinstance(params, dict) else {}, dtype=dtype)


def case_id(case: Case, *, kernel: str | None = None, property: str | None = None) -> str:
    """A short hash of the input, and of the kernel and property whose finding it is."""
    h = hashlib.sha256()
    h.update(f"{case.op}/{case.family}/{case.x.shape}".encode())
    if case.dtype != "float32":  # float32 ids stay what they were before narrow types existed
        h.update(case.dtype.encode())
    for a in (case.x, case.gamma, case.beta):
        if a is not None:
            h.update(np.ascontiguousarray(a, dtype="<f4").tobytes())
    if case.eps is not None:
        h.update(float(case.eps).hex().encode())
    if kernel is not None:
        h.update(f"kernel={kernel}/property={property}".encode())
    return h.hexdigest()[:12]


def _versions() -> dict[str, str]:
    from normprops import __version__

    return {"normprops": __version__, "numpy": np.__version__,
            "hypothesis": hypothesis.__version__, "python": platform.python_version()}


def save_fixture(finding: Finding, *, target: Target, directory: Path) -> Path:
    """Write ``finding``'s minimal and worst inputs under ``directory/<op>/``; return the path.

    The same finding (kernel, property, minimal input) is written once. The folders are created
    as needed; :class:`~normprops.errors.WriteError` names the file that could not be written."""
    fixture_id = case_id(finding.minimal, kernel=f"{target.backend}:{target.name}",
                         property=finding.property)
    folder = Path(directory) / target.op
    path = folder / f"{finding.family}-{fixture_id}.json"
    if path.exists():
        return path
    doc = {
        "format": FORMAT,
        "id": fixture_id,
        "op": target.op,
        "impl": target.name,
        "backend": target.backend,
        "framework": target.adapter.framework,
        "family": finding.family,
        "property": finding.property,
        "message": finding.message,
        "verdict": finding.verdict.to_json(),
        "minimal": _encode_case(finding.minimal),
        "worst_verdict": finding.worst_verdict.to_json(),
        "worst": _encode_case(finding.worst),
        "versions": _versions(),
    }
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create the fixtures folder {folder}: {exc.strerror or exc}") from exc
    write_json_atomically(path, doc)
    return path


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

    def cases(self) -> tuple[Case, ...]:
        return (self.minimal,) if self.worst is None else (self.minimal, self.worst)

    @property
    def dtype(self) -> str:
        """The storage type its values are exact in."""
        return self.minimal.dtype

    def fits(self, dtype: str) -> bool:
        """Whether a kernel of storage type ``dtype`` can replay it (its values are exact there)."""
        return all(a is None or np.array_equal(to_dtype(a, dtype), a, equal_nan=True)
                   for case in self.cases() for a in (case.x, case.gamma, case.beta))


def _text(doc: dict[str, Any], key: str, allowed: Any = None) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"'{key}' is missing or not a string")
    if allowed is not None and value not in allowed:
        raise ValueError(f"'{key}' is {value!r}, not one of {', '.join(allowed)}")
    return value


def load_fixture(path: Path) -> Fixture:
    """Read one fixture. Raises :class:`~normprops.errors.FixtureError` naming the file and what
    is wrong with it (unreadable, not JSON, not a fixture, a missing or malformed part)."""
    path = Path(path)
    doc = read_json_document(path, format=FORMAT, kind="fixture", error=FixtureError)
    try:
        op = _text(doc, "op", OPS)
        family = _text(doc, "family", FAMILIES)
        prop = _text(doc, "property", PROPERTIES)
        minimal = _decode_case(doc.get("minimal"), op=op, family=family, what="minimal")
        worst = (_decode_case(doc["worst"], op=op, family=family, what="worst")
                 if "worst" in doc else None)
        return Fixture(path, _text(doc, "id"), op, _text(doc, "impl"), _text(doc, "backend"),
                       family, prop, str(doc.get("message", "")), minimal, worst)
    except ValueError as exc:
        raise FixtureError(f"{path}: {exc}") from None


def iter_fixtures(directory: Path, *, op: str | None = None) -> list[Path]:
    """Every fixture file under ``directory`` (``directory/<op>/*.json``), sorted."""
    root = Path(directory)
    pattern = f"{op}/*.json" if op else "*/*.json"
    return sorted(p for p in root.glob(pattern) if not p.name.startswith("."))


def replay(target: Target, fixture: Fixture, *, policy: str = "default") -> list[Verdict]:
    """Run ``target`` on the fixture's inputs; the failures (empty when it passes). The fixture's
    values must be exact in the target's storage type (:meth:`Fixture.fits`)."""
    if not fixture.fits(target.dtype):
        raise ValueError(f"{fixture.path} holds {fixture.dtype} values that {target.label} "
                         f"({target.dtype}) cannot take exactly")
    found: list[Verdict] = []
    for case in fixture.cases():
        if case.dtype != target.dtype:
            case = case.replace(dtype=target.dtype)
        found.extend(evaluate(target, case, policy=policy).failures)
    return found
