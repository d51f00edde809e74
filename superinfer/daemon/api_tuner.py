"""``GET /v1/tuner`` and ``PUT /v1/tuner``: the online tuner's status and its operator controls.

Contract (docs/daemon.md, kept for the dashboard): ``GET`` -> ``{"mode", "state", "frozen",
"frozen_reason", "incumbent", "candidate", "phase", "last_decisions": [{"at", "action", "reason", ...}],
"rollbacks_last_hour", ...}``; ``PUT`` with any of ``{"mode": "off|shadow|advise|auto", "freeze": bool}``
(bearer token; 401 without it, 400 on malformed JSON, 422 on an unknown key or a bad value, nothing
applied) -> the new status.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from superinfer.daemon.httputil import error, json_body
from superinfer.daemon.openapi import TUNER_UPDATE_SCHEMA, errors
from superinfer.daemon.openapi import json_body as json_body_doc
from superinfer.tuner.config import MODES


class TunerHost(Protocol):
    """What these routes use of the daemon (``superinfer.daemon.server.Daemon`` satisfies it)."""

    @property
    def tuner(self) -> Any: ...

    @property
    def token(self) -> str: ...


def validate_tuner_update(body: Any) -> dict[str, Any]:
    """A ``PUT /v1/tuner`` body; raises ``ValueError`` (message, field) on anything else."""
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object with mode and/or freeze, got {type(body).__name__}", "")
    for key in body:
        if key not in ("mode", "freeze"):
            raise ValueError(f"unknown field {key!r}; PUT /v1/tuner takes mode and freeze", key)
    if "mode" in body and body["mode"] not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {body['mode']!r}", "mode")
    if "freeze" in body and not isinstance(body["freeze"], bool):
        raise ValueError(f"freeze must be true or false, got {body['freeze']!r}", "freeze")
    return dict(body)


def register_tuner_routes(app: FastAPI, daemon: TunerHost, authorized) -> None:
    @app.get("/v1/tuner", tags=["tuner"], summary="The online tuner: mode, state, incumbent, candidate, phase, "
             "last decisions, rollbacks, frozen and why")
    async def get_tuner() -> dict[str, Any]:
        return daemon.tuner.status()

    @app.put("/v1/tuner", tags=["tuner"], summary="Set the tuner's mode, freeze or unfreeze it (bearer token)",
             openapi_extra=json_body_doc(TUNER_UPDATE_SCHEMA, secured=True), responses=errors(400, 401, 422))
    async def put_tuner(request: Request) -> JSONResponse:
        if not authorized(request, daemon.token):
            return error(401, "missing or wrong bearer token (see <state-dir>/api-token)", "unauthorized",
                         headers={"WWW-Authenticate": "Bearer"})
        body = await json_body(request)
        try:
            update = validate_tuner_update(body)
        except ValueError as exc:
            message, field = exc.args
            return error(422, message, "invalid_parameter", param=field)
        source = f"api:{request.client.host if request.client else '?'}"
        return JSONResponse(daemon.tuner.put(update, source))
