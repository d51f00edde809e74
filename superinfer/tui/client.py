"""The daemon's control API over HTTP, as the dashboard uses it.

Every answer is passed through :func:`clean` (control characters stripped from every string, so a
hostile or broken daemon cannot move the cursor or change colours). Failures are two exceptions:
:class:`Unreachable` (no answer: refused, timed out, not JSON) and :class:`ApiError` (an answer with an
error status; ``message`` is the daemon's ``error.message``). The token goes only into the
``Authorization`` header of mutating calls; it is never part of a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NEWLINES = re.compile(r"[\r\n\t]+")


def clean_text(s: str) -> str:
    """``s`` without control characters (newlines and tabs become one space)."""
    return _CONTROL.sub("", _NEWLINES.sub(" ", s))


def clean(obj: Any) -> Any:
    """A JSON document with every string (keys too) passed through :func:`clean_text`."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {clean_text(k) if isinstance(k, str) else k: clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clean(v) for v in obj]
    return obj


class Unreachable(Exception):
    """The daemon did not answer (``reason`` is short, for the DISCONNECTED banner)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ApiError(Exception):
    """The daemon answered with an error status."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body or {}


@dataclass(frozen=True)
class Bound:
    """A knob's type and bounds, from the daemon's OpenAPI schema of ``PUT /v1/params``."""

    integer: bool
    lo: float | None
    hi: float | None
    help: str = ""


def _reason(exc: Exception) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused" if "refused" in str(exc).lower() else "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "connection closed"
    return clean_text(type(exc).__name__)


def _error_message(r: httpx.Response) -> tuple[str, dict[str, Any]]:
    try:
        body = clean(r.json())
    except ValueError:
        return clean_text(r.text[:200]) or r.reason_phrase, {}
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"], err
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        return body["detail"], body
    return r.reason_phrase, body if isinstance(body, dict) else {}


class DaemonClient:
    """Async calls to one daemon at ``url``. ``token``: for mutating calls (None: read-only)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 3.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"expected an http(s) URL, got {url!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.url = url.rstrip("/")
        self.token = token
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout_s,
                                       headers={"User-Agent": "superinferd-top"})

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    auth: bool = False) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        try:
            r = await self._http.request(method, path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise Unreachable(_reason(exc)) from None
        if r.status_code >= 400:
            message, err = _error_message(r)
            raise ApiError(r.status_code, message, err)
        try:
            return r.status_code, clean(r.json())
        except ValueError:
            raise Unreachable(f"not JSON from {path}") from None

    async def state(self) -> dict[str, Any]:
        """``GET /v1/state``. A daemon that is starting or draining still answers 200 here."""
        _, data = await self._call("GET", "/v1/state")
        if not isinstance(data, dict):
            raise Unreachable("/v1/state is not an object")
        return data

    async def params(self) -> dict[str, Any]:
        return (await self._call("GET", "/v1/params"))[1]

    async def put_params(self, changes: dict[str, float | int]) -> dict[str, Any]:
        """``PUT /v1/params`` with the token; :class:`ApiError` 401 (token) or 422 (value) otherwise."""
        if not changes:
            raise ValueError("put_params needs at least one change")
        return (await self._call("PUT", "/v1/params", changes, auth=True))[1]

    async def config(self) -> dict[str, Any] | None:
        """``GET /v1/config`` (None when the daemon has none)."""
        try:
            return (await self._call("GET", "/v1/config"))[1]
        except ApiError:
            return None

    async def tuner(self) -> dict[str, Any] | None:
        """``GET /v1/tuner``; None when the daemon has no tuner API (404/405)."""
        try:
            return (await self._call("GET", "/v1/tuner"))[1]
        except ApiError as exc:
            if exc.status in (404, 405):
                return None
            raise

    async def put_tuner(self, body: dict[str, Any]) -> dict[str, Any]:
        """``PUT /v1/tuner`` (``{"freeze": bool}`` or ``{"mode": ...}``) with the token."""
        return (await self._call("PUT", "/v1/tuner", body, auth=True))[1]

    async def bounds(self) -> dict[str, Bound]:
        """Each knob's type and bounds from ``/openapi.json`` (empty when the schema does not say)."""
        try:
            _, doc = await self._call("GET", "/openapi.json")
        except ApiError:
            return {}
        return parse_bounds(doc)


def parse_bounds(doc: Any) -> dict[str, Bound]:
    """The properties of ``PUT /v1/params``'s body schema as :class:`Bound` s (each ``anyOf: [{type,
    minimum, maximum}, {type: null}]`` or a plain typed property). The schema is inline in the path, or a
    ``$ref`` to ``components.schemas``."""
    try:
        schema = doc["paths"]["/v1/params"]["put"]["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        props = schema["properties"]
    except (KeyError, TypeError, AttributeError):
        return {}
    out: dict[str, Bound] = {}
    for key, spec in props.items() if isinstance(props, dict) else ():
        if not isinstance(spec, dict):
            continue
        alts = spec.get("anyOf") or [spec]
        typed = next((a for a in alts if isinstance(a, dict) and a.get("type") in ("integer", "number")), None)
        if typed is None:
            continue
        lo, hi = typed.get("minimum"), typed.get("maximum")
        out[key] = Bound(typed["type"] == "integer", lo if isinstance(lo, (int, float)) else None,
                         hi if isinstance(hi, (int, float)) else None, str(spec.get("description") or ""))
    return out
