"""Per-direction transfer statistics: bytes, busy seconds, batches, operations, achieved GB/s."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from superinfer.duplexkv.merge import Direction


@dataclass
class DirectionStats:
    bytes: int = 0
    seconds: float = 0.0
    batches: int = 0
    ops: int = 0

    @property
    def gbps(self) -> float:
        """Achieved bandwidth in GB/s (10^9 bytes) over busy time; 0 when nothing was timed."""
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"bytes": self.bytes, "seconds": self.seconds, "batches": self.batches, "ops": self.ops, "gbps": self.gbps}


class TransferStats:
    """Accumulates completed batches; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_dir = {d: DirectionStats() for d in Direction}

    def add(self, direction: Direction, nbytes: int, seconds: float, ops: int) -> None:
        with self._lock:
            s = self._by_dir[direction]
            s.bytes += nbytes
            s.seconds += seconds
            s.batches += 1
            s.ops += ops

    def snapshot(self) -> dict[str, dict[str, float | int]]:
        with self._lock:
            return {d.value: s.as_dict() for d, s in self._by_dir.items()}

    def __getitem__(self, direction: Direction) -> DirectionStats:
        with self._lock:
            s = self._by_dir[direction]
            return DirectionStats(s.bytes, s.seconds, s.batches, s.ops)
