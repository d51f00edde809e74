"""The control API (FastAPI). Field names are a contract with the TUI and the tuner: docs/daemon.md.

Routes: ``GET /healthz``, ``GET /v1/state``, ``GET /v1/params``, ``PUT /v1/params`` (bearer token),
``GET /v1/tuner``, ``PUT /v1/tuner`` (bearer token; ``superinfer.daemon.api_tuner``), ``GET /v1/config``,
``GET /metrics``, the OpenAPI schema at ``/openapi.json`` (docs at ``/docs``), plus
the backend's OpenAI routes (``/v1/completions``, ``/v1/models``, ...). Errors are
``{"error": {"message", "type", "code", ...}}``. Invariants: mutating calls are refused with 401 unless
``Authorization: Bearer <state-dir/api-token>``; a bad request never changes anything; a failing
handler answers 500 without stopping the daemon.
"""

from __future__ import annotations

import hmac
import logging
import os
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from superinfer import __version__
from superinfer.daemon.api_tuner import register_tuner_routes
from superinfer.daemon.backends.base import Backend, Host
from superinfer.daemon.httputil import HttpError, error, json_body
from superinfer.daemon.metrics import CONTENT_TYPE_LATEST
from superinfer.daemon.openapi import METRICS_RESPONSE, errors
from superinfer.daemon.params import BOUNDS, INTEGER_KEYS, ParamError
from superinfer.daemon.schema import SCHEMA
from superinfer.daemon.wire import STATE_SCHEMA_VERSION


class ControlHost(Host, Protocol):
    """What the control API uses of the daemon: the backend's :class:`Host` view plus the backend itself,
    the API token, the logger, and the health and state documents.
    :class:`superinfer.daemon.server.Daemon` satisfies it structurally (this module does not import the
    server)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def token(self) -> str: ...

    @property
    def log(self) -> logging.Logger: ...

    def health(self) -> str: ...

    def error(self) -> str | None: ...

    def state(self) -> dict[str, Any]: ...

    @property
    def tuner(self) -> Any: ...


def params_update_schema() -> dict[str, Any]:
    """Body of ``PUT /v1/params`` (for the OpenAPI schema; :func:`validate_update` is what checks a body):
    any subset (``{}`` changes nothing) of every live knob of the core (bounds as in
    ``superinfer.core.PARAM_BOUNDS``) and ``b_xfer``; integers where the knob is one, never null."""
    help = {**{k: v.help for k, v in SCHEMA["scheduler"].items() if k in BOUNDS},
            "b_xfer": "blocks per iteration per direction"}
    props = {key: {"type": "integer" if key in INTEGER_KEYS else "number", "minimum": lo, "maximum": hi,
                   "description": help.get(key, key)} for key, (lo, hi) in BOUNDS.items()}
    return {"title": "ParamsUpdate", "type": "object", "additionalProperties": False, "properties": props}


PARAMS_UPDATE_SCHEMA = params_update_schema()


def _authorized(request: Request, token: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method some route of ``app`` takes on ``path``, sorted."""
    methods: set[str] = set()
    for route in app.router.routes:
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is not None and route_methods and regex.match(path):
            methods |= set(route_methods)
    return sorted(methods)


def build_app(daemon: ControlHost) -> FastAPI:
    """The control API of ``daemon`` with its backend's routes added."""
    app = FastAPI(title="superinferd control API", version=__version__,
                  description="State, live parameters and metrics of one superinferd. "
                              "Field names are stable (schema version %d); see docs/daemon.md." % STATE_SCHEMA_VERSION)

    @app.exception_handler(HttpError)
    async def _http_error(_: Request, exc: HttpError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StarletteHTTPException)
    async def _starlette_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Starlette's 405 names only the first route of the path (``Allow: GET`` for ``DELETE /v1/params``,
        which also takes PUT); answer with every method the path takes (RFC 9110 §15.5.6)."""
        if exc.status_code == 405:
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(allowed_methods(request.app, request.url.path))}
        return await http_exception_handler(request, exc)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        daemon.log.exception("request failed")
        return error(500, f"internal error: {type(exc).__name__}: {exc}", "internal_error")

    @app.get("/healthz", tags=["control"], summary="Liveness: 200 while serving, 503 while starting, "
                                                   "draining, stalled, or failed (then with the engine's error)")
    async def healthz() -> JSONResponse:
        status = daemon.health()
        body = {"status": status, "backend": daemon.backend.name, "simulation": daemon.backend.simulation,
                "pid": os.getpid()}
        if status == "failed":
            body["error"] = daemon.error()
        return JSONResponse(body,
                            status_code=200 if status == "ok" else 503)

    @app.get("/v1/state", tags=["control"], summary="One JSON snapshot of the daemon and its engine")
    async def state() -> dict[str, Any]:
        return daemon.state()

    @app.get("/v1/params", tags=["control"], summary="Live scheduler parameters")
    async def get_params() -> dict[str, Any]:
        return daemon.store.snapshot()

    @app.put("/v1/params", tags=["control"], summary="Change live parameters (bearer token); applied from "
             "the next iteration, no restart",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": PARAMS_UPDATE_SCHEMA}}},
                 "security": [{"bearer": []}]},
             responses=errors(400, 401, 422))
    async def put_params(request: Request) -> JSONResponse:
        if not _authorized(request, daemon.token):
            return error(401, "missing or wrong bearer token (see <state-dir>/api-token)", "unauthorized",
                         headers={"WWW-Authenticate": "Bearer"})
        body = await json_body(request)
        try:
            snap = daemon.store.update(body, source=f"api:{request.client.host if request.client else '?'}")
        except ParamError as exc:
            extra: dict[str, Any] = {"param": exc.key}
            if exc.bound is not None:
                extra["bound"] = list(exc.bound)
            return error(422, str(exc), "invalid_parameter", **extra)
        daemon.log.info("params changed by the API: %s", body)
        return JSONResponse(snap)

    @app.get("/v1/config", tags=["control"], summary="Effective configuration and where each value came from")
    async def config() -> dict[str, Any]:
        return daemon.cfg.as_dict()

    @app.get("/metrics", tags=["control"], summary="Prometheus metrics (text format)", response_class=Response,
             responses=METRICS_RESPONSE)
    async def metrics() -> Response:
        daemon.metrics.inflight.set(daemon.backend.inflight())
        return Response(daemon.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    register_tuner_routes(app, daemon, _authorized)
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = original()
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http", "scheme": "bearer", "description": "the token in <state-dir>/api-token"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    daemon.backend.register_routes(app, daemon)
    return app
