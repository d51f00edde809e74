"""Everything the dashboard derives across polls: rates, restarts, counter resets, histories, param
changes, tuner decisions, disconnects, and the per-tenant verdicts.

Feed it in time order: :meth:`Tracker.observe` for each state answered, :meth:`Tracker.lost` for each
failed poll. Times are the caller's (``time.time()`` live, the recorded time in a replay), so a replay
derives exactly what the live run did. Invariants: a rate is computed only between two samples of the
same daemon process whose counters did not go backwards; a new ``pid`` or ``started_at`` is a restart:
it is logged, and rate baselines, histories and the rotation-event dedup start afresh.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from superinfer.tui.events import EventLog
from superinfer.tui.judge import BREACH, DEFAULT_TARGET, UNJUDGED, WARN, Context, check_target, explain, judge_window, trend

RATE_KEYS = ("arrived", "finished", "rotations", "preemptions", "swap_ins", "recompute_fallbacks", "rejected")
PARAM_META = ("version", "source", "updated_at", "file")
FRESH_S = 10.0  # a changed param is highlighted this long
VERDICT_HOLD = 3  # polls a tenant's new word must hold before the change is logged (no flapping lines)
GIB = float(1 << 30)


def num(x: Any) -> float | None:
    """``x`` as a float when it is a number (not a bool), else None."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def knobs(params: dict[str, Any] | None) -> dict[str, Any]:
    """The knobs of a ``params`` document (everything but its metadata)."""
    return {k: v for k, v in (params or {}).items() if k not in PARAM_META}


def dig(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, or None where a level is missing or not a dict."""
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


class Tracker:
    """Derived state of one dashboard session (see the module docstring)."""

    def __init__(self, target: float = DEFAULT_TARGET, history: int = 120, rate_window_s: float = 5.0) -> None:
        if history < 2:
            raise ValueError(f"history must be >= 2 samples, got {history}")
        if not rate_window_s > 0:
            raise ValueError(f"rate_window_s must be > 0, got {rate_window_s!r}")
        self.target = check_target(target)
        self.target_source = "default"
        self.history_len = history
        self.rate_window_s = rate_window_s
        self.events = EventLog()
        self.state: dict[str, Any] | None = None
        self.t: float | None = None  # when the newest state was received
        self.connected = False
        self.lost_since: float | None = None
        self.lost_reason = ""
        self.retry_at: float | None = None
        self.restarts = 0
        self.restart_at: float | None = None
        self.param_change: tuple[float, int, str] | None = None
        self.fresh: dict[str, float] = {}
        self.config: dict[str, Any] | None = None
        self.tuner: dict[str, Any] | None = None
        self.scales: dict[str, float] = {}  # sparkline tops that only grow (kept across restarts)
        self._reset_baselines()

    def _reset_baselines(self) -> None:
        self.samples: deque[tuple[float, dict[str, float]]] = deque()
        self.rates: dict[str, float | None] = {k: None for k in RATE_KEYS}
        self.hist: dict[str, deque[tuple[float, float]]] = {}
        self.verdicts: dict[str, str] = {}  # each tenant's word as last logged
        self._pending: dict[str, tuple[str, int]] = {}  # a different word and for how many polls it held

    def _push(self, key: str, t: float, value: Any) -> None:
        v = num(value)
        if v is None:
            return
        h = self.hist.get(key)
        if h is None:
            h = self.hist[key] = deque(maxlen=self.history_len)
        h.append((t, v))

    def series(self, key: str) -> list[float]:
        return [v for _, v in self.hist.get(key, ())]

    # ---- configuration -------------------------------------------------------------------------
    def set_config(self, config: dict[str, Any] | None) -> None:
        """``GET /v1/config``: the target attainment (``tuner.target_attainment``) and engine limits."""
        self.config = config
        try:
            value = config["tuner"]["target_attainment"]["value"]  # type: ignore[index]
            self.target, self.target_source = check_target(value), "tuner.target_attainment"
        except (KeyError, TypeError, ValueError):
            pass

    def config_value(self, section: str, key: str) -> Any:
        try:
            return self.config[section][key]["value"]  # type: ignore[index]
        except (KeyError, TypeError):
            return None

    # ---- feeding -------------------------------------------------------------------------------
    def lost(self, reason: str, now: float, retry_in: float | None = None) -> None:
        """A poll failed with ``reason``; the next try is ``retry_in`` seconds away."""
        if self.connected or self.lost_since is None:
            self.lost_since = now
            self.events.add(now, "disconnect", f"disconnected: {reason}", "error")
        elif reason != self.lost_reason:
            self.events.add(now, "disconnect", f"still disconnected: {reason}", "error")
        self.connected = False
        self.lost_reason = reason
        self.retry_at = None if retry_in is None else now + retry_in

    def observe(self, state: dict[str, Any], now: float, tuner: dict[str, Any] | None = None) -> bool:
        """A state answered at ``now`` (``tuner``: ``GET /v1/tuner`` when the state has no ``tuner``
        block). Returns True when this is a new daemon process (first state or a restart): the caller
        should fetch ``/v1/config`` again."""
        prev = self.state
        if not self.connected and self.lost_since is not None:
            self.events.add(now, "reconnect", f"reconnected after {now - self.lost_since:.0f}s")
        self.connected, self.lost_since, self.retry_at, self.lost_reason = True, None, None, ""
        new_process = prev is None or (state.get("pid"), state.get("started_at")) != (prev.get("pid"),
                                                                                       prev.get("started_at"))
        if prev is None:
            up = num(state.get("uptime_s"))
            self.events.add(now, "connect", f"connected: {state.get('backend')} backend, profile "
                            f"{state.get('profile')}, pid {state.get('pid')}, up "
                            + (f"{up:.0f}s" if up is not None else "?"))
        if prev is not None and new_process:
            self.restarts += 1
            self.restart_at = now
            self.events.add(now, "restart", f"daemon restarted: pid {prev.get('pid')} → {state.get('pid')}; "
                            "rate baselines reset", "warn")
            self._reset_baselines()
            self.verdicts.clear()
            self._pending.clear()
            self.events.forget_seen()
        counters = {k: float(v) for k, v in (state.get("counters") or {}).items() if num(v) is not None}
        listed = state.get("rotation_events") or []
        if prev is None:  # what happened before the dashboard started is history, not news
            self.events.rotations(now, listed, None, log=False)
        else:
            self.events.rotations(now, listed, self._rotation_totals(counters, new_process))
        self._rates(counters, now)
        if prev is not None and not new_process:
            self._shed(prev, state, now)
            self._params_changed(prev.get("params") or {}, state.get("params") or {}, now)
            if prev.get("status") != state.get("status"):
                level = "info" if state.get("status") == "ok" else "warn"
                self.events.add(now, "status", f"status {prev.get('status')} → {state.get('status')}", level)
        self._tuner(state.get("tuner") if isinstance(state.get("tuner"), dict) else tuner, now)
        self.state, self.t = state, now
        self._histories(state, now)
        self._verdict_changes(state, now, log=prev is not None)
        return new_process

    def _shed(self, prev: dict[str, Any], state: dict[str, Any], now: float) -> None:
        """Requests shed since the previous poll, per tenant and reason (``tenants.<name>.shed``)."""
        new: Counter = Counter()
        for name, t in (state.get("tenants") or {}).items():
            before = ((prev.get("tenants") or {}).get(name) or {}).get("shed") or {}
            for reason, n in (t.get("shed") or {}).items():
                if num(n) is not None and n > (num(before.get(reason)) or 0):
                    new[f"{name}:{reason}"] += int(n - (num(before.get(reason)) or 0))
        if new:
            self.events.tally(now, "shed", new, _shed_text, "warn")

    def _rotation_totals(self, counters: dict[str, float], new_process: bool) -> dict[str, int] | None:
        if new_process or not self.samples or "rotations" not in counters:
            return None
        last = self.samples[-1][1]
        keys = (("swap_out", "rotations"), ("swap_in", "swap_ins"), ("recompute", "recompute_fallbacks"))
        out = {}
        for name, key in keys:
            if key in counters and key in last:
                out[name] = int(max(0.0, counters[key] - last[key]))
        return out

    def _rates(self, counters: dict[str, float], now: float) -> None:
        if self.samples:
            last = self.samples[-1][1]
            back = [k for k in RATE_KEYS if k in counters and k in last and counters[k] < last[k]]
            if back:
                k = back[0]
                self.events.add(now, "counters", f"counters went backwards ({k} {last[k]:g} → {counters[k]:g}); "
                                "rate baselines reset", "warn")
                self.samples.clear()
        self.samples.append((now, counters))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.rate_window_s:
            self.samples.popleft()
        t0, c0 = self.samples[0]
        dt = now - t0
        for k in RATE_KEYS:
            self.rates[k] = (counters[k] - c0[k]) / dt if dt > 0 and k in counters and k in c0 else None

    def _params_changed(self, old: dict[str, Any], new: dict[str, Any], now: float) -> None:
        if old.get("version") == new.get("version"):
            return
        a, b = knobs(old), knobs(new)
        changed = [k for k in b if a.get(k) != b.get(k)]
        diff = ", ".join(f"{k} {_fmt(a.get(k))} → {_fmt(b[k])}" for k in changed) or "no value changed"
        for k in changed:
            self.fresh[k] = now + FRESH_S
        version = new.get("version")
        self.param_change = (now, version if isinstance(version, int) else 0, diff)
        self.events.add(now, "params", f"params v{old.get('version')} → v{version} by {new.get('source')}: {diff}")

    def _tuner(self, tuner: dict[str, Any] | None, now: float) -> None:
        old = self.tuner
        self.tuner = tuner
        if tuner is None:
            return
        if old is not None:
            if bool(old.get("frozen")) != bool(tuner.get("frozen")):
                text = (f"tuner frozen: {tuner.get('frozen_reason') or 'no reason given'}" if tuner.get("frozen")
                        else "tuner unfrozen")
                self.events.add(now, "tuner", text, "warn" if tuner.get("frozen") else "info")
            if old.get("mode") != tuner.get("mode"):
                self.events.add(now, "tuner", f"tuner mode {old.get('mode')} → {tuner.get('mode')}")
        seen = {(d.get("at"), d.get("action")) for d in (old or {}).get("last_decisions") or [] if isinstance(d, dict)}
        for d in tuner.get("last_decisions") or []:
            if isinstance(d, dict) and (d.get("at"), d.get("action")) not in seen and old is not None:
                self.events.add(now, "tuner", f"tuner: {d.get('action')} ({d.get('reason') or 'no reason'})")

    def _verdict_changes(self, state: dict[str, Any], now: float, log: bool) -> None:
        """Log a tenant whose word (OK/WARN/BREACH/—) changed and held for :data:`VERDICT_HOLD` polls."""
        for name, t in (state.get("tenants") or {}).items():
            w = (t or {}).get("window") or {}
            v = judge_window(w, self.target)
            word = v.overall
            old = self.verdicts.get(name)
            if not log or old is None or old == word:
                self.verdicts[name] = word
                self._pending.pop(name, None)
                continue
            seen, n = self._pending.get(name, (word, 0))
            n = n + 1 if seen == word else 1
            self._pending[name] = (word, n)
            if n < VERDICT_HOLD:
                continue
            self.verdicts[name] = word
            self._pending.pop(name, None)
            if word == UNJUDGED:
                why = "too few requests in the window"
            else:
                why = ", ".join(f"{label} {100 * w[k]:.0f}%" for k, label, c in
                                (("ttft_attainment", "TTFT", v.ttft), ("slo_attainment", "both", v.slo))
                                if c != UNJUDGED)
            level = "error" if word == BREACH else "warn" if word == WARN else "info"
            self.events.add(now, "verdict", f"{name}: {old} → {word} ({why})", level)

    def _histories(self, state: dict[str, Any], now: float) -> None:
        q = state.get("queues") or {}
        for k in ("waiting", "rotary", "running"):
            self._push(k, now, q.get(k))
        kv = state.get("kv") or {}
        for tier in ("hbm", "dram"):
            used, total = num((kv.get(tier) or {}).get("used")), num((kv.get(tier) or {}).get("total"))
            if used is not None and total:
                self._push(tier, now, used / total)
        for d in ("h2d", "d2h"):
            self._push(d, now, ((state.get("transfer") or {}).get(d) or {}).get("gbps"))
        for name, t in (state.get("tenants") or {}).items():
            w = (t or {}).get("window") or {}
            self._push(f"tenant:{name}", now, w.get("slo_attainment"))

    # ---- derived -------------------------------------------------------------------------------
    def kv_share(self, tier: str) -> float | None:
        kv = ((self.state or {}).get("kv") or {}).get(tier) or {}
        used, total = num(kv.get("used")), num(kv.get("total"))
        return used / total if used is not None and total else None

    def tenant(self, name: str, now: float) -> dict[str, Any]:
        """Verdicts, trend and explanation of one tenant."""
        state = self.state or {}
        t = (state.get("tenants") or {}).get(name) or {}
        v = judge_window(t.get("window"), self.target)
        arrow, delta = trend(list(self.hist.get(f"tenant:{name}", ())), now)
        q = state.get("queues") or {}
        ctx = Context(now=now, window_s=num(state.get("slo_window_s")) or 60.0, waiting=q.get("waiting"),
                      rotary=q.get("rotary"), hbm_share=self.kv_share("hbm"), param_change=self.param_change,
                      restart_at=self.restart_at)
        return {"verdict": v.overall, "ttft": v.ttft, "tbt": v.tbt, "gap": v.gap, "slo": v.slo, "trend": arrow,
                "trend_pp": None if delta is None else round(100 * delta, 2),
                "why": explain(t, self.target, ctx)}

    def derived(self, now: float) -> dict[str, Any]:
        """The fields ``--json`` adds to the raw state."""
        state = self.state or {}
        kv = state.get("kv") or {}
        bb = num(kv.get("block_bytes"))
        kv_out: dict[str, Any] = {}
        for tier in ("hbm", "dram"):
            d = kv.get(tier) or {}
            used, total = num(d.get("used")), num(d.get("total"))
            kv_out[tier] = {"used_share": None if used is None or not total else round(used / total, 4),
                            "used_gib": None if used is None or bb is None else round(used * bb / GIB, 3),
                            "total_gib": None if total is None or bb is None else round(total * bb / GIB, 3)}
        return {
            "connected": self.connected,
            "data_age_s": None if self.t is None else round(now - self.t, 3),
            "disconnected_for_s": None if self.lost_since is None else round(now - self.lost_since, 3),
            "disconnect_reason": self.lost_reason or None,
            "target_attainment": self.target,
            "restarts": self.restarts,
            "rates_per_s": {k: None if v is None else round(v, 4) for k, v in self.rates.items()},
            "kv": kv_out,
            "tenants": {name: self.tenant(name, now) for name in (state.get("tenants") or {})},
            "tuner_available": self.tuner is not None,
        }


def _shed_text(tally: Counter, span_s: float) -> str:
    """``shed 12 in 14s: voice 10 past its deadline (503), chat 2 over its max_inflight (429)``."""
    why = {"deadline": "past its deadline (503)", "predicted": "refused at admission (503)",
           "tenant_limit": "over its max_inflight (429)"}
    parts = [f"{key.split(':', 1)[0]} {n} {why.get(key.split(':', 1)[1], key.split(':', 1)[1])}"
             for key, n in tally.most_common(4)]
    return f"shed {sum(tally.values())}" + (f" in {span_s:.0f}s" if span_s >= 1 else "") + ": " + ", ".join(parts)
