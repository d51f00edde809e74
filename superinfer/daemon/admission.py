"""Shedding at the daemon's door: refuse at once a request whose predicted wait for a first token already
passes its deadline, instead of letting its client wait out the deadline for the same 503.

The prediction is :class:`superinfer.core.wait.WaitPredictor` (requests waiting / first-token rate under
load, measured). A request refused this way never reached the engine: it is answered 503 ``overloaded`` with
``Retry-After`` (as at the deadline) and counted as shed with reason ``predicted``; an accepted request is
still shed at its deadline if the prediction was wrong. Under sustained overload this keeps the queue near
``rate x deadline`` requests: what the engine can still start in time. The prediction ignores who is ahead
(the policy may serve a heavier tenant first) and requests that will themselves be shed, so it errs both
ways; ``[slo].shed_at_admission`` turns it on (off by default), ``bench sim --shed-at-admission`` and
``bench/overload_http.py --shed-at-admission`` measure it against deadline-only shedding.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi.responses import JSONResponse

from superinfer.core import Tenant
from superinfer.core.wait import WaitPredictor
from superinfer.daemon.httputil import error, retry_after_s

#: the reason label of a request shed at admission (``superinfer_requests_shed_total``)
PREDICTED = "predicted"


def shed_at_admission(predictor: WaitPredictor | None, tenant: Tenant, metrics: Any, slo: Any) -> JSONResponse | None:
    """The 503 for a request of ``tenant`` whose predicted wait passes its deadline (counted as shed
    ``predicted`` in ``metrics`` and as a miss in the SLO window ``slo``); None to admit it. Admits everything
    when ``predictor`` is None (``[slo].shed_at_admission`` off) or the tenant has no deadline."""
    if predictor is None or not math.isfinite(tenant.max_queue_s) or not predictor.refuse(tenant.max_queue_s):
        return None
    metrics.shed.labels(tenant.name, PREDICTED).inc()
    slo.shed(tenant.name, 0.0)
    after = retry_after_s(tenant.ttft_slo)
    wait = predictor.predicted_wait_s() or math.inf
    return error(503, f"shed at admission: the predicted wait for a first token ({wait:.1f} s, {predictor.waiting} "
                 f"waiting) passes tenant {tenant.name!r}'s deadline ({tenant.max_queue_s:g} s); the host is "
                 f"overloaded, retry after {after} s", "overloaded", headers={"Retry-After": str(after)})
