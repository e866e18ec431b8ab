"""JSON documents on disk: written atomically (a temporary file beside the target, then a rename),
read back with their ``format`` checked; and the check that an output directory takes a new file.
Reports and fixtures are both written and read through here.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
from pathlib import Path
from typing import Any

from normprops.errors import WriteError

__all__ = ["write_json_atomically", "read_json_document", "check_can_create_in", "output_dir_problem"]


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


def output_dir_problem(path: Path) -> str | None:
    """Why files could not be saved under ``path`` (a folder created with its parents when first
    written), as the end of a sentence that begins with the path; None when they can. A file is
    created and removed in the nearest existing folder to find out."""
    try:
        if path.exists() and not path.is_dir():
            return " is a file; name a directory"
        ancestor = path.absolute()
        while not ancestor.exists():
            ancestor = ancestor.parent
    except OSError as exc:  # a folder on the way that cannot be looked into
        return f": cannot be looked at ({exc.strerror or exc})"
    if not ancestor.is_dir():
        return f": {ancestor} is a file, not a directory"
    try:
        check_can_create_in(ancestor)
    except OSError as exc:
        return f": cannot create a file in {ancestor} ({exc.strerror or exc})"
    return None


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
    wanted = f'a JSON object with "format": "{format}"'
    if not isinstance(doc, dict):
        raise error(f"{path}: not a normprops {kind} ({wanted}): it holds {_json_kind(doc)}")
    if "format" not in doc:
        raise error(f"{path}: not a normprops {kind} ({wanted}): its object has no \"format\"")
    if doc["format"] != format:
        raise error(f"{path}: not a normprops {kind} ({wanted}): its format is "
                    f"{json.dumps(doc['format'])}")
    return doc


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words: ``null``, ``a list``, ``a number``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {json.dumps(value)}"
    if isinstance(value, str):
        return "a string"
    return "a list"


