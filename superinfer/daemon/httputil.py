"""HTTP helpers shared by the control API and the backends' OpenAI endpoints.

Errors have one shape everywhere (OpenAI-style): ``{"error": {"message", "type", "code", ...}}``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from superinfer.daemon.wire import TENANT_XARG, XARGS_FIELD

_TENANT_PARAM = f"{XARGS_FIELD}.{TENANT_XARG}"  # where an error about the tenant points


class HttpError(Exception):
    """An HTTP error answer raised from a handler; :meth:`response` renders it in the shape above."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.extra = status, message, type_, extra

    def response(self) -> JSONResponse:
        return error(self.status, self.message, self.type, **self.extra)


def error(status: int, message: str, type_: str = "invalid_request_error", headers: dict | None = None,
          **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "code": status, **extra}},
                        status_code=status, headers=headers)


def retry_after_s(ttft_slo_s: float) -> int:
    """What ``Retry-After`` says to a client shed at its first-token deadline: its tenant's TTFT SLO in whole
    seconds, at least 1 (by then the queue it met has had that long to drain; a client that retries at once
    would meet the same queue)."""
    return max(1, math.ceil(ttft_slo_s))


async def json_body(request: Request) -> Any:
    """The decoded body; :class:`HttpError` 400 when it is not JSON."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"malformed JSON body: {exc}") from None


def resolve_tenant(body: dict[str, Any], names: dict[str, int], default: str, unknown: str) -> str:
    """The tenant a request runs as: ``vllm_xargs.tenant``, else the default tenant. An unknown name is
    served as the default tenant (``unknown == "default"``) or refused with 400 (``"reject"``)."""
    xargs = body.get(XARGS_FIELD)
    if xargs is None:
        return default
    if not isinstance(xargs, dict):
        raise HttpError(400, f"{XARGS_FIELD} must be an object", param=XARGS_FIELD)
    tenant = xargs.get(TENANT_XARG)
    if tenant is None:
        return default
    if not isinstance(tenant, str):
        raise HttpError(400, f"{_TENANT_PARAM} must be a string", param=_TENANT_PARAM)
    if tenant in names:
        return tenant
    if unknown == "reject":
        raise HttpError(400, f"unknown tenant {tenant!r}; this profile serves {sorted(names)}",
                        param=_TENANT_PARAM)
    return default
