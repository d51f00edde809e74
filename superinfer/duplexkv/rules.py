"""The six no-race rules of design §4, one function (or pair) per rule.

The engine calls these and nothing else to order copies; each is small enough to check by reading, and
each has a test in ``tests/duplexkv/test_dkv_rules.py`` that replaces exactly that rule with a permissive
version and shows a wrong byte (or a premature state change) appears.

(1) synced means the copy finished         -> ``mark_synced_on_completion``
(2) freed device blocks wait for copy-out  -> ``release_after_copy_out`` + ``wait_copy_out_before_overwrite``
(3) H2D waits for a pending D2H of its host block, or both are cancelled when the device copy still
    exists                                  -> ``h2d_after_pending_d2h`` + ``d2h_after_pending_h2d``
(4) D2H waits for the compute that wrote the block -> ``d2h_after_writer``
(5) compute waits for the H2D of blocks it reads   -> ``readable`` + ``read_fences``
(6) never put dependent copies in one batch        -> ``assign_waves``
"""

from __future__ import annotations

from collections.abc import Sequence

from superinfer.duplexkv.fences import Fence, Handle
from superinfer.duplexkv.merge import Direction
from superinfer.duplexkv.state import Key, TransferState


# -- rule 1 ---------------------------------------------------------------------------------------
def mark_synced_on_completion(state: TransferState, key: Key, handle: Handle) -> None:
    """(1) A block counts as synced only when the D2H that wrote its host copy has completed."""
    state.sync_inflight[key] = handle

    def done() -> None:
        if state.sync_inflight.get(key) is handle:
            del state.sync_inflight[key]
        if handle.error is None and key in state.host_of:
            state.synced.add(key)

    state.on_done(handle, done)


# -- rule 2 ---------------------------------------------------------------------------------------
def release_after_copy_out(state: TransferState, dev: int, copy_out: Handle | None) -> None:
    """(2) A device block given up by a swap-out is reported reusable only after its copy-out completed."""
    if copy_out is None or copy_out.done():
        state.released.append(dev)
        return
    state.pending_release[dev] = copy_out

    def done() -> None:
        if state.pending_release.get(dev) is copy_out:  # not cancelled by rule 3
            del state.pending_release[dev]
            state.released.append(dev)

    state.on_done(copy_out, done)


def wait_copy_out_before_overwrite(state: TransferState, dev: int) -> list[Fence]:
    """(2) A copy into a device block whose copy-out is still pending waits for that copy-out."""
    h = state.pending_release.get(dev)
    return [h] if state.pending(h) else []


# -- rule 3 ---------------------------------------------------------------------------------------
def h2d_after_pending_d2h(state: TransferState, host: int, dev: int) -> tuple[bool, list[Fence]]:
    """(3) Returns ``(skip, deps)`` for an H2D of ``host`` into ``dev``.

    If a D2H into ``host`` is pending and its source is ``dev`` whose release is still pending (the device
    copy still exists where the request wants it), the swap-in is cancelled (``skip``) together with the
    release of ``dev``: the request keeps its device block and the launched copy-out, left to finish,
    only refreshes the host copy. Otherwise the H2D waits for the pending D2H.
    """
    pending = state.d2h_by_host.get(host)
    if pending is None or pending[0].done():
        return False, []
    handle, src_dev = pending
    if src_dev == dev and state.pending_release.get(dev) is handle:
        del state.pending_release[dev]
        return True, []
    return False, [handle]


def d2h_after_pending_h2d(state: TransferState, host: int) -> list[Fence]:
    """(3, reverse) A D2H that overwrites a host block waits for a pending H2D still reading it."""
    h = state.h2d_by_host.get(host)
    return [h] if state.pending(h) else []


# -- rule 4 ---------------------------------------------------------------------------------------
def d2h_after_writer(state: TransferState, dev: int) -> list[Fence]:
    """(4) A D2H of a device block waits for the compute that last wrote it (or the H2D that filled it)."""
    deps: list[Fence] = []
    fence = state.compute.get(dev)
    if fence is not None and not fence.done():
        deps.append(fence)
    h = state.h2d_by_dev.get(dev)
    if state.pending(h):
        deps.append(h)
    return deps


# -- rule 5 ---------------------------------------------------------------------------------------
def readable(state: TransferState, dev: int) -> bool:
    """(5) Compute may read a device block only when no H2D into it is pending."""
    return not state.pending(state.h2d_by_dev.get(dev))


def read_fences(state: TransferState, dev: int) -> list[Fence]:
    """(5) What a compute stream must wait for before reading ``dev``."""
    h = state.h2d_by_dev.get(dev)
    return [h] if state.pending(h) else []


# -- rule 6 ---------------------------------------------------------------------------------------
def assign_waves(copies: Sequence[tuple[Direction, int, int]]) -> list[int]:
    """(6) Wave number per copy ``(direction, dev, host)``: a copy goes one wave after every earlier copy
    it conflicts with (same block, at least one of the two writes it). Batches never mix waves, and a wave
    starts only after the conflicting batches of earlier waves, so dependent copies never share a batch.
    """
    last_write: dict[tuple[str, int], int] = {}
    last_read: dict[tuple[str, int], int] = {}
    waves: list[int] = []
    for direction, dev, host in copies:
        if direction is Direction.D2H:
            reads, writes = ("dev", dev), ("host", host)
        else:
            reads, writes = ("host", host), ("dev", dev)
        wave = max(
            last_write.get(reads, -1) + 1,
            last_write.get(writes, -1) + 1,
            last_read.get(writes, -1) + 1,
        )
        waves.append(wave)
        last_read[reads] = max(last_read.get(reads, -1), wave)
        last_write[writes] = wave
    return waves
