"""The engine's bookkeeping of blocks in flight; mutated only under the engine's lock.

Keys are ``(request id, logical block index)``. Each map records the *pending* copy that touches a block,
so the ordering rules (``rules.py``) can make later copies depend on it. Completion callbacks run from
``reap()``, never from executor threads, so all state changes happen on the caller's side of the lock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from superinfer.duplexkv.fences import Fence, Handle

Key = tuple[Hashable, int]


@dataclass
class TransferState:
    host_of: dict[Key, int] = field(default_factory=dict)  # host block holding (req, index)
    synced: set[Key] = field(default_factory=set)  # host copy complete and current (rule 1)
    partial: set[Key] = field(default_factory=set)  # swapped out while partly filled
    sync_inflight: dict[Key, Handle] = field(default_factory=dict)  # D2H writing the host copy
    pending_release: dict[int, Handle] = field(default_factory=dict)  # device block -> its copy-out (rule 2)
    released: list[int] = field(default_factory=list)  # device blocks the scheduler may reuse
    d2h_by_host: dict[int, tuple[Handle, int]] = field(default_factory=dict)  # host -> (D2H writing it, src dev)
    h2d_by_host: dict[int, Handle] = field(default_factory=dict)  # host -> H2D reading it
    h2d_by_dev: dict[int, Handle] = field(default_factory=dict)  # device -> H2D writing it (rule 5)
    compute: dict[int, Fence] = field(default_factory=dict)  # device -> compute that wrote it (rule 4)
    callbacks: dict[int, tuple[Handle, list[Callable[[], None]]]] = field(default_factory=dict)

    def on_done(self, handle: Handle, fn: Callable[[], None]) -> None:
        """Run ``fn`` (under the engine lock) once ``handle`` has completed."""
        self.callbacks.setdefault(id(handle), (handle, []))[1].append(fn)

    def reap(self) -> list[Handle]:
        """Run callbacks of completed handles; returns those handles."""
        finished = [h for h, _ in self.callbacks.values() if h.done()]
        for h in finished:
            _, fns = self.callbacks.pop(id(h))
            for fn in fns:
                fn()
        return finished

    def pending(self, handle: Handle | None) -> bool:
        return handle is not None and not handle.done()
