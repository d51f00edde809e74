"""The workload records: one request spec, a workload (arrays sorted by arrival), and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np


class WorkloadError(ValueError):
    """A workload could not be read or built; the message names the file, line and problem."""


@dataclass(frozen=True)
class RequestSpec:
    """One request to replay: when it arrives, how long its prompt and output are, whose it is."""

    id: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    tenant: str = "default"


@dataclass(frozen=True)
class SkippedLine:
    """A malformed input line dropped because the reader ran with ``skip_bad=True``."""

    line: int
    reason: str


@dataclass
class Workload:
    """Requests as parallel numpy arrays, sorted by arrival time (ids are positions 0..n-1).

    ``tenant_ids[i]`` indexes ``tenant_names``. ``rate_rps`` is the mean arrival rate over
    ``duration_s`` (requests / duration). ``skipped`` lists malformed lines dropped under ``skip_bad``;
    ``dropped`` counts well-formed rows left out on purpose (e.g. zero-token responses), by reason;
    ``notes`` says what was done to the source (rescaled, resampled, clipped, windowed).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    tenant_ids: np.ndarray
    tenant_names: tuple[str, ...] = ("default",)
    source: str = ""
    arrival: str = ""
    duration_s: float = 0.0
    seed: int | None = None
    skipped: list[SkippedLine] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        self.tenant_ids = np.asarray(self.tenant_ids, dtype=np.int32)
        n = self.arrival_s.shape[0]
        for name in ("prompt_tokens", "output_tokens", "tenant_ids"):
            if getattr(self, name).shape != (n,):
                raise WorkloadError(f"workload {self.source!r}: {name} has shape "
                                    f"{getattr(self, name).shape}, expected ({n},)")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise WorkloadError(f"workload {self.source!r}: arrival_s is not sorted")
        if n and (self.prompt_tokens.min() < 1 or self.output_tokens.min() < 1):
            raise WorkloadError(f"workload {self.source!r}: token counts must be >= 1")
        if n and (self.tenant_ids.min() < 0 or self.tenant_ids.max() >= len(self.tenant_names)):
            raise WorkloadError(f"workload {self.source!r}: tenant id outside tenant_names")

    @classmethod
    def from_arrays(cls, arrival_s: Sequence[float] | np.ndarray, prompt_tokens: Sequence[int] | np.ndarray,
                    output_tokens: Sequence[int] | np.ndarray, **meta: object) -> "Workload":
        """Build a single-tenant workload, sorting by arrival (stable)."""
        a = np.asarray(arrival_s, dtype=np.float64)
        order = np.argsort(a, kind="stable")
        return cls(arrival_s=a[order], prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64)[order],
                   output_tokens=np.asarray(output_tokens, dtype=np.int64)[order],
                   tenant_ids=np.zeros(a.shape[0], dtype=np.int32), **meta)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def rate_rps(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)

    def request(self, i: int) -> RequestSpec:
        return RequestSpec(id=i, arrival_s=float(self.arrival_s[i]), prompt_tokens=int(self.prompt_tokens[i]),
                           output_tokens=int(self.output_tokens[i]),
                           tenant=self.tenant_names[int(self.tenant_ids[i])])

    def __iter__(self) -> Iterator[RequestSpec]:
        names = self.tenant_names
        for i, (t, p, o, k) in enumerate(zip(self.arrival_s.tolist(), self.prompt_tokens.tolist(),
                                              self.output_tokens.tolist(), self.tenant_ids.tolist())):
            yield RequestSpec(i, t, p, o, names[k])

    def summary(self) -> dict[str, object]:
        """Plain-data description for reports and ``--json``."""
        n = len(self)
        return {
            "source": self.source, "arrival": self.arrival, "requests": n, "duration_s": self.duration_s,
            "rate_rps": self.rate_rps, "seed": self.seed,
            "prompt_tokens_mean": float(self.prompt_tokens.mean()) if n else 0.0,
            "output_tokens_mean": float(self.output_tokens.mean()) if n else 0.0,
            "tenants": {name: int(np.sum(self.tenant_ids == i)) for i, name in enumerate(self.tenant_names)},
            "skipped_lines": self.skipped_count, "skipped": [(s.line, s.reason) for s in self.skipped[:20]],
            "dropped": dict(self.dropped), "notes": list(self.notes),
        }
