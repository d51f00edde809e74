"""``superinferd top``: the live dashboard, or ``--once`` / ``--json`` for scripts.

Exit codes (as ``superinferd status``): 0 ok, 2 usage error, 3 the daemon is unreachable (``--once``).
The interactive dashboard needs a terminal; without one, ``--once`` or ``--json`` are the ways in.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from superinfer.tui.connect import Target, resolve_target
from superinfer.tui.source import LiveSource, ReplaySource, backoff_s
from superinfer.tui.text import json_object, once_text, use_colour, write_json
from superinfer.tui.tracker import Tracker

EXIT_USAGE, EXIT_NOT_RUNNING = 2, 3
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0


def _interval(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise click.BadParameter(f"expected seconds within [{MIN_INTERVAL_S:g}, {MAX_INTERVAL_S:g}], got {value:g}")
    return value


async def _once(source: LiveSource | ReplaySource, target: Target | None, as_json: bool) -> int:
    tracker = Tracker()
    last = None
    try:
        while True:
            poll = await source.poll()
            if poll is None:
                break
            last = poll
            if poll.state is None:
                tracker.lost(poll.error or "no answer", poll.t)
            else:
                if poll.config is not None:
                    tracker.set_config(poll.config)
                tracker.observe(poll.state, poll.t, poll.tuner)
            if not source.replay:
                break
    finally:
        await source.aclose()
    url = target.url if target is not None else f"replay:{source.path}"  # type: ignore[union-attr]
    if last is None or tracker.state is None:
        reason = last.error if last is not None else "no recorded state"
        if isinstance(source, LiveSource) and source.not_running:
            click.echo(f"superinferd top: {source.not_running}", err=True)
        else:
            click.echo(f"superinferd top: daemon unreachable ({url or 'no URL'}): {reason}", err=True)
        return EXIT_NOT_RUNNING
    now = last.t
    if as_json:
        write_json(json_object(url, tracker, now, error=last.error))
    else:
        sys.stdout.write(once_text(url, tracker, now, colour=use_colour(sys.stdout)))
    return 0 if last.state is not None else EXIT_NOT_RUNNING


async def _stream(source: LiveSource | ReplaySource, target: Target | None, interval_s: float) -> int:
    tracker = Tracker()
    seq = 0
    try:
        while True:
            poll = await source.poll()
            if poll is None:
                return 0
            if poll.state is None:
                tracker.lost(poll.error or "no answer", poll.t, backoff_s(interval_s, source.failures))
            else:
                if poll.config is not None:
                    tracker.set_config(poll.config)
                tracker.observe(poll.state, poll.t, poll.tuner)
            url = target.url if target is not None else f"replay:{source.path}"  # type: ignore[union-attr]
            write_json(json_object(url, tracker, poll.t, seq, error=poll.error))
            seq = tracker.events.events[-1].seq if tracker.events.events else 0
            if not source.replay:
                await asyncio.sleep(backoff_s(interval_s, source.failures))
    finally:
        await source.aclose()


@click.command("top")
@click.option("--url", default=None, help="Daemon URL (default: $SUPERINFER_URL, else the state dir's runtime.json).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="State directory of the daemon (default: $SUPERINFER_STATE_DIR, else the daemon's default).")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="API token file (default: $SUPERINFER_API_TOKEN, else <state-dir>/api-token).")
@click.option("--interval", type=float, default=1.0, show_default=True, callback=_interval,
              help="Seconds between polls.")
@click.option("--read-only", is_flag=True, help="Never change anything (e and f are disabled).")
@click.option("--once", is_flag=True, help="Print one snapshot as key=value lines and exit (3: unreachable).")
@click.option("--json", "as_json", is_flag=True, help="JSON: with --once one object, else one object per poll.")
@click.option("--record", type=click.Path(dir_okay=False), default=None,
              help="Append every poll to this file (JSON lines) for --replay.")
@click.option("--replay", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Play a --record file back instead of polling a daemon.")
def top(url: str | None, state_dir: str | None, token_file: str | None, interval: float, read_only: bool, once: bool,
        as_json: bool, record: str | None, replay: str | None) -> None:
    """The live dashboard: per-tenant SLOs, KV, queues, transfers, params, tuner, VLT ranking, events."""
    if record and replay:
        raise click.UsageError("--record and --replay exclude each other")
    if replay and (url or state_dir or token_file):
        raise click.UsageError("--replay plays a file: --url, --state-dir and --token-file do not apply")
    target: Target | None = None
    if replay:
        try:
            source: LiveSource | ReplaySource = ReplaySource(Path(replay))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        reason: str | None = f"replay of {replay}"
    else:
        target = resolve_target(url, state_dir, token_file, read_only)
        source = LiveSource(target, record=Path(record) if record else None)
        reason = target.read_only_reason
    if once:
        sys.exit(asyncio.run(_once(source, target, as_json)))
    if as_json:
        try:
            sys.exit(asyncio.run(_stream(source, target, interval)))
        except KeyboardInterrupt:
            sys.exit(0)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        click.echo("superinferd top: the dashboard needs a terminal; use --once or --json in scripts", err=True)
        sys.exit(EXIT_USAGE)
    from superinfer.tui.app import TopApp

    TopApp(source, interval, url=target.url if target is not None else f"replay:{replay}",
           read_only_reason=reason).run()
