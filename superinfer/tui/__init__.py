"""``superinferd top``: the live terminal dashboard of one daemon (Textual), plus ``--once``/``--json``.

It talks to the daemon only over HTTP (``/v1/state``, ``/v1/params``, ``/v1/config``, ``/v1/tuner``,
``/openapi.json``) and reads the state directory's ``runtime.json`` and ``api-token``; it imports nothing
of the daemon but the state directory's file names and its default location.

Modules, one job each: ``connect`` (where the daemon is, which token, read-only and why), ``client``
(HTTP calls, error shapes, control-character stripping), ``source`` (the poll cycle with backoff, and
recording/replaying states), ``judge`` (OK/WARN/BREACH against the target, trends, why attainment
moves), ``events`` (the deduplicated event log), ``tracker`` (everything derived across polls: rates,
counter resets, restarts, histories, param changes), ``text`` (``--once`` and ``--json`` output),
``fmt`` (number formatting shared by the panels), ``status`` and ``panels`` (what the header, banner and
each panel show, as pure functions of the tracker), ``widgets`` (one widget per panel, each drawing itself
with ``show(tracker, now)``), ``tenants`` (the tenant panel: its rows, cells and "why" line), ``dialogs``
(edit, confirm, help, full log), ``app.tcss`` (layout), ``actions`` (the keys that talk to the daemon or
open dialogs), ``app`` (the Textual app: layout, the poll worker, calling each panel's ``show``) and
``cli`` (the click command).
"""
