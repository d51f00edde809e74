"""Daemon profiles for tests, built from dicts: a test states only the keys it cares about.

A profile here is a dict of sections: ``{"engine": {...}, "slo": {...}, ..., "tenants": {name: {...}}}``
(``tenants`` keyed by tenant name, in order; each becomes one ``[[tenants]]`` table with its ``name``).
:func:`profile_toml` merges the sections it is given over a base profile (:data:`TWIN` unless told), key
by key: a key given ``None`` is removed, a section given ``None`` is removed, a tenant given ``None`` is
removed and a new one is appended. Nothing else is implied: what a call says is what the file says.

Tests of *broken* profiles keep their literal TOML text: that text is their specification.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

Sections = Mapping[str, Mapping[str, Any]]

#: the common test profile: the twin (sim backend) with 4 sequence slots so queues form, a fixed B_xfer (no
#: probe), no replay, and two tenants, unknown ones refused: "chat" (the [slo] defaults) and "voice"
TWIN: Sections = {
    "engine": {"model": "llama-3-8b", "hardware": "gh200", "max_num_seqs": 4, "drain_timeout_s": 30.0},
    "slo": {"ttft_s": 5.0, "tbt_s": 0.1, "unknown_tenant": "reject", "default_tenant": "chat"},
    "scheduler": {"b_xfer": 256},
    "sim": {"rps": 0.0},
    "tenants": {"chat": {}, "voice": {"ttft_s": 1.0, "tbt_s": 0.05, "weight": 4.0}},
}


def vllm_cpu(model: str | Path) -> Sections:
    """A base for the vllm backend on a CPU host with the tiny model at ``model``: it fits any host this
    suite runs on (0.25 GiB of KV, a 0.25 GiB host pool; 32-token blocks, float32, 512 tokens)."""
    return {
        "engine": {"model_path": str(model), "block_size": 32, "dtype": "float32", "max_model_len": 512,
                   "kv_cache_gib": 0.25, "dram_gib": 0.25},
        "scheduler": {"b_xfer": 32},
    }


def merge(base: Sections, **sections: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``base`` with ``sections`` merged over it, key by key (``None`` removes a key, section or tenant)."""
    out = {name: dict(body) for name, body in base.items()}
    for name, body in sections.items():
        if body is None:
            out.pop(name, None)
            continue
        merged = out.setdefault(name, {})
        for key, value in body.items():
            if value is None:
                merged.pop(key, None)
            elif name == "tenants":  # a tenant merges too: {"voice": {"max_inflight": 2}} adds one key
                merged[key] = {k: v for k, v in {**merged.get(key, {}), **value}.items() if v is not None}
            else:
                merged[key] = value
    return out


def profile_toml(*, base: Sections = TWIN, **sections: Mapping[str, Any] | None) -> str:
    """The TOML text of ``base`` with ``sections`` merged over it (see :func:`merge`)."""
    doc = merge(base, **sections)
    tenants = doc.pop("tenants", {})
    parts = [_table(f"[{name}]", body) for name, body in doc.items()]
    parts += [_table("[[tenants]]", {"name": name, **spec}) for name, spec in tenants.items()]
    text = "\n".join(parts)
    expected = {**doc, **({"tenants": [{"name": n, **s} for n, s in tenants.items()]} if tenants else {})}
    assert tomllib.loads(text) == _plain(expected), text  # the writer's own check: the file says what was asked
    return text


def write_profile(path: Path, *, base: Sections = TWIN, **sections: Mapping[str, Any] | None) -> Path:
    """:func:`profile_toml` written to ``path``; returns ``path``."""
    path.write_text(profile_toml(base=base, **sections))
    return path


def _table(header: str, body: Mapping[str, Any]) -> str:
    return "".join([header, "\n", *(f"{_key(k)} = {_value(v)}\n" for k, v in body.items())])


def _plain(v: Any) -> Any:
    """``v`` as TOML reads it back: paths as strings, tuples as lists."""
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v) if isinstance(v, Path) else v


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(s: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return '"' + "".join(escapes.get(c, c if c >= " " and c != "\x7f" else f"\\u{ord(c):04x}") for c in s) + '"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return repr(v)  # Python's shortest round-trip form is a TOML float: 0.25, 1e-05, 1e+16
    if isinstance(v, (str, Path)):
        return _string(str(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r} ({type(v).__name__})")
