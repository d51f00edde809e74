"""Names on the wire that more than one daemon module must agree on (HTTP bodies, ``/v1/state``).

This module imports nothing, so the API, the HTTP helpers and every backend may import it.
"""

from __future__ import annotations

#: the request-body field carrying vLLM's extra arguments (vLLM: ``sampling_params.extra_args``)
XARGS_FIELD = "vllm_xargs"
#: the key of :data:`XARGS_FIELD` that names the request's tenant
TENANT_XARG = "tenant"
#: ``schema_version`` of the ``/v1/state`` document (field names: docs/daemon.md); bump on a breaking change
STATE_SCHEMA_VERSION = 1
