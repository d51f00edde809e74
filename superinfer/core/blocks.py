"""KV tier accounting: HBM and DRAM block pools and which blocks each request holds.

The core owns block *ids and counts*; DuplexKV owns the bytes behind them. Invariants (``check()``):

* every block id of a pool is either free or held by exactly one request;
* a request's host blocks are a prefix-aligned copy of its KV: host block ``i`` holds the same tokens
  as device block ``i``; ``synced`` device blocks (a prefix) have a *completed* host copy, the next
  ``syncing`` are in flight;
* a request is never in neither tier while it has computed tokens, unless it was dropped for
  recompute by design (then ``num_computed`` is cut to what the host still holds).
"""

from __future__ import annotations


class PoolExhausted(RuntimeError):
    """A pool had fewer free blocks than asked for. Nothing was allocated."""

    def __init__(self, pool: str, asked: int, free: int) -> None:
        super().__init__(f"{pool} pool exhausted: asked for {asked} blocks, {free} free")
        self.pool, self.asked, self.free = pool, asked, free


class BlockPool:
    """``num_blocks`` block ids ``0..num_blocks-1``; allocation pops from a LIFO free list."""

    def __init__(self, num_blocks: int, name: str) -> None:
        if num_blocks < 0:
            raise ValueError(f"{name}: num_blocks must be >= 0, got {num_blocks}")
        self.name = name
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(f"{self.name}: cannot allocate {n} blocks")
        if n > len(self._free):
            raise PoolExhausted(self.name, n, len(self._free))
        if n == 0:
            return []
        out = self._free[-n:]
        del self._free[-n:]
        out.reverse()
        return out

    def release(self, ids: list[int]) -> None:
        self._free.extend(reversed(ids))

    def free_ids(self) -> list[int]:
        return list(self._free)


class KVLedger:
    """Per-request block lists in both tiers, and their sync state."""

    def __init__(self, hbm_blocks: int, dram_blocks: int) -> None:
        self.hbm = BlockPool(hbm_blocks, "hbm")
        self.dram = BlockPool(dram_blocks, "dram")
        self.dev: dict[int, list[int]] = {}
        self.host: dict[int, list[int]] = {}
        self.synced: dict[int, int] = {}
        self.syncing: dict[int, int] = {}

    # ---- device side -------------------------------------------------------------------------
    def grow(self, rid: int, n: int) -> list[int]:
        """Give ``rid`` ``n`` more device blocks (new KV, or the reservation of a swap-in)."""
        ids = self.hbm.allocate(n)
        self.dev.setdefault(rid, []).extend(ids)
        return ids

    def start_sync(self, rid: int, n: int) -> list[tuple[int, int]]:
        """Issue host copies of the next ``n`` device blocks; returns (device id, host id) pairs."""
        dev = self.dev.get(rid, [])
        host = self.host.setdefault(rid, [])
        start = self.synced.get(rid, 0) + self.syncing.get(rid, 0)
        if start + n > len(dev):
            raise ValueError(f"sync: request {rid} has {len(dev)} device blocks, cannot sync {start}+{n}")
        if len(host) != start:
            raise ValueError(f"sync: request {rid} host copy is not prefix-aligned ({len(host)} != {start})")
        new = self.dram.allocate(n)
        host.extend(new)
        self.syncing[rid] = self.syncing.get(rid, 0) + n
        return list(zip(dev[start : start + n], new))

    def complete_sync(self, rid: int) -> int:
        """All syncs of ``rid`` in flight have finished; returns how many blocks became synced."""
        n = self.syncing.pop(rid, 0)
        if n:
            self.synced[rid] = self.synced.get(rid, 0) + n
        return n

    def swap_out(self, rid: int, copy: int, keep_blocks: int) -> list[tuple[int, int]]:
        """Preempt: copy ``copy`` unsynced blocks out, keep ``keep_blocks`` host blocks, free the device.

        Returns the (device id, host id) pairs to copy. The device ids return to the free pool now; the
        transfer engine must finish these copies before the blocks are written again (DuplexKV rule 2).
        """
        dev = self.dev.pop(rid, [])
        host = self.host.setdefault(rid, [])
        synced = self.synced.pop(rid, 0) + self.syncing.pop(rid, 0)
        pairs = list(zip(dev[synced : synced + copy], self.dram.allocate(copy)))
        host.extend(h for _, h in pairs)
        if keep_blocks < len(host):
            self.dram.release(host[keep_blocks:])
            del host[keep_blocks:]
        self.hbm.release(dev)
        return pairs

    def start_swap_in(self, rid: int, issue: int) -> list[tuple[int, int]]:
        """Reserve device blocks for all host blocks of ``rid``; issue the first ``issue`` copies."""
        host = self.host.get(rid, [])
        if self.dev.get(rid):
            raise ValueError(f"swap-in: request {rid} already holds device blocks")
        self.dev[rid] = self.hbm.allocate(len(host))
        return self.continue_swap_in(rid, 0, issue)

    def continue_swap_in(self, rid: int, done: int, issue: int) -> list[tuple[int, int]]:
        """(host id, device id) pairs for host blocks ``done .. done+issue``."""
        host, dev = self.host[rid], self.dev[rid]
        return list(zip(host[done : done + issue], dev[done : done + issue]))

    def complete_swap_in(self, rid: int) -> None:
        """Every host block is now also on the device: they count as synced."""
        self.synced[rid] = len(self.host.get(rid, []))
        self.syncing.pop(rid, None)

    def drop_host(self, rid: int) -> None:
        self.dram.release(self.host.pop(rid, []))

    def free(self, rid: int) -> None:
        """Release everything ``rid`` holds in both tiers (finished or aborted)."""
        self.hbm.release(self.dev.pop(rid, []))
        self.drop_host(rid)
        self.synced.pop(rid, None)
        self.syncing.pop(rid, None)

    # ---- observability -----------------------------------------------------------------------
    def blocks(self, rid: int) -> tuple[int, int, int]:
        """(device blocks, host blocks, synced) of ``rid``."""
        return len(self.dev.get(rid, [])), len(self.host.get(rid, [])), self.synced.get(rid, 0)

    def check(self) -> None:
        """Raise ``AssertionError``-free ``RuntimeError`` if any invariant above is broken."""
        for pool, owned in ((self.hbm, self.dev), (self.dram, self.host)):
            held = [b for ids in owned.values() for b in ids]
            everything = held + pool.free_ids()
            if len(everything) != pool.num_blocks or len(set(everything)) != pool.num_blocks:
                raise RuntimeError(f"{pool.name}: block ids lost or owned twice")
        for rid, n in self.synced.items():
            if n + self.syncing.get(rid, 0) > min(len(self.dev.get(rid, [])), len(self.host.get(rid, []))):
                raise RuntimeError(f"request {rid}: synced {n} exceeds blocks held")
