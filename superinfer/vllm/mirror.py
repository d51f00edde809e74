"""The plugin's copy of vLLM's request state in the core's :class:`~superinfer.core.RequestTable`.

vLLM owns the requests (tokens, computed tokens, blocks); the connector's ledger owns the host copies. Each
step, before the core looks at the table, :func:`refresh_running` copies what the running requests did last
step; :func:`refresh_ledger` copies their host-block counts, which only a plan reads (a step that holds the
batch skips it: ``superinfer.core.gate``). Requests that are not running change only on events (arrival,
preemption, admission, finish), which the scheduler writes into the table as they happen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from superinfer.core import RequestTable


def safe_computed(request: Any) -> int:
    """A request's tokens whose KV is written by steps whose output has been processed: vLLM's
    ``num_computed_tokens`` less its ``num_output_placeholders``. With synchronous scheduling that is every
    computed token; with asynchronous scheduling the tokens of steps still in flight are left out (their
    sampled tokens, and with speculative decoding which drafts were accepted, are not known yet). A park or
    eager sync never copies more than this, so it never claims KV that a rejected draft wrote."""
    return int(request.num_computed_tokens) - int(getattr(request, "num_output_placeholders", 0) or 0)


def pool_free(scheduler: Any) -> int:
    """Device blocks free for planning: the pool's, plus those vLLM's deferred frees hold back. Under async
    scheduling with a KV connector (``defer_block_free``) a victim's or a finished request's blocks return to
    the pool only once the step in flight that may still write them is processed, one or two steps after the
    plan that freed them. Counted at once, so that the plans in between do not choose more victims for room
    that is already coming; an admission that needs them waits at the head of the queue until they return (at
    most: a block another request shares by prefix caching stays in use)."""
    deferred = getattr(scheduler, "deferred_frees", ())
    return scheduler.kv_cache_manager.block_pool.get_num_free_blocks() + sum(len(b) for _, b in deferred)


def refresh_running(t: RequestTable, running: Sequence[Any], r2b: Mapping[str, Sequence[Any]],
                    loading: Iterable[Any]) -> None:
    """One iteration passed (residency advances); copy the ``running`` requests' token counts and device
    blocks (``r2b``: vLLM's request -> blocks map); a token still being sampled by a step in flight (vLLM's
    ``num_output_placeholders``, async scheduling) counts as a token, so ``num_tokens - num_computed`` is what
    is left to compute in both scheduling modes; mark requests whose KV is still ``loading`` (asynchronous
    loads in flight) busy: they hold blocks and cannot be planned."""
    t.tick()
    if running:
        n = len(running)
        rows = t.rows_of_keys([r.request_id for r in running])
        t.num_tokens[rows] = np.fromiter((r.num_tokens + r.num_output_placeholders for r in running), np.int64, n)
        t.num_computed[rows] = np.fromiter((r.num_computed_tokens for r in running), np.int64, n)
        t.blocks_hbm[rows] = np.fromiter((len(r2b.get(r.request_id, ())) for r in running), np.int64, n)
    for r in loading:
        i = t.get_row(r.request_id)
        if i is not None:
            t.busy[i] = True
            t.blocks_hbm[i] = len(r2b.get(r.request_id, ()))


def refresh_ledger(t: RequestTable, running: Sequence[Any], ledger: Any) -> None:
    """The ``running`` requests' host blocks, synced and syncing counts, from the connector's ``ledger``
    (:class:`~superinfer.vllm.ledger.HostLedger`; None: no host tier)."""
    if running and ledger is not None:
        counts, n = ledger.counts, len(running)
        c = np.array([counts(r.request_id) for r in running], np.int64).reshape(n, 3)
        rows = t.rows_of_keys([r.request_id for r in running])
        t.blocks_dram[rows], t.synced[rows], t.syncing[rows] = c[:, 0], c[:, 1], c[:, 2]
