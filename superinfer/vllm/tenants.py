"""Per-request tenants and SLOs of the vLLM plugin.

A request names its tenant and may override its SLOs in ``SamplingParams.extra_args`` (``tenant``,
``ttft_slo``, ``tbt_slo``). Each distinct (tenant, TTFT override, TBT override) gets a stable index, the
request table's ``tenant`` column; :meth:`RequestTenants.table` builds the core's :class:`TenantTable`
for those indices from the live params (rebuilt when a new key appears or the params change).
"""

from __future__ import annotations

import collections
import logging
import math
from typing import Any

from superinfer.core import Tenant, TenantTable
from superinfer.vllm.params import LiveParams

log = logging.getLogger(__name__)

_Key = tuple[str, float | None, float | None]


class RequestTenants:
    """Tenant indices of requests; ``stats["bad_slo_args"]`` counts SLO overrides that were ignored."""

    def __init__(self, stats: collections.Counter[str]) -> None:
        self.stats = stats
        self._keys: dict[_Key, int] = {}
        self._table: TenantTable | None = None
        self._version = -1

    def index_of(self, request: Any) -> int:
        """The tenant index of ``request`` (new keys get the next index)."""
        extra = getattr(request.sampling_params, "extra_args", None) or {}
        name = str(extra.get("tenant", "default"))
        slos: list[float | None] = []
        for key in ("ttft_slo", "tbt_slo"):
            value = extra.get(key)
            if value is not None:
                try:
                    value = float(value)
                    if not (math.isfinite(value) and value > 0):
                        raise ValueError
                except (TypeError, ValueError):
                    self.stats["bad_slo_args"] += 1
                    log.warning("request %s: ignoring %s=%r (need a number > 0)", request.request_id, key, value)
                    value = None
            slos.append(value)
        key = (name, slos[0], slos[1])
        idx = self._keys.get(key)
        if idx is None:
            idx = self._keys[key] = len(self._keys)
            self._table = None
        return idx

    def name_of(self, idx: int) -> str:
        """The tenant name of index ``idx`` (``?`` for an index never handed out)."""
        for (name, _, _), i in self._keys.items():
            if i == idx:
                return name
        return "?"

    def table(self, live: LiveParams) -> TenantTable:
        """The core's tenant table, row ``i`` for index ``i``: the named tenant's SLOs, weight and priority
        from ``live`` (the default tenant's where unnamed), with the request's overrides."""
        if self._table is None or self._version != live.version:
            named = {t.name: t for t in live.tenants}
            rows = []
            for (name, ttft, tbt), idx in sorted(self._keys.items(), key=lambda kv: kv[1]):
                base = named.get(name, live.default_tenant)
                rows.append(Tenant(f"{idx}:{name}", ttft or base.ttft_slo, tbt or base.tbt_slo, base.weight,
                                   base.priority))
            self._table = TenantTable(rows or [live.default_tenant])
            self._version = live.version
        return self._table
