"""How a benchmark hands over its result: the runs are written whatever goes wrong in their summary.

``bench sim`` and ``bench vllm`` build a ``result`` dict holding their runs, then summarise it inside
:func:`keep_runs` (an exception there is recorded as ``summary_error`` and reported, not raised), then
:func:`write_result` writes it and exits 1 if the summary failed, after the runs are safe on disk.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click


@contextmanager
def keep_runs(result: dict[str, Any]) -> Iterator[None]:
    """Run the summary; on any exception record it in ``result["summary_error"]`` and say so on stderr."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - reported, and the runs kept
        result["summary_error"] = f"{type(exc).__name__}: {exc}"
        click.echo(f"error: the summary failed ({result['summary_error']}); the runs are written unsummarised",
                   err=True)


def write_result(result: dict[str, Any], json_path: str | None) -> None:
    """``result`` as JSON to ``json_path`` (``-``: stdout; None: nowhere), then exit 1 if its summary failed."""
    text = json.dumps(result, indent=1)
    if json_path == "-":
        click.echo(text)
    elif json_path:
        Path(json_path).write_text(text + "\n")
    if "summary_error" in result:
        sys.exit(1)
