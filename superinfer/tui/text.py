"""Output for scripts: ``--once`` (``key=value`` lines) and ``--json`` (one object per poll).

``--once`` prints the same keys in the same order every time (a missing value prints ``null``), one
pair per line, so ``grep``/``awk``/``cut -d= -f2`` work; values are JSON numbers, ``true``/``false``,
``null``, or strings (bare when they are one word, else JSON-quoted). Colour only on a terminal without
``NO_COLOR``: the verdict words. ``--json`` objects are ``{"t", "url", "connected", "state", "derived",
"events"}`` (``state``: the daemon's ``/v1/state`` untouched but for control characters; ``derived``:
:meth:`~superinfer.tui.tracker.Tracker.derived`; ``events``: log entries new since the previous object).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, TextIO

from superinfer.tui.judge import BREACH, OK, UNJUDGED, WARN
from superinfer.tui.tracker import Tracker, dig, knobs

_BARE = re.compile(r"^[A-Za-z0-9_.:/@+%-]+$")
_COLOURS = {OK: "\x1b[32m", WARN: "\x1b[33m", BREACH: "\x1b[31m"}
TENANT_KEYS = ("ttft_slo_s", "tbt_slo_s", "weight")
WINDOW_KEYS = ("requests", "finished", "ttft_attainment", "tbt_attainment", "tbt_gap_attainment", "slo_attainment",
               "shed", "ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "rotations", "rotations_per_finished")
#: derived per-tenant fields and their ``--once`` names
DERIVED_TENANT_KEYS = {"verdict": "verdict", "ttft": "ttft_verdict", "slo": "slo_verdict", "tbt": "tbt_verdict",
                       "gap": "gap_verdict", "trend_pp": "trend_pp", "why": "why"}
COUNTER_KEYS = ("arrived", "finished", "rejected", "shed", "aborted", "preemptions", "rotations", "recompute_fallbacks",
                "swap_ins")
TUNER_KEYS = ("mode", "state", "frozen", "frozen_reason", "phase", "rollbacks_last_hour")


def use_colour(stream: TextIO, env: dict[str, str] | None = None) -> bool:
    """Colour iff ``stream`` is a terminal and ``NO_COLOR`` is unset or empty."""
    env = os.environ if env is None else env
    return not env.get("NO_COLOR") and hasattr(stream, "isatty") and stream.isatty()


def value(v: Any) -> str:
    """One value in ``--once`` form."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    s = str(v)
    return s if _BARE.match(s) else json.dumps(s, ensure_ascii=False)


def once_pairs(url: str, tracker: Tracker, now: float) -> list[tuple[str, Any]]:
    """The ``--once`` pairs, in their fixed order."""
    s = tracker.state or {}
    d = tracker.derived(now)
    pairs: list[tuple[str, Any]] = [("url", url), ("connected", tracker.connected)]
    pairs += [(k, s.get(k)) for k in ("status", "backend", "simulation", "model", "profile", "pid", "version",
                                      "uptime_s", "slo_window_s")]
    pairs.append(("target_attainment", tracker.target))
    pairs += [(f"queues.{k}", dig(s, "queues", k)) for k in ("waiting", "rotary", "running", "inflight_http")]
    for tier in ("hbm", "dram"):
        pairs += [(f"kv.{tier}.used", dig(s, "kv", tier, "used")), (f"kv.{tier}.total", dig(s, "kv", tier, "total")),
                  (f"kv.{tier}.used_gib", d["kv"][tier]["used_gib"]), (f"kv.{tier}.total_gib", d["kv"][tier]["total_gib"])]
    for direction in ("h2d", "d2h"):
        pairs += [(f"transfer.{direction}.gbps", dig(s, "transfer", direction, "gbps")),
                  (f"transfer.{direction}.busy_share", dig(s, "transfer", direction, "busy_share")),
                  (f"transfer.{direction}.probe_duplex_gbps", dig(s, "probe", f"duplex_{direction}_gbps"))]
    params = s.get("params") or {}
    pairs += [(f"params.{k}", v) for k, v in knobs(params).items()]
    pairs += [("params.version", params.get("version")), ("params.source", params.get("source"))]
    pairs += [(f"counters.{k}", dig(s, "counters", k)) for k in COUNTER_KEYS]
    tuner = s.get("tuner") if isinstance(s.get("tuner"), dict) else tracker.tuner
    pairs += [(f"tuner.{k}", (tuner or {}).get(k) if tuner else ("off" if k == "mode" else None)) for k in TUNER_KEYS]
    for name, t in (s.get("tenants") or {}).items():
        pre = f"tenant.{name}."
        pairs += [(pre + k, (t or {}).get(k)) for k in TENANT_KEYS]
        pairs += [(pre + k, dig(t, "window", k)) for k in WINDOW_KEYS]
        dt = d["tenants"].get(name, {})
        pairs += [(pre + out, dt.get(k)) for k, out in DERIVED_TENANT_KEYS.items()]
    return pairs


def once_text(url: str, tracker: Tracker, now: float, colour: bool = False) -> str:
    """The ``--once`` output (ends with a newline)."""
    lines = []
    for key, v in once_pairs(url, tracker, now):
        text = value("unjudged" if v == UNJUDGED else v)
        if colour and key.endswith("verdict") and v in _COLOURS:
            text = _COLOURS[v] + text + "\x1b[0m"
        lines.append(f"{key}={text}")
    return "\n".join(lines) + "\n"


def json_object(url: str, tracker: Tracker, now: float, events_after: int = 0,
                error: str | None = None) -> dict[str, Any]:
    """One ``--json`` object (see the module docstring)."""
    return {"t": round(now, 3), "url": url, "connected": tracker.connected and error is None,
            "error": error, "state": tracker.state if error is None else None,
            "derived": tracker.derived(now),
            "events": [e.as_dict() for e in tracker.events.since(events_after)]}


def write_json(obj: dict[str, Any], stream: TextIO = sys.stdout) -> None:
    stream.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    stream.flush()
