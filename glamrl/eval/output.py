"""Output files of the evaluation commands: checked before any work, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from glamrl.errors import GlamrlError


class OutputError(GlamrlError, OSError):
    """An output path that cannot be written."""


def check_writable(path: Path) -> Path:
    """Create `path`'s folder and check that a file can be written there, before any work."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OutputError(f"cannot write {path}: permission denied")
    return path


def write_json(path: Path, data: dict[str, Any]) -> Path:
    """`data` as indented JSON at `path`, replaced atomically."""
    path = check_writable(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)
    return path
