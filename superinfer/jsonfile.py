"""Replace a JSON file atomically: a reader sees the old document or the new one, never a torn one.

The one writer of the project's state files (the daemon's runtime and tuner state, the live params file,
the plugin's published counters, calibrations, tuner arms): the document goes to a temporary file beside
the target (same directory, so ``os.replace`` is an atomic rename), is flushed and, where ``durable``,
fsync'ed, then renamed over the target.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, mode: int = 0o644, indent: int | None = 1,
                      sort_keys: bool = True, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` as JSON. ``durable``: fsync before the rename (a crash then leaves
    the old or the new document, not an empty file); off for files rewritten every second."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=indent, sort_keys=sort_keys)
            f.write("\n")
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
