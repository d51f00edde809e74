"""Where frames come from: a live daemon (with reconnect backoff and optional recording) or a recording.

One :meth:`poll` returns one :class:`Poll`: the state (and ``GET /v1/tuner`` when the state has no
``tuner`` block and the daemon has that route), or why there is none. When the daemon process is new
(first answer, or a new ``pid``/``started_at``) the poll also carries ``GET /v1/config``. Callers never
run two polls at once (the app's single poll worker; the ``--json`` loop).

Recording format (``--record``), one JSON object per line: ``{"t": unix_s, "state": {...}, "tuner":
{...}|null, "config": {...}|absent}`` or ``{"t": unix_s, "error": "reason"}``. ``--replay`` plays the
lines back in order, one per tick (a ``.gz`` file is read through gzip).
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from superinfer.tui.client import ApiError, Bound, DaemonClient, Unreachable, clean
from superinfer.tui.connect import NotRunning, Target

MAX_BACKOFF_S = 10.0


@dataclass
class Poll:
    t: float
    state: dict[str, Any] | None = None
    tuner: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    error: str | None = None

    def record(self) -> dict[str, Any]:
        if self.state is None:
            return {"t": self.t, "error": self.error}
        out: dict[str, Any] = {"t": self.t, "state": self.state, "tuner": self.tuner}
        if self.config is not None:
            out["config"] = self.config
        return out


def backoff_s(interval_s: float, failures: int) -> float:
    """Seconds to wait after ``failures`` consecutive failed polls: the interval, doubling, at most
    :data:`MAX_BACKOFF_S`."""
    if failures <= 0:
        return interval_s
    return min(max(interval_s, 0.5) * 2 ** (failures - 1), MAX_BACKOFF_S)


class LiveSource:
    """Polls the daemon of ``target``; ``record``: a file to append every poll to."""

    replay = False

    def __init__(self, target: Target, timeout_s: float = 3.0, record: Path | None = None) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.client: DaemonClient | None = None
        self.failures = 0
        self.not_running = ""  # the full message of the latest NotRunning (names the state dir)
        self._identity: tuple[Any, Any] | None = None
        self._tuner_route: bool | None = None  # None: not asked yet for this process
        self._record: TextIO | None = open(record, "a", encoding="utf-8") if record is not None else None

    async def _client(self) -> DaemonClient:
        """The client for the URL and token of now (a restarted daemon may listen elsewhere)."""
        url = self.target.resolve_url()
        if self.client is None or self.client.url != url or self.client.token != self.target.token:
            old, self.client = self.client, DaemonClient(url, self.target.token, self.timeout_s)
            if old is not None:
                await old.aclose()
        return self.client

    async def poll(self) -> Poll:
        now = time.time()
        try:
            client = await self._client()
            state = await client.state()
            identity = (state.get("pid"), state.get("started_at"))
            config = None
            if identity != self._identity:
                self._identity, self._tuner_route = identity, None
                config = await client.config()
            tuner = None
            if not isinstance(state.get("tuner"), dict) and self._tuner_route is not False:
                tuner = await client.tuner()
                self._tuner_route = tuner is not None
            poll = Poll(now, state, tuner, config)
            self.failures = 0
        except NotRunning as exc:
            poll = Poll(now, error=exc.reason)
            self.not_running = str(exc)
        except Unreachable as exc:
            poll = Poll(now, error=exc.reason)
        except ApiError as exc:
            poll = Poll(now, error=f"HTTP {exc.status}: {exc.message}")
        if poll.error is not None:
            self.failures += 1
        if self._record is not None:
            self._record.write(json.dumps(poll.record(), separators=(",", ":")) + "\n")
            self._record.flush()
        return poll

    async def bounds(self) -> dict[str, Bound]:
        return await (await self._client()).bounds()

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        if self._record is not None:
            self._record.close()
            self._record = None


class ReplaySource:
    """Plays a ``--record`` file back, one line per :meth:`poll`; after the last line, ``ended``."""

    replay = True
    failures = 0
    client = None

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lines: list[dict[str, Any]] = []
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{self.path}:{i}: not JSON ({exc})") from None
                if not isinstance(rec, dict) or not isinstance(rec.get("t"), (int, float)) or \
                        not (isinstance(rec.get("state"), dict) or isinstance(rec.get("error"), str)):
                    raise ValueError(f"{self.path}:{i}: expected {{\"t\": number, \"state\": {{...}}}} or "
                                     "{\"t\": number, \"error\": \"...\"}")
                self.lines.append(rec)
        if not self.lines:
            raise ValueError(f"{self.path}: no recorded polls")
        self.i = 0

    @property
    def ended(self) -> bool:
        return self.i >= len(self.lines)

    async def poll(self) -> Poll | None:
        if self.ended:
            return None
        rec = clean(self.lines[self.i])
        self.i += 1
        return Poll(float(rec["t"]), rec.get("state"), rec.get("tuner"), rec.get("config"), rec.get("error"))

    async def bounds(self) -> dict[str, Bound]:
        return {}

    async def aclose(self) -> None:
        return None
