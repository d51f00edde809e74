"""What the OpenAPI schema says about answers the handlers build themselves (the schema must tell the
truth: every status code and content type a route returns is documented, and a request the schema
accepts is one the handler accepts).

Handlers here read raw bodies (so a malformed one is a 400 in the daemon's error shape, not FastAPI's
422), so their request bodies are documented with ``openapi_extra`` and their error answers with
:func:`errors`.
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["message", "type", "code"],
                             "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                                            "code": {"type": "integer"}},
                             "additionalProperties": True}}}

WHY = {
    400: "malformed JSON, or a body the handler cannot serve",
    401: "missing or wrong bearer token",
    422: "a field is unknown, of the wrong type, or out of bounds; nothing applied",
    429: "the tenant has its max_inflight requests in flight (see Retry-After)",
    503: "starting, draining or overloaded (see Retry-After)",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for the daemon's error answers (``{"error": {...}}``)."""
    return {c: {"description": WHY.get(c, "error"), "content": {"application/json": {"schema": ERROR_SCHEMA}}}
            for c in codes}


def json_body(schema: dict[str, Any], *, secured: bool = False) -> dict[str, Any]:
    """``openapi_extra=`` for a route that reads its JSON body itself."""
    extra: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
    if secured:
        extra["security"] = [{"bearer": []}]
    return extra


METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition format",
          "content": {"text/plain": {"schema": {"type": "string"}}}}}

TUNER_UPDATE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {"mode": {"type": "string", "enum": ["off", "shadow", "advise", "auto"]},
                   "freeze": {"type": "boolean", "description": "true: freeze (no trials, a running one is "
                              "written back); false: unfreeze (also forgets past rollbacks)"}},
    "description": "Any of mode and freeze; {} changes nothing."}


def completion_schema(tenants: list[str] | None, max_model_len: int, max_tokens: int) -> dict[str, Any]:
    """``POST /v1/completions`` of the twin: a prompt (a string, about 4 characters per token, or token
    ids) and ``max_tokens`` within the model. One rule JSON Schema cannot state, so the description does:
    prompt tokens + ``max_tokens`` must fit ``max_model_len`` (else 400). ``tenants``: the names a request
    may give (None: any name; an unknown one is served as the default tenant)."""
    tenant: dict[str, Any] = {"type": ["string", "null"]}
    if tenants is not None:
        tenant = {"enum": [*tenants, None]}
    return {
        "type": "object", "required": ["prompt"], "additionalProperties": True,
        "description": f"prompt tokens + max_tokens must not exceed max_model_len ({max_model_len}); else 400",
        "properties": {
            "prompt": {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 4 * (max_model_len - 1)},
                                 {"type": "array", "items": {"type": "integer"}, "minItems": 1,
                                  "maxItems": max_model_len - 1}]},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": max_tokens},
            "stream": {"type": "boolean"},
            "model": {"description": "ignored: the twin serves one model"},
            "vllm_xargs": {"type": ["object", "null"], "properties": {"tenant": tenant}, "additionalProperties": True},
        }}
