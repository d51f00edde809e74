"""What each panel shows, as pure functions of one :class:`~superinfer.tui.tracker.Tracker` and a time.

Every string that came from the daemon enters Rich as plain :class:`~rich.text.Text` (never markup), and
was stripped of control characters by the client. A field the daemon does not export renders "—".
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from superinfer.core.knobs import KNOBS
from superinfer.tui.fmt import DASH, bar, clock, duration, fit, gib, is_num, nice_ceiling, number, share_style, spark
from superinfer.tui.tracker import Tracker, dig, knobs, num

PHASES = ("waiting", "rotary", "running")


def _grid(*widths: int | None) -> Table:
    t = Table.grid(padding=(0, 1))
    for w in widths:
        t.add_column(width=w, no_wrap=True, overflow="ellipsis")
    return t


def kv(tr: Tracker, width: int = 40) -> RenderableType:
    """HBM and DRAM: a bar, the share, GiB used/total, blocks used/total (two lines per tier)."""
    kvd = (tr.state or {}).get("kv") or {}
    bb = kvd.get("block_bytes")
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, tier in enumerate(("hbm", "dram")):
        d = kvd.get(tier) or {}
        used, total = d.get("used"), d.get("total")
        share = tr.kv_share(tier)
        if i:
            out.append("\n")
        out.append(f"{tier.upper():<5}", style="bold")
        out.append(bar(share, max(4, width - 24)), style=share_style(share))
        out.append(f" {100 * share:3.0f}%" if share is not None else f" {DASH:>3} ", style=share_style(share))
        out.append(f" {gib(used, bb)}/{gib(total, bb)} GiB")
        out.append(f"\n     {number(used)}/{number(total)} blocks", style="dim")
    return out


def kv_title(tr: Tracker) -> str:
    """The KV panel's title: the block size in tokens and bytes."""
    kvd = (tr.state or {}).get("kv") or {}
    bb = kvd.get("block_bytes")
    return (f"KV cache · {number(kvd.get('block_size'))} tok/blk · "
            + (f"{bb / (1 << 20):g} MiB/blk" if is_num(bb) else f"{DASH} MiB/blk"))


def queue_scale(tr: Tracker, phase: str) -> float:
    """The fixed top of a queue's sparkline: ``max_num_seqs`` for running, else a nice ceiling that only
    grows (so a bar means the same height from one frame to the next)."""
    if phase == "running":
        mns = tr.config_value("engine", "max_num_seqs")
        if is_num(mns) and mns > 0:
            return float(mns)
    key = f"scale:{phase}"
    seen = max(tr.series(phase) or [0.0])
    tr.scales[key] = max(tr.scales.get(key, 10.0), nice_ceiling(seen))
    return tr.scales[key]


def queues(tr: Tracker, width: int = 40) -> RenderableType:
    """Waiting / rotary / running, now and a sparkline on a fixed scale; rates below."""
    s = tr.state or {}
    q = s.get("queues") or {}
    spark_w = max(4, width - 22)
    g = _grid(8, 5, spark_w, None)
    for phase in PHASES:
        hi = queue_scale(tr, phase)
        style = "yellow" if phase != "running" and (q.get(phase) or 0) > 0 else ""
        g.add_row(Text(phase), Text(number(q.get(phase)), style=style, justify="right"),
                  Text(spark(tr.series(phase), hi, spark_w), style="cyan"), Text(f"≤{hi:g}", style="dim"))
    r = tr.rates
    rates = Text("in ", style="dim")
    rates.append(_rate(r.get("arrived")))
    rates.append("  done ", style="dim")
    rates.append(_rate(r.get("finished")))
    rates.append("  rot ", style="dim")
    rates.append(_rate(r.get("rotations")))
    return Group(g, rates)


def _rate(x: float | None) -> str:
    return DASH if x is None else f"{x:.1f}/s"


def transfer(tr: Tracker, width: int = 40) -> RenderableType:
    """GB/s each way against the probe's measured peak while both directions run, link busy share,
    B_xfer. On the twin with a CPU-only probe the peak is this host's memory copies (marked)."""
    s = tr.state or {}
    probe = s.get("probe") or {}
    host = bool(s.get("simulation")) and probe.get("device") == "cpu"
    g = _grid(4, 6, 7, 5, 6)
    g.add_row(Text(""), *(Text(h, style="bold dim", justify="right") for h in
                          ("GB/s", "peak*" if host else "peak", "use", "busy")))
    for d in ("h2d", "d2h"):
        x = dig(s, "transfer", d) or {}
        gbps, peak, busy = num(x.get("gbps")), num(probe.get(f"duplex_{d}_gbps")), num(x.get("busy_share"))
        share = gbps / peak if gbps is not None and peak else None
        g.add_row(Text(d, style="bold"),
                  Text(f"{gbps:.2f}" if gbps is not None else DASH, justify="right"),
                  Text(f"{peak:.1f}" if peak is not None else DASH, justify="right", style="dim"),
                  Text(f"{100 * share:.0f}%" if share is not None else DASH, justify="right",
                       style=share_style(share)),
                  Text(f"{100 * busy:.1f}%" if busy is not None else DASH, justify="right", style="dim"))
    params = s.get("params") or {}
    b = Text(f"B_xfer {number(params.get('b_xfer'))} blk/iter", style="bold", no_wrap=True, overflow="ellipsis")
    b.append(f" · probe {number(probe.get('b_xfer_blocks'))}", style="dim")
    return Group(g, b)


def transfer_note(tr: Tracker) -> str:
    """The transfer panel's subtitle: on the twin with a CPU probe, what the peak is."""
    s = tr.state or {}
    if s.get("simulation") and (s.get("probe") or {}).get("device") == "cpu":
        return "* peak: host CPU probe"
    return ""


#: the knobs shown first, by their symbols: those of the core's knob table that have one (α, δ_B, δ_F), then
#: B_xfer (the transfer budget, not a knob of the table); every other knob follows under its name
SYMBOL = {**{k.name: k.symbol for k in KNOBS if k.symbol != k.name}, "b_xfer": "B_xfer"}


def params(tr: Tracker, now: float, width: int = 40, meta_first: bool = False) -> RenderableType:
    """Every knob (α, δ_B, δ_F, B_xfer and the policy's others), version, source and age; a change of the
    last few seconds highlighted. ``meta_first``: version/source/age on the first line (compact)."""
    p = (tr.state or {}).get("params") or {}
    updated = num(p.get("updated_at"))
    meta = Text(f"v{number(p.get('version'))}", style="bold")
    meta.append(f" · {p.get('source') or DASH} · {duration(now - updated) + ' ago' if updated else DASH}",
                style="dim")
    body = Text()
    col = 0
    items = knobs(p)
    order = [k for k in SYMBOL if k in items] + [k for k in items if k not in SYMBOL]
    for k in order:
        v = items[k]
        name = SYMBOL.get(k, k)
        cell = f"{name} {number(v)}"
        if col and col + len(cell) + 2 > width:
            body.append("\n")
            col = 0
        elif col:
            body.append("  ")
            col += 2
        fresh = tr.fresh.get(k, 0) > now
        body.append(name, style="reverse bold yellow" if fresh else "dim")
        body.append(" " + number(v), style="reverse bold yellow" if fresh else "bold")
        col += len(cell)
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append_text(meta if meta_first else body)
    out.append("\n")
    out.append_text(body if meta_first else meta)
    return fit(out, width)


def tuner(tr: Tracker, now: float, width: int = 36) -> RenderableType:
    """Mode, state, candidate, last decision, frozen and why, rollbacks in the last hour, jumps, and the
    exploration budget (spent/allowance, yellow once spent); "off" while the daemon has no tuner."""
    t = tr.tuner
    if t is None:
        out = Text("mode ", style="dim")
        out.append("off", style="bold")
        out.append("\nno tuner in this daemon\n(no /v1/tuner, no tuner block)", style="dim")
        return out
    out = Text("mode ", style="dim", no_wrap=True, overflow="ellipsis")
    out.append(str(t.get("mode") or DASH), style="bold")
    out.append("  state ", style="dim")
    out.append(str(t.get("state") or DASH))
    if t.get("phase"):
        out.append(f" ({t['phase']})", style="dim")
    out.append("\n")
    if t.get("frozen"):
        out.append("FROZEN", style="bold reverse red")
        out.append(f" {t.get('frozen_reason') or 'no reason given'}\n")
    else:
        out.append("not frozen\n", style="dim")
    cand = t.get("candidate")
    out.append("candidate ", style="dim")
    out.append((" ".join(f"{k} {number(v)}" for k, v in cand.items()) if isinstance(cand, dict) and cand
                else "none") + "\n")
    decisions = [d for d in t.get("last_decisions") or [] if isinstance(d, dict)]
    if decisions:
        d = decisions[-1]
        out.append(f"last {clock(d.get('at'))} ", style="dim")
        out.append(f"{d.get('action') or DASH}: {d.get('reason') or ''}\n")
    out.append(f"rollbacks/h {number(t.get('rollbacks_last_hour'))}", style="dim")
    if t.get("jumps") is not None:
        out.append(f" · jumps {number(t.get('jumps'))}", style="dim")
    budget = t.get("exploration_budget")
    if isinstance(budget, dict) and budget.get("allowance") is not None:
        # local steps' realised losses of the last hour against the allowance (attainment-seconds)
        spent = budget.get("spent_last_hour")
        out.append(f"\nlocal-step loss {number(spent)}/{number(budget['allowance'])} s",
                   style="dim" if budget.get("local_steps_allowed", True) else "bold yellow")
    return fit(out, width)


SHORT_PHASE = {"waiting": "wait", "rotary": "rotary", "running": "run"}


def ranking(tr: Tracker, rows: int = 6, width: int = 36) -> RenderableType:
    """The top of the last plan's VLT ranking (what LVF serves first); phases shortened when narrow."""
    short = width < 35
    g = _grid(5, 7, 6 if short else 7, 7, 5)
    g.add_row(*(Text(h, style="bold dim") for h in ("req", "tenant", "phase", "VLT", "age")))
    for r in ((tr.state or {}).get("ranking") or [])[:rows]:
        vlt = num(r.get("vlt_s"))
        phase = str(r.get("phase") or DASH)
        rid = str(r.get("req_id"))  # the twin's ids are numbers, vLLM's long strings: their tail tells them apart
        g.add_row(Text(f"#{rid}" if len(rid) <= 6 else f"…{rid[-5:]}"), Text(str(r.get("tenant") or DASH)),
                  Text(SHORT_PHASE.get(phase, phase) if short else phase),
                  Text(_vlt(vlt), style="red" if (vlt or 0) > 0 else "", justify="right"),
                  Text(duration(r.get("age_s")), justify="right"))
    return g


def _vlt(v: float | None) -> str:
    if v is None:
        return DASH
    return f"{v:+.0f}s" if abs(v) >= 100 else f"{v:+.1f}s" if abs(v) >= 10 else f"{v:+.2f}s"


EVENT_STYLE = {"error": "red", "warn": "yellow", "info": ""}


def events(tr: Tracker, rows: int, width: int = 116) -> RenderableType:
    """The newest ``rows`` events, oldest first."""
    out = Text(no_wrap=True, overflow="ellipsis")
    evs = tr.events.recent(rows)
    if not evs:
        return Text("no events yet", style="dim")
    for i, e in enumerate(evs):
        if i:
            out.append("\n")
        out.append(clock(e.t) + " ", style="dim")
        out.append(e.render(), style=EVENT_STYLE.get(e.level, ""))
    return fit(out, width)
