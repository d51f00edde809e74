"""The per-tenant SLO panel: :class:`TenantPanel` (bordered, titled with the window and target) holds
:class:`TenantRows`, one row per tenant (stable row keys) updated cell by cell, and the selected tenant's
"why" line under it.

Columns (wide): the verdict word beside its colour, the tenant's SLOs, requests/finished in the window,
TTFT attainment, TBT attainment per request and per gap, both-SLO attainment, TTFT and gap P50/P99
against the SLO, rotations per finished request, and the trend of the both-SLO attainment. The compact
layout (narrow terminals) keeps the verdict, counts, TTFT and both-SLO attainment, the P99s and the trend;
the medium one sits between.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from superinfer.tui.fmt import DASH, VERDICT_MARK, VERDICT_STYLE, fit, number, pct, secs, slo
from superinfer.tui.judge import UNJUDGED, percentile_class
from superinfer.tui.tracker import Tracker

WIDE = (("tenant", "tenant"), ("verdict", "verdict"), ("slo", "SLO F/B"), ("n", "req/fin"),
        ("ttft", "TTFT%"), ("tbt", "TBT%"), ("gap", "gap%"), ("both", "both%"), ("ttft_p", "TTFT p50/p99"),
        ("gap_p", "gap p50/p99"), ("shed", "shed"), ("rot", "rot/fin"), ("trend", "trend"))
MEDIUM = (("tenant", "tenant"), ("verdict", "verdict"), ("n", "req/fin"), ("ttft", "TTFT%"), ("tbt", "TBT%"),
          ("both", "both%"), ("ttft_p", "TTFT p50/p99"), ("gap_p", "gap p50/p99"), ("shed", "shed"), ("trend", "trend"))
COMPACT = (("tenant", "tenant"), ("verdict", "verdict"), ("n", "req/fin"), ("ttft", "TTFT%"), ("both", "both%"),
           ("ttft_p", "TTFT p99"), ("gap_p", "gap p99"), ("trend", "trend"))
#: columns by layout; the app picks one by terminal width (:func:`layout_for`)
LAYOUTS = {"wide": WIDE, "medium": MEDIUM, "compact": COMPACT}
MAX_TENANT_ROWS = 8  # the panel grows with the tenant count up to this many rows, then scrolls


def layout_for(width: int) -> str:
    """The widest column set that fits ``width`` terminal columns."""
    return "wide" if width >= 118 else "medium" if width >= 96 else "compact"


def _share(x: Any, verdict: str) -> Text:
    """An attainment, coloured by its verdict; "—" when the window is too thin to judge it."""
    if verdict == UNJUDGED:
        return Text(DASH, style="dim", justify="right")
    return Text(pct(x), style=VERDICT_STYLE[verdict], justify="right")


def _pair(p50: Any, p99: Any, slo: Any, compact: bool) -> Text:
    s50 = VERDICT_STYLE.get(percentile_class(p50, slo, True), "")
    s99 = VERDICT_STYLE.get(percentile_class(p99, slo, False), "")
    if compact:
        return Text(secs(p99), style=s99 if p99 is not None else "dim", justify="right")
    t = Text(justify="right")
    t.append(secs(p50), style=s50 if p50 is not None else "dim")
    t.append("/", style="dim")
    t.append(secs(p99), style=s99 if p99 is not None else "dim")
    return t


def tenant_cells(tr: Tracker, name: str, now: float, layout: str) -> dict[str, Text]:
    """The cells of ``name``'s row, by column key (a pure function of the tracker)."""
    t = ((tr.state or {}).get("tenants") or {}).get(name) or {}
    w = t.get("window") or {}
    d = tr.tenant(name, now)
    verdict = d["verdict"]
    compact = layout == "compact"
    cells = {
        "tenant": Text(name, style="bold"),
        "verdict": Text(f"{VERDICT_MARK[verdict]} {verdict}", style=VERDICT_STYLE[verdict]),
        "slo": Text(f"{slo(t.get('ttft_slo_s'))}/{slo(t.get('tbt_slo_s'))}", style="dim"),
        "n": Text(f"{number(w.get('requests'))}/{number(w.get('finished'))}", justify="right"),
        "ttft": _share(w.get("ttft_attainment"), d["ttft"]),
        "tbt": _share(w.get("tbt_attainment"), d["tbt"]),
        "gap": _share(w.get("tbt_gap_attainment"), d["gap"]),
        "both": _share(w.get("slo_attainment"), d["slo"]),
        "ttft_p": _pair(w.get("ttft_p50_s"), w.get("ttft_p99_s"), t.get("ttft_slo_s"), compact),
        "gap_p": _pair(w.get("tbt_p50_s"), w.get("tbt_p99_s"), t.get("tbt_slo_s"), compact),
        "rot": Text(number(None if w.get("rotations_per_finished") is None else round(w["rotations_per_finished"], 1)),
                    justify="right"),
        # requests shed at their first-token deadline in the window (503 with Retry-After)
        "shed": Text(number(w.get("shed")), style="red" if w.get("shed") else "", justify="right"),
    }
    arrow, delta = d["trend"], d["trend_pp"]
    style = "green" if arrow == "↑" else "red" if arrow == "↓" else "dim"
    cells["trend"] = Text(f"{arrow} {delta:+.1f}pp" if arrow and delta is not None else DASH, style=style)
    return cells


class TenantRows(DataTable):
    """The tenant rows (a :class:`~textual.widgets.DataTable`). :meth:`update_from` adds/removes rows by tenant name and changes only the cells
    whose text changed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, show_cursor=True, **kwargs)
        self._layout: str | None = None
        self._cells: dict[tuple[str, str], str] = {}

    def _columns(self, layout: str) -> None:
        self.clear(columns=True)
        self._cells.clear()
        for key, label in LAYOUTS[layout]:
            self.add_column(Text(label, style="bold"), key=key)
        self._layout = layout

    @property
    def selected(self) -> str | None:
        """The tenant under the cursor."""
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # noqa: BLE001 - no row under the cursor
            return None

    def update_from(self, tr: Tracker, now: float, layout: str) -> None:
        if layout != self._layout:
            selected = self.selected
            self._columns(layout)
            if selected:
                self._cells[("", "select")] = selected
        names = list(((tr.state or {}).get("tenants") or {}))
        for key in [str(k.value) for k in list(self.rows)]:
            if key not in names:
                self.remove_row(key)
                for col, _ in WIDE:
                    self._cells.pop((key, col), None)
        columns = LAYOUTS[layout]
        for name in names:
            cells = tenant_cells(tr, name, now, layout)
            if name not in {str(k.value) for k in self.rows}:
                self.add_row(*(cells[c] for c, _ in columns), key=name)
                for c, _ in columns:
                    self._cells[(name, c)] = cells[c].markup
                continue
            for c, _ in columns:
                mark = cells[c].markup
                if self._cells.get((name, c)) != mark:
                    self._cells[(name, c)] = mark
                    self.update_cell(name, c, cells[c], update_width=True)
        pending = self._cells.pop(("", "select"), None)
        if pending in names:
            self.move_cursor(row=names.index(pending))


class TenantPanel(Vertical):
    """The "SLOs per tenant" panel: the rows, and under them why the selected tenant's attainment moves."""

    TITLE = "SLOs per tenant"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(classes="panel", **kwargs)
        self.border_title = self.TITLE

    def compose(self) -> ComposeResult:
        yield TenantRows(id="tenants")
        yield Static(id="why")

    @property
    def rows(self) -> TenantRows:
        return self.query_one(TenantRows)

    def show(self, tr: Tracker, now: float) -> None:
        width = self.app.size.width
        table = self.rows
        table.update_from(tr, now, layout_for(width))
        n = min(max(len((tr.state or {}).get("tenants") or {}), 1), MAX_TENANT_ROWS)
        self.styles.height = n + 4  # borders, column header, rows, why
        sel = table.selected
        why = Text(no_wrap=True, overflow="ellipsis")
        if sel is not None and tr.state is not None:
            why.append(f"why ({sel}): ", style="bold")
            why.append(tr.tenant(sel, now)["why"])
        self.query_one("#why", Static).update(fit(why, width - 4))
        self.border_title = (f"{self.TITLE} · window {tr.state.get('slo_window_s', '—')}s · target "
                             f"{100 * tr.target:.0f}%" if tr.state else self.TITLE)
