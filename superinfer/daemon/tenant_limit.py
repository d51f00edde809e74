"""Each tenant's share of the host at the door: ``[[tenants]] max_inflight``, requests in flight at once.

A request of a tenant that already holds ``max_inflight`` requests in flight (accepted by the daemon, not yet
answered in full: waiting, prefilling or streaming) is refused at once with an OpenAI-style **429**
``rate_limit_exceeded`` and ``Retry-After`` (the tenant's TTFT SLO in whole seconds, as for a shed request):
the tenant is over its share, not the host over its capacity (that is the 503 of a missed first-token
deadline). Nothing was admitted, so nothing is lost: the refusal is counted in
``superinfer_requests_shed_total{reason="tenant_limit"}`` and in the tenant's SLO window as a miss, not in
``superinfer_requests_arrived_total``. Other tenants are not affected.

Invariant (kept by :meth:`TenantLimit.enter` and :meth:`TenantLimit.leave`, called once each per admitted
request, on the server's event loop): ``held[t]`` is the number of tenant ``t``'s requests in flight, and
never exceeds its limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from fastapi.responses import JSONResponse

from superinfer.core import Tenant
from superinfer.daemon.httputil import error, retry_after_s

#: the reason label of a request refused because its tenant is at its ``max_inflight``
TENANT_LIMIT = "tenant_limit"


class TenantLimit:
    """Counts each tenant's requests in flight and refuses the one too many (module docstring)."""

    def __init__(self, tenants: Iterable[Tenant], metrics: Any, slo: Any) -> None:
        """``metrics``: the daemon's (its ``shed`` counter); ``slo``: its :class:`~superinfer.daemon.stats.SloWindow`."""
        self._tenants = {t.name: t for t in tenants}
        self._metrics, self._slo = metrics, slo
        self.held: Counter[str] = Counter()

    def enter(self, tenant: str) -> JSONResponse | None:
        """Take a slot for one request of ``tenant``: None when it may go on (call :meth:`leave` when it
        ends), else the 429 to answer (counted; no slot taken)."""
        t = self._tenants[tenant]
        if t.max_inflight and self.held[tenant] >= t.max_inflight:
            self._metrics.shed.labels(tenant, TENANT_LIMIT).inc()
            self._slo.shed(tenant, 0.0)
            after = retry_after_s(t.ttft_slo)
            return error(429, f"tenant {tenant!r} has {self.held[tenant]} requests in flight, its limit "
                         f"([[tenants]] max_inflight); retry after {after} s", "rate_limit_exceeded",
                         headers={"Retry-After": str(after)})
        self.held[tenant] += 1
        return None

    def leave(self, tenant: str) -> None:
        """One request of ``tenant`` that :meth:`enter` let in has ended (answered, failed or aborted)."""
        if self.held[tenant] <= 0:
            raise RuntimeError(f"tenant {tenant!r}: leave() without enter()")
        self.held[tenant] -= 1
