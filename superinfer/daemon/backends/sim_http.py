"""The twin's OpenAI-style endpoint: ``GET /v1/models``, ``POST /v1/completions`` (JSON or SSE stream).

A completion is parsed into a :class:`SimRequest` (:func:`parse_completion`), handed to the engine
(:meth:`SimEngine.submit`), and answered from the events the engine thread delivers on the server's event
loop: ``("token", n)`` ... then exactly one final ``("done", info)`` or ``("error", message)``. The text is
synthetic (``" sim0 sim1 ..."``); every answer says it is a simulation (``X-Superinfer-Simulation: true``
and ``"superinfer": {"simulation": true}``). Errors have the shape of :mod:`superinfer.daemon.httputil`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from superinfer.core.wait import WaitPredictor
from superinfer.daemon.admission import shed_at_admission
from superinfer.daemon.httputil import HttpError, error, json_body, resolve_tenant
from superinfer.daemon.openapi import completion_schema, errors
from superinfer.daemon.openapi import json_body as json_body_doc
from superinfer.daemon.tenant_limit import TenantLimit

if TYPE_CHECKING:
    from fastapi import FastAPI

    from superinfer.core import Sampled
    from superinfer.daemon.backends.base import Host

SIM_HEADER = {"X-Superinfer-Simulation": "true"}
MAX_TOKENS_DEFAULT = 16
MAX_TOKENS_LIMIT = 65536

#: one event for one waiter: (request, ("token", n) | ("done", info) | ("error", message))
Event = tuple["SimRequest", tuple[str, Any]]


class SimRequest:
    """An HTTP request inside the twin. ``queue`` receives ("token", n) ... then ("done", info) or
    ("error", message), delivered on the server's event loop."""

    __slots__ = ("tenant", "tenant_idx", "prompt_tokens", "max_tokens", "queue", "rid", "t_submit", "tokens")

    def __init__(self, tenant: str, tenant_idx: int, prompt_tokens: int, max_tokens: int) -> None:
        self.tenant, self.tenant_idx = tenant, tenant_idx
        self.prompt_tokens, self.max_tokens = prompt_tokens, max_tokens
        self.queue: asyncio.Queue = asyncio.Queue()
        self.rid: int | None = None
        self.t_submit = 0.0
        self.tokens = 0


class SimEngine(Protocol):
    """What the endpoint uses of the sim backend (:class:`~superinfer.daemon.backends.sim.SimBackend`)."""

    @property
    def served(self) -> str: ...

    @property
    def admitting(self) -> bool: ...

    @property
    def tenant_index(self) -> dict[str, int]: ...

    @property
    def default_tenant(self) -> str: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def predictor(self) -> WaitPredictor | None:
        """Shedding at admission (``[slo].shed_at_admission``), else None."""
        ...

    def inflight(self) -> int:
        """HTTP requests the engine holds (queued or live)."""
        ...

    def submit(self, req: SimRequest) -> None:
        """Stamp ``req.t_submit`` and queue it for admission (thread-safe); its events arrive on
        ``req.queue``."""
        ...


# ---- requests in --------------------------------------------------------------------------------
def max_tokens_limit(max_model_len: int) -> int:
    """The largest ``max_tokens`` a request may ask for (the schema says the same)."""
    return max(1, min(MAX_TOKENS_LIMIT, max_model_len - 1))


def _integral(x: Any) -> bool:
    """An integer as JSON Schema sees one: an int, or a float with no fractional part (not a bool)."""
    return not isinstance(x, bool) and (isinstance(x, int) or (isinstance(x, float) and x.is_integer()))


def parse_completion(body: Any, tenant_index: dict[str, int], default_tenant: str, unknown_tenant: str,
                     max_model_len: int) -> SimRequest:
    """A completion body -> :class:`SimRequest`. Raises :class:`HttpError` 400 (``param`` names the field)
    unless: the body is an object; ``prompt`` is a non-empty string (``ceil(len / 4)`` tokens) or a non-empty
    list of integer token ids (JSON Schema's integers: ``2.0`` is one); ``max_tokens`` (default 16) is an
    integer in [1, min(65536, max_model_len - 1)]; prompt + ``max_tokens`` fits ``max_model_len``;
    ``stream``, when given, is a boolean; the tenant resolves (:func:`~superinfer.daemon.httputil.resolve_tenant`,
    ``unknown_tenant`` is ``"default"`` or ``"reject"``)."""
    if not isinstance(body, dict):
        raise HttpError(400, "expected a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        n = max(1, (len(prompt) + 3) // 4)
    elif isinstance(prompt, list) and prompt and all(_integral(x) for x in prompt):
        n = len(prompt)
    else:
        raise HttpError(400, "prompt must be a non-empty string or a list of token ids "
                             "(one prompt per request in the twin)", param="prompt")
    max_tokens = body.get("max_tokens", MAX_TOKENS_DEFAULT)
    if _integral(max_tokens):
        max_tokens = int(max_tokens)  # JSON Schema: 16.0 is an integer too
    limit = max_tokens_limit(max_model_len)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= limit:
        raise HttpError(400, f"max_tokens must be an integer within [1, {limit}], got {max_tokens!r}",
                        param="max_tokens")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise HttpError(400, f"stream must be true or false, got {body['stream']!r}", param="stream")
    if n + max_tokens > max_model_len:
        raise HttpError(400, f"prompt ({n} tokens) + max_tokens ({max_tokens}) exceeds the model's "
                             f"{max_model_len}", param="max_tokens")
    tenant = resolve_tenant(body, tenant_index, default_tenant, unknown_tenant)
    return SimRequest(tenant, tenant_index[tenant], n, max_tokens)


# ---- events out (engine thread -> event loop) ---------------------------------------------------
def waiter_events(http: dict[int, SimRequest], s: Sampled, t_end: float) -> list[Event]:
    """The events of one iteration for the HTTP waiters in ``http`` (request id -> waiter): ``("token", 1)``
    for each waiter that sampled, ``("done", {t_arr, t_first, t_end})`` for each that finished, which is
    removed from ``http``. Runs on the engine thread, under the lock that guards ``http``."""
    events: list[Event] = []
    if not http:
        return events
    done = {f.req_id: f for f in s.finished}
    for rid in s.ids.tolist():
        req = http.get(rid)
        if req is None:
            continue
        f = done.get(rid)
        if f is not None:
            del http[rid]
            events.append((req, ("done", {"t_arr": f.t_arr, "t_first": f.t_first, "t_end": t_end})))
        else:
            events.append((req, ("token", 1)))
    return events


def dispatch(events: list[Event]) -> None:
    """Deliver events to their waiters; runs on the event loop (``loop.call_soon_threadsafe(dispatch, ...)``)."""
    for req, event in events:
        req.queue.put_nowait(event)


# ---- answers ------------------------------------------------------------------------------------
def synthetic_text(start: int, n: int) -> str:
    """Tokens ``start`` .. ``start + n - 1`` of the synthetic completion: ``" sim<i>"`` each."""
    return "".join(f" sim{i}" for i in range(start, start + n))


def completion_body(req: SimRequest, cid: str, served: str, text: str, finish: str | None,
                    info: dict[str, float] | None) -> dict[str, Any]:
    """One OpenAI ``text_completion`` object (or stream chunk); ``info`` (the ``done`` event's) adds
    ``usage`` and the twin's timing."""
    out: dict[str, Any] = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": served,
                           "system_fingerprint": "superinfer-sim",
                           "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}
    if info is not None:
        out["usage"] = {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.tokens,
                        "total_tokens": req.prompt_tokens + req.tokens}
        ttft = info["t_first"] - info["t_arr"]
        out["superinfer"] = {"simulation": True, "tenant": req.tenant, "ttft_s": round(ttft, 6),
                             "tbt_mean_s": round((info["t_end"] - info["t_first"]) / (req.tokens - 1), 6)
                             if req.tokens > 1 else None}
    else:
        out["superinfer"] = {"simulation": True}
    return out


def refusal(event: tuple[str, Any], req: SimRequest) -> Response | None:
    """The answer to a request whose first event says it will get no token (an engine error, or shed at its
    first-token deadline: 503 with ``Retry-After``, the event's value); None for a token."""
    kind, value = event
    if kind == "error":
        return error(503, value, "unavailable")
    if kind == "shed":
        return error(503, f"shed: no first token within tenant {req.tenant!r}'s deadline; the host is overloaded, "
                     f"retry after {value} s", "overloaded", headers={"Retry-After": str(value)})
    return None


async def collect(req: SimRequest, cid: str, served: str) -> Response:
    """Wait for the final event; the whole completion as JSON, or 503 with the error."""
    while True:
        kind, value = await req.queue.get()
        refused = refusal((kind, value), req)
        if refused is not None:
            return refused
        if kind == "token":
            req.tokens += value
        else:
            req.tokens += 1
            return JSONResponse(completion_body(req, cid, served, synthetic_text(0, req.tokens), "length", value),
                                headers=SIM_HEADER)


async def released(events: AsyncIterator[str], limit: TenantLimit, tenant: str) -> AsyncIterator[str]:
    """``events``, then the tenant's slot given back (however the stream ends)."""
    try:
        async for e in events:
            yield e
    finally:
        limit.leave(tenant)


async def stream(req: SimRequest, cid: str, served: str, first: tuple[str, Any]) -> AsyncIterator[str]:
    """Server-sent events from the ``first`` event on: one chunk per event, then ``data: [DONE]`` (an error is
    sent as one ``{"error": ...}`` chunk before it)."""
    event: tuple[str, Any] | None = first
    while True:
        kind, value = event if event is not None else await req.queue.get()
        event = None
        if kind == "error":
            yield "data: " + json.dumps({"error": {"message": value, "type": "unavailable", "code": 503}}) + "\n\n"
            yield "data: [DONE]\n\n"
            return
        start = req.tokens
        req.tokens += value if kind == "token" else 1
        finish = "length" if kind == "done" else None
        chunk = completion_body(req, cid, served, synthetic_text(start, req.tokens - start), finish,
                                value if kind == "done" else None)
        yield "data: " + json.dumps(chunk) + "\n\n"
        if kind == "done":
            yield "data: [DONE]\n\n"
            return


# ---- routes -------------------------------------------------------------------------------------
def register_openai_routes(app: FastAPI, host: Host, engine: SimEngine) -> None:
    """Add ``/v1/models`` and ``/v1/completions``. A completion is refused with 503 while draining
    (``Retry-After: 5``) or when ``engine.max_inflight`` (config) requests are held (``Retry-After: 1``, counted
    as rejected ``overloaded``), and with 429 when its tenant is at its ``max_inflight``
    (:mod:`superinfer.daemon.tenant_limit`)."""
    ids = itertools.count()
    limit = TenantLimit(host.cfg.tenants, host.metrics, host.slo)

    @app.get("/v1/models", tags=["openai"])
    async def models() -> dict:
        return {"object": "list", "data": [{"id": engine.served, "object": "model", "owned_by": "superinfer",
                                            "simulation": True}]}

    reject = host.cfg.get("slo", "unknown_tenant") == "reject"
    body_schema = completion_schema(sorted(engine.tenant_index) if reject else None, engine.max_model_len,
                                    max_tokens_limit(engine.max_model_len))

    @app.post("/v1/completions", tags=["openai"],
              summary="Completion from the digital twin (synthetic text at the twin's token times)",
              openapi_extra=json_body_doc(body_schema),
              responses={200: {"description": "a text_completion object, or server-sent events with stream",
                               "content": {"application/json": {"schema": {"type": "object"}},
                                           "text/event-stream": {"schema": {  # one server-sent event
                                               "type": "object", "properties": {"data": {"type": "string"},
                                                                                "event": {"type": "string"}}}}}},
                         **errors(400, 429, 503)})
    async def completions(request: Request):
        try:
            body = await json_body(request)
            req = parse_completion(body, engine.tenant_index, engine.default_tenant,
                                   host.cfg.get("slo", "unknown_tenant"), engine.max_model_len)
        except HttpError as exc:
            return exc.response()
        if not engine.admitting or host.draining:
            return error(503, "draining: the daemon is shutting down", "unavailable", headers={"Retry-After": "5"})
        if engine.inflight() >= host.cfg.get("engine", "max_inflight"):
            host.metrics.rejected.labels(req.tenant, "overloaded").inc()
            return error(503, "overloaded: too many requests in flight", "unavailable", headers={"Retry-After": "1"})
        refused = (shed_at_admission(engine.predictor, host.cfg.tenants[req.tenant_idx], host.metrics, host.slo)
                   or limit.enter(req.tenant))
        if refused is not None:
            return refused
        streaming = False
        try:
            engine.submit(req)
            cid = f"cmpl-sim-{next(ids)}"
            if not body.get("stream"):
                return await collect(req, cid, engine.served)
            first = await req.queue.get()  # answered once the first token is there: a shed request gets a 503
            refused = refusal(first, req)
            if refused is not None:
                return refused
            streaming = True
            return StreamingResponse(released(stream(req, cid, engine.served, first), limit, req.tenant),
                                     media_type="text/event-stream", headers=SIM_HEADER)
        finally:
            if not streaming:
                limit.leave(req.tenant)
