"""Trace readers: Azure 2023 CSV, ShareGPT / vLLM-benchmark JSON(L), BurstGPT CSV, Mooncake JSONL.

Every reader returns a :class:`TraceData` (arrival times when the format has them, token lengths) and
raises :class:`WorkloadError` naming the file, the line and what was wrong; with ``skip_bad=True`` the
malformed line is recorded in ``TraceData.skipped`` instead. Rows that are well formed but not servable
(a response of 0 tokens: BurstGPT logs failed requests that way) are dropped and counted by reason in
``TraceData.dropped``, never silently.

Accepted inputs (docs/workloads.md has examples):

* **azure** CSV, either header: ``TIMESTAMP,ContextTokens,GeneratedTokens`` (the Azure LLM inference
  trace as published; TIMESTAMP is a date-time like ``2023-11-16 18:15:46.6805900`` or seconds) or
  ``arrived_at,num_prefill_tokens,num_decode_tokens`` (vidur/Splitwise processed; seconds).
* **burstgpt** CSV: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`` (seconds).
* **mooncake** JSONL: one object a line with ``timestamp`` (milliseconds), ``input_length``,
  ``output_length`` and optionally ``hash_ids`` (a list of ints; not used by the simulator yet).
* **sharegpt** JSON (a list of objects) or JSONL (one object a line) with token lengths. Prompt
  length: one of ``prompt_len``, ``input_len``, ``input_length``, ``prompt_tokens``,
  ``num_prefill_tokens``; output length: one of ``output_len``, ``output_length``, ``output_tokens``,
  ``completion_tokens``, ``num_decode_tokens``; optional arrival in seconds: ``arrival_s`` or
  ``arrived_at``; optional ``tenant``. A JSONL whose first record has ``timestamp``, ``input_length``
  and ``output_length`` is read as Mooncake (milliseconds), whatever its extension. Raw ShareGPT (``conversations`` only, no
  lengths) is refused: it needs a tokenizer, which the simulator does not ship.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from superinfer.sim.workload.spec import SkippedLine, WorkloadError

FORMATS = ("azure", "burstgpt", "mooncake", "sharegpt")

AZURE_HEADERS = (("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
                 ("arrived_at", "num_prefill_tokens", "num_decode_tokens"))
BURSTGPT_HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
PROMPT_KEYS = ("prompt_len", "input_len", "input_length", "prompt_tokens", "num_prefill_tokens")
OUTPUT_KEYS = ("output_len", "output_length", "output_tokens", "completion_tokens", "num_decode_tokens")
ARRIVAL_KEYS = ("arrival_s", "arrived_at")  # not "timestamp": that is Mooncake's, in milliseconds


@dataclass
class TraceData:
    """What a reader found: arrivals (seconds from the first request; None if the format has none)."""

    path: str
    format: str
    arrival_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    tenants: list[str] | None = None
    skipped: list[SkippedLine] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.prompt_tokens.shape[0])


class _Rows:
    """Collects good rows; turns a bad one into an error or a skipped-line record."""

    def __init__(self, path: str, fmt: str, skip_bad: bool) -> None:
        self.path, self.fmt, self.skip_bad = path, fmt, skip_bad
        self.arrivals: list[float] = []
        self.prompts: list[int] = []
        self.outputs: list[int] = []
        self.tenants: list[str] = []
        self.skipped: list[SkippedLine] = []
        self.dropped: dict[str, int] = {}

    def bad(self, line: int, reason: str) -> None:
        if not self.skip_bad:
            raise WorkloadError(f"{self.path}:{line}: {reason} ({self.fmt} format; pass skip_bad / --skip-bad "
                                f"to skip malformed lines)")
        self.skipped.append(SkippedLine(line, reason))

    def add(self, arrival: float | None, prompt: int, output: int, tenant: str | None = None) -> None:
        if output == 0:
            self.dropped["zero_output_tokens"] = self.dropped.get("zero_output_tokens", 0) + 1
            return
        if prompt == 0:
            self.dropped["zero_prompt_tokens"] = self.dropped.get("zero_prompt_tokens", 0) + 1
            return
        if arrival is not None:
            self.arrivals.append(arrival)
        self.prompts.append(prompt)
        self.outputs.append(output)
        if tenant is not None:
            self.tenants.append(tenant)

    def done(self, has_arrivals: bool) -> TraceData:
        if not self.prompts:
            detail = f" ({len(self.skipped)} malformed lines skipped)" if self.skipped else ""
            raise WorkloadError(f"{self.path}: no usable requests in this {self.fmt} file{detail}")
        arrivals = None
        if has_arrivals:
            a = np.asarray(self.arrivals, dtype=np.float64)
            arrivals = a - a.min()
        tenants = self.tenants if self.tenants and len(self.tenants) == len(self.prompts) else None
        return TraceData(self.path, self.fmt, arrivals, np.asarray(self.prompts, dtype=np.int64),
                         np.asarray(self.outputs, dtype=np.int64), tenants, self.skipped, self.dropped)


class _Bad(Exception):
    """Internal: this line is malformed, with this reason."""


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise _Bad(f"{key}: expected a non-negative integer, got {value!r}")
    if isinstance(value, int):
        number = value
    else:
        try:
            f = float(str(value).strip())
        except ValueError:
            raise _Bad(f"{key}: expected a non-negative integer, got {value!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise _Bad(f"{key}: expected a non-negative integer, got {value!r}")
        number = int(f)
    if number < 0:
        raise _Bad(f"{key}: expected a non-negative integer, got {value!r}")
    return number


def _seconds(value: Any, key: str, scale: float = 1.0) -> float:
    if isinstance(value, bool):
        raise _Bad(f"{key}: expected a time, got {value!r}")
    try:
        f = float(value) if isinstance(value, (int, float)) else float(str(value).strip())
    except ValueError:
        raise _Bad(f"{key}: expected a number of seconds, got {value!r}") from None
    if not math.isfinite(f) or f < 0:
        raise _Bad(f"{key}: expected a finite time >= 0, got {value!r}")
    return f * scale


_EPOCH = datetime(1970, 1, 1)


def _azure_timestamp(value: str) -> float:
    """Seconds, or a date-time ``YYYY-MM-DD HH:MM:SS[.fraction]`` (any number of fraction digits)."""
    text = value.strip()
    try:
        return _seconds(text, "TIMESTAMP")
    except _Bad:
        pass
    main, _, frac = text.partition(".")
    try:
        base = datetime.strptime(main, "%Y-%m-%d %H:%M:%S")
        fraction = float("0." + frac) if frac else 0.0
        if frac and not frac.isdigit():
            raise ValueError
    except ValueError:
        raise _Bad(f"TIMESTAMP: expected seconds or 'YYYY-MM-DD HH:MM:SS.ffffff', got {value!r}") from None
    return (base - _EPOCH).total_seconds() + fraction


def _open_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such trace file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{path}: cannot read trace file: {exc}") from None


def _csv_rows(path: str, fmt: str, expected: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], Iterator[tuple[int, list[str]]]]:
    text = _open_text(path)
    reader = csv.reader(text.splitlines())
    try:
        header = tuple(h.strip() for h in next(reader))
    except StopIteration:
        raise WorkloadError(f"{path}:1: empty file, expected a {fmt} CSV header") from None
    if header not in expected:
        want = " or ".join(",".join(h) for h in expected)
        raise WorkloadError(f"{path}:1: header {','.join(header)!r} is not a {fmt} header; expected {want}")

    def rows() -> Iterator[tuple[int, list[str]]]:
        for index, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            yield index, row
    return header, rows()


def read_azure(path: str | os.PathLike[str], skip_bad: bool = False) -> TraceData:
    """Azure LLM inference trace 2023 CSV (either header variant, see the module docstring)."""
    p = str(path)
    header, rows = _csv_rows(p, "azure", AZURE_HEADERS)
    raw = header == AZURE_HEADERS[0]
    out = _Rows(p, "azure", skip_bad)
    for line, row in rows:
        if len(row) != 3:
            out.bad(line, f"expected 3 fields ({','.join(header)}), got {len(row)}")
            continue
        try:
            t = _azure_timestamp(row[0]) if raw else _seconds(row[0], header[0])
            out.add(t, _int(row[1], header[1]), _int(row[2], header[2]))
        except _Bad as exc:
            out.bad(line, str(exc))
    return out.done(has_arrivals=True)


def read_burstgpt(path: str | os.PathLike[str], skip_bad: bool = False) -> TraceData:
    """BurstGPT CSV. Rows with 0 response tokens (failed requests in BurstGPT) are dropped and counted."""
    p = str(path)
    _, rows = _csv_rows(p, "burstgpt", (BURSTGPT_HEADER,))
    out = _Rows(p, "burstgpt", skip_bad)
    for line, row in rows:
        if len(row) != len(BURSTGPT_HEADER):
            out.bad(line, f"expected {len(BURSTGPT_HEADER)} fields, got {len(row)}")
            continue
        try:
            t = _seconds(row[0], "Timestamp")
            prompt, output = _int(row[2], "Request tokens"), _int(row[3], "Response tokens")
            total = _int(row[4], "Total tokens")
            if total != prompt + output:
                raise _Bad(f"Total tokens {total} != Request tokens {prompt} + Response tokens {output}")
            out.add(t, prompt, output)
        except _Bad as exc:
            out.bad(line, str(exc))
    return out.done(has_arrivals=True)


def _jsonl_objects(path: str, text: str, out: _Rows) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            out.bad(line, f"not valid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            out.bad(line, f"expected a JSON object, got {type(obj).__name__}")
            continue
        yield line, obj


def read_mooncake(path: str | os.PathLike[str], skip_bad: bool = False) -> TraceData:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, optional ``hash_ids``."""
    p = str(path)
    out = _Rows(p, "mooncake", skip_bad)
    for line, obj in _jsonl_objects(p, _open_text(p), out):
        try:
            missing = [k for k in MOONCAKE_KEYS if k not in obj]
            if missing:
                raise _Bad(f"missing key(s) {', '.join(missing)}")
            if "hash_ids" in obj and not (isinstance(obj["hash_ids"], list)
                                          and all(isinstance(h, int) and not isinstance(h, bool) for h in obj["hash_ids"])):
                raise _Bad("hash_ids: expected a list of integers")
            out.add(_seconds(obj["timestamp"], "timestamp", 1e-3), _int(obj["input_length"], "input_length"),
                    _int(obj["output_length"], "output_length"))
        except _Bad as exc:
            out.bad(line, str(exc))
    return out.done(has_arrivals=True)


def _first_key(obj: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if key in obj:
            return key
    return None


def _sharegpt_entry(obj: dict[str, Any], out: _Rows, line: int, state: dict[str, bool]) -> None:
    try:
        pk, ok = _first_key(obj, PROMPT_KEYS), _first_key(obj, OUTPUT_KEYS)
        if pk is None or ok is None:
            if "conversations" in obj or "conversation" in obj:
                raise _Bad("ShareGPT conversation without token lengths: this reader needs per-request token "
                           f"counts (one of {', '.join(PROMPT_KEYS)} and one of {', '.join(OUTPUT_KEYS)}); "
                           "tokenize the conversations first")
            raise _Bad(f"missing the prompt length (one of {', '.join(PROMPT_KEYS)}) or the output length "
                       f"(one of {', '.join(OUTPUT_KEYS)})")
        ak = _first_key(obj, ARRIVAL_KEYS)
        has_arrival = ak is not None
        if state.setdefault("arrivals", has_arrival) != has_arrival:
            raise _Bad("some entries have an arrival time and some do not")
        tenant = obj.get("tenant")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise _Bad(f"tenant: expected a non-empty string, got {tenant!r}")
        out.add(_seconds(obj[ak], ak) if ak else None, _int(obj[pk], pk), _int(obj[ok], ok), tenant or "default")
    except _Bad as exc:
        out.bad(line, str(exc))


def _json_array_entries(path: str, text: str) -> Iterator[tuple[int, Any]]:
    """Elements of a top-level JSON array with the line each element starts on."""
    decoder = json.JSONDecoder()
    stripped = text.lstrip()
    pos = len(text) - len(stripped)
    if not stripped.startswith("["):
        raise WorkloadError(f"{path}:{text.count(chr(10), 0, pos) + 1}: expected a JSON list of requests")
    pos += 1
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i
    pos = skip_ws(pos)
    if pos < n and text[pos] == "]":
        return
    while True:
        line = text.count("\n", 0, pos) + 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        yield line, item
        pos = skip_ws(pos)
        if pos < n and text[pos] == ",":
            pos = skip_ws(pos + 1)
            continue
        if pos < n and text[pos] == "]":
            return
        raise WorkloadError(f"{path}:{text.count(chr(10), 0, pos) + 1}: not valid JSON: expected ',' or ']'")


def read_sharegpt(path: str | os.PathLike[str], skip_bad: bool = False) -> TraceData:
    """ShareGPT / vLLM-benchmark style JSON or JSONL with token lengths (field names in the module doc)."""
    p = str(path)
    text = _open_text(p)
    out = _Rows(p, "sharegpt", skip_bad)
    state: dict[str, bool] = {}
    first = text.lstrip()[:1]
    if first == "[":
        for line, item in _json_array_entries(p, text):
            if not isinstance(item, dict):
                out.bad(line, f"expected a JSON object, got {type(item).__name__}")
                continue
            _sharegpt_entry(item, out, line, state)
    else:
        for line, obj in _jsonl_objects(p, text, out):
            _sharegpt_entry(obj, out, line, state)
    return out.done(has_arrivals=state.get("arrivals", False))


READERS: dict[str, Callable[..., TraceData]] = {
    "azure": read_azure, "burstgpt": read_burstgpt, "mooncake": read_mooncake, "sharegpt": read_sharegpt,
}


def detect_format(path: str | os.PathLike[str]) -> str:
    """Guess the format from the extension and the header / first record."""
    p = str(path)
    try:
        with open(p, encoding="utf-8") as fh:
            head = fh.read(65536)
    except FileNotFoundError:
        raise WorkloadError(f"{p}: no such trace file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{p}: cannot read trace file: {exc}") from None
    first_line = next((line for line in head.splitlines() if line.strip()), "")
    suffix = Path(p).suffix.lower()
    if suffix == ".csv" or "," in first_line and not first_line.lstrip().startswith(("{", "[")):
        header = tuple(h.strip() for h in next(csv.reader([first_line]), []))
        if header in AZURE_HEADERS:
            return "azure"
        if header == BURSTGPT_HEADER:
            return "burstgpt"
        raise WorkloadError(f"{p}:1: unrecognised CSV header {first_line.strip()!r}; expected an Azure header "
                            f"({' or '.join(','.join(h) for h in AZURE_HEADERS)}) or BurstGPT "
                            f"({','.join(BURSTGPT_HEADER)}); or force a format with 'azure:PATH' etc.")
    if first_line.lstrip().startswith("{"):
        try:
            obj = json.loads(first_line)
        except json.JSONDecodeError:
            obj = {}
        if isinstance(obj, dict) and all(k in obj for k in MOONCAKE_KEYS):
            return "mooncake"
        return "sharegpt"
    if first_line.lstrip().startswith(("[", "{")):
        return "sharegpt"
    raise WorkloadError(f"{p}: cannot tell the trace format (extension {suffix or 'none'}); prefix the path with "
                        f"one of {', '.join(f + ':' for f in FORMATS)}")


def read_trace(path: str | os.PathLike[str], fmt: str | None = None, skip_bad: bool = False) -> TraceData:
    """Read ``path`` in format ``fmt`` (detected when None)."""
    fmt = fmt or detect_format(path)
    if fmt not in READERS:
        raise WorkloadError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return READERS[fmt](path, skip_bad=skip_bad)
