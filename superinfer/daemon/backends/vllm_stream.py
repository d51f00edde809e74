"""The ``vllm`` backend's streamed completions: the first-token deadline, then the SSE relay with its timing.

A streamed request is opened against the engine child and its events are read **before the daemon answers**:
until its first token the client has been sent nothing, not even headers. If the tenant's first-token deadline
(``max_queue_s``, counted from arrival at the daemon) passes first, the engine request is closed — vLLM aborts a
request whose client went away, through its own abort path, and frees whatever KV it held — and the client gets
an OpenAI-style 503 with ``Retry-After``: the request was *shed*, it never started. Once the first token is
there the daemon answers 200 and relays the stream to its end: an accepted stream is never cut off by shedding.
An engine answer that carries no token (a 4xx for a prompt too long, a 5xx) is passed on with its own status.

Without a deadline (``max_queue_s`` infinite) the first events are still read before answering, so a client
always sees the engine's own status code. Timing: TTFT, every inter-token gap and the finished request's SLO
outcome go to ``/metrics``, the SLO window and the tuner, as before this module existed; a shed request is an
SLO miss (:meth:`superinfer.daemon.stats.SloWindow.shed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import Response, StreamingResponse

from superinfer.daemon.httputil import error, retry_after_s

#: the reason label of a request shed at its first-token deadline (``superinfer_requests_shed_total``)
DEADLINE = "deadline"


def is_token_event(line: str) -> bool:
    """Whether one line of vLLM's SSE stream carries output: a ``data:`` event other than ``[DONE]``, the
    usage-only event (``stream_options.include_usage``: ``"choices":[]``) and the chat stream's opening
    role event (``"delta":{"role":"assistant","content":""}``, sent just before the first token's). vLLM
    sends one such event per engine step that produced text for the request, so the proxy times events,
    not tokens: steps whose text vLLM holds back (stop strings, tool or reasoning parsers) merge into the
    next event. vLLM serializes compactly, and a quote inside a string is escaped, so the substrings
    match only JSON keys."""
    return (line.startswith("data: ") and line != "data: [DONE]" and '"choices":[]' not in line
            and '"role":' not in line)


def outcome_of(status: int) -> str:
    """How a request the engine answered ends: finished (200), rejected (4xx: the request was bad, e.g. too
    long for the model) or failed (anything else)."""
    return "finished" if status == 200 else "rejected" if 400 <= status < 500 else "failed"


def _waiting(backend: Any, delta: int, first: bool = False) -> None:
    """One more (``+1``) or one fewer streamed request waiting for its first token (``first``: it got it), as
    the admission predictor counts them (:mod:`superinfer.daemon.admission`)."""
    backend.waiting_first += delta
    if backend.predictor is not None:
        backend.predictor.observe(time.monotonic(), backend.waiting_first, int(first))


class Shed(Exception):
    """The first-token deadline passed before the engine produced a token."""


async def read_head(lines: AsyncIterator[str], is_token: Callable[[str], bool]) -> tuple[list[str], bool]:
    """Read ``lines`` up to and including the first token event: (the lines read, whether the stream ended
    before any token)."""
    head: list[str] = []
    async for line in lines:
        head.append(line)
        if is_token(line):
            return head, False
    return head, True


class Head:
    """An engine stream opened and read up to its first token in a task of its own, which is **never
    cancelled**: cancelling a task inside httpx's connection code makes httpcore close the connection under a
    cancel shield, and with dozens shed at once that spun the event loop for over a second (profiled on the
    real engine, deadlines of 1 s, 64 clients). A request shed or abandoned first is let go instead
    (:meth:`abandon`): its response is closed from outside, which ends the read with an error, never seen."""

    def __init__(self, upstream: Any) -> None:
        self.upstream = upstream
        self.response: Any = None
        self.started = False  # the reader has begun (before that, cancelling it touches no httpx code)
        self.opened = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> tuple[Any, AsyncIterator[str], list[str], bool]:
        self.started = True
        self.response = await self.upstream.__aenter__()
        self.opened.set()
        lines = self.response.aiter_lines()
        return (self.response, lines, *await read_head(lines, is_token_event))

    async def result(self, timeout_s: float) -> tuple[Any, AsyncIterator[str], list[str], bool]:
        """(response, its lines, the lines up to the first token, whether it ended without one); :class:`Shed`
        when ``timeout_s`` passes first (``inf``: never); the engine's own errors as raised. A deadline
        already past sheds before the request is sent to the engine at all."""
        if timeout_s <= 0 and not self.started:
            self.task.cancel()  # not begun: nothing of httpx has run, no connection is taken
            raise Shed()
        done, _ = await asyncio.wait({self.task}, timeout=max(timeout_s, 0.0) if math.isfinite(timeout_s) else None)
        if not done:
            raise Shed()
        return self.task.result()

    def abandon(self) -> None:
        """Let the engine stream go (the engine sees the client leave and aborts the request), in the
        background: once it is open, close its response; then collect the reader and the context."""
        async def close() -> None:
            opened = asyncio.ensure_future(self.opened.wait())
            await asyncio.wait({opened, self.task}, timeout=ABANDON_OPEN_S, return_when=asyncio.FIRST_COMPLETED)
            opened.cancel()
            if not self.opened.is_set() and not self.task.done():
                self.task.cancel()  # the engine never answered: the last resort, rare (its pool has room)
            if self.opened.is_set():
                with contextlib.suppress(Exception):
                    await self.response.aclose()
            with contextlib.suppress(BaseException):
                await self.task
            if self.opened.is_set():
                with contextlib.suppress(Exception):
                    await self.upstream.__aexit__(None, None, None)

        _BACKGROUND.add(task := asyncio.ensure_future(close()))
        task.add_done_callback(_BACKGROUND.discard)


#: how long an abandoned engine stream may take to open before its reader is cancelled
ABANDON_OPEN_S = 30.0
#: tasks closing abandoned engine streams (referenced until done, as asyncio requires)
_BACKGROUND: set[asyncio.Future] = set()


async def stream_completion(backend: Any, path: str, body: dict, tenant: str, t0: float) -> Response:
    """Forward a streamed completion for ``tenant`` (arrived at ``t0``, monotonic): shed at the deadline, or
    answer with the engine's status and relay its events (module docstring)."""
    import httpx

    h, slo = backend.host, backend.tenants[backend.tenant_index[tenant]]
    m, tuner = h.metrics, h.tuner
    if tuner is not None:  # only streamed requests are timed, so only they are reported to the tuner
        prompt = body.get("prompt", body.get("messages", ""))
        tuner.arrival(t0, tenant, len(prompt) if isinstance(prompt, list) else max(len(str(prompt)) // 4, 1))
    head_read = Head(backend._client.stream("POST", path, json=body))
    _waiting(backend, +1)
    ended = True
    try:
        try:
            r, lines, head, ended = await head_read.result(slo.max_queue_s - (time.monotonic() - t0))
        except Shed:
            head_read.abandon()
            waited = time.monotonic() - t0
            backend._done("shed", tenant)
            m.shed.labels(tenant, DEADLINE).inc()
            h.slo.shed(tenant, waited)
            if tuner is not None:
                tuner.first_token(t0, tenant, False)
            after = retry_after_s(slo.ttft_slo)
            return error(503, f"shed: no first token within the tenant's deadline ({slo.max_queue_s:g} s); the host "
                         f"is overloaded, retry after {after} s", "overloaded", headers={"Retry-After": str(after)})
        except httpx.HTTPError as exc:
            head_read.abandon()
            backend._done("failed", tenant)
            return error(502, f"engine unreachable: {exc}", "bad_gateway")
        except BaseException:
            head_read.abandon()
            backend._done("aborted", tenant)  # the client went away while it waited
            raise
    finally:
        _waiting(backend, -1, first=not ended)

    if ended:  # no token at all: the engine's own answer (an error, or an empty completion), status kept
        await head_read.upstream.__aexit__(None, None, None)
        outcome = outcome_of(r.status_code)
        backend._done(outcome, tenant)
        if outcome == "finished":
            m.observe_finished(tenant, True, None)
            h.slo.finished(tenant, 0.0, True, ttft_ok=None)
        return Response("\n".join(head) + "\n", status_code=r.status_code,
                        media_type=r.headers.get("content-type", "text/event-stream"))

    relayed = False

    async def relay():
        nonlocal relayed
        relayed = True
        first = last = None
        ttft_ok: bool | None = None
        gaps: list[float] = []
        outcome = "failed"

        def observe(line: str) -> None:
            nonlocal first, last, ttft_ok
            if not is_token_event(line):
                return
            now = time.monotonic()
            if first is None:
                first = now
                ttft = now - t0
                ttft_ok = ttft <= slo.ttft_slo
                m.observe_first_token(tenant, ttft, ttft_ok)
                h.slo.first_token(tenant, ttft, ttft_ok)
                if tuner is not None:
                    tuner.first_token(t0, tenant, ttft_ok)
            else:
                gaps.append(now - last)
                m.observe_gap(tenant, gaps[-1], gaps[-1] <= slo.tbt_slo)
            last = now
            m.t_tokens[tenant].inc()

        try:
            for line in head:
                observe(line)
                yield line + "\n"
            async for line in lines:
                observe(line)
                yield line + "\n"
            outcome = outcome_of(r.status_code)
        except (asyncio.CancelledError, GeneratorExit):
            outcome = "aborted"  # the client went away (or the drain gave up on it)
            raise
        finally:
            await head_read.upstream.__aexit__(None, None, None)
            # gaps enter the SLO window when the stream ends, finished or not (all were observed)
            h.slo.gaps(tenant, gaps, slo_s=slo.tbt_slo)
            if outcome == "finished":
                mean = sum(gaps) / len(gaps) if gaps else 0.0
                m.observe_finished(tenant, mean <= slo.tbt_slo, ttft_ok)
                h.slo.finished(tenant, mean, mean <= slo.tbt_slo, ttft_ok=ttft_ok)
                if tuner is not None:
                    tuner.finished(t0, tenant, ttft_ok, mean <= slo.tbt_slo, len(gaps) + (first is not None))
            backend._done(outcome, tenant)

    async def never_relayed() -> None:  # the client left before the first byte: relay()'s finally never ran
        if not relayed:
            await head_read.upstream.__aexit__(None, None, None)
            backend._done("aborted", tenant)

    return Relayed(relay(), never_relayed, status_code=r.status_code, media_type="text/event-stream")


class Relayed(StreamingResponse):
    """A StreamingResponse that runs ``cleanup`` when it is over, however it ended: a client that leaves before
    the body's first step cancels Starlette's task group before the generator starts, and an unstarted
    generator's ``finally`` never runs (the engine stream and the request's count would leak)."""

    def __init__(self, content: Any, cleanup: Callable[[], Any], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._cleanup = cleanup

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._cleanup()
