"""The dashboard's Textual CSS (a Python string, so it ships inside the package).

Fixed heights: header and banner 1 line, the tenant box sized to its tenant count (set by the app),
row 1 (KV, queues, transfer) 6 lines, row 2 (params, tuner, VLT ranking) 9 lines, the event log takes
what is left. ``#body.compact`` (narrow or short terminals) hides transfer, tuner and ranking.
"""

TOP_CSS = """
Screen { layout: vertical; }
#header { height: 1; background: $boost; padding: 0 1; }
#banner { height: 1; padding: 0 1; }
#banner.disconnected { background: $error 35%; }
#banner.paused { background: $warning 30%; }
#banner.message-error { background: $error 25%; }
#banner.message-warn { background: $warning 25%; }
#banner.message-info { background: $success 20%; }
#body { height: 1fr; }
#body.stale .panel { text-opacity: 45%; }
#body.stale #tenants { text-opacity: 45%; }
.panel { border: round $primary-darken-1; border-title-color: $text; padding: 0 1; }
#tenants-box { height: 8; padding: 0 0; }
#tenants { height: 1fr; scrollbar-size-vertical: 0; scrollbar-size-horizontal: 0; }
#why { height: 1; padding: 0 1; }
#row1 { height: 6; }
#row1 > .panel { width: 1fr; height: 100%; }
#row2 { height: 9; }
#row2 > .panel { width: 1fr; height: 100%; }
#events { height: 1fr; min-height: 3; }
#body.compact #transfer { display: none; }
#body.compact #tuner { display: none; }
#body.compact #ranking { display: none; }
#body.compact #row1 { height: 5; }
#body.compact #row2 { height: 4; }
ModalScreen { align: center middle; }
#dialog { width: 90%; max-width: 110; height: auto; max-height: 90%; border: thick $accent;
          background: $surface; padding: 0 1; }
#knobs { height: auto; max-height: 16; }
#preview { height: auto; min-height: 1; }
#log { width: 95%; height: 90%; border: round $accent; background: $surface; padding: 0 1; }
"""
