"""The objective of one measurement window: the weighted share of requests meeting both SLOs.

A window is a span of *arrival* times ``[start, end)``: a request counts for the setting it arrived
under, and only if it arrived inside the window (the tuner opens a window only after the warm-up that
follows each change). A request is *decided* once it has finished or is past its SLO:

* ``hit``: finished, with TTFT <= S_F and mean TBT <= S_B;
* ``miss``: its first token came after S_F (decided at the first token), or it finished with mean TBT
  over S_B, or it had no first token at all while the window's end lies more than its tenant's S_F in
  the past (so the request is past its TTFT SLO);
* ``censored``: it met its TTFT SLO and has not finished yet, or it has no first token and its tenant's
  S_F has not passed since the window's end: not counted (the evaluator waits a while to keep these
  few).

Per tenant ``t`` with weight ``w_t`` (the profile's tenant weight), the objective is
``sum_t w_t hits_t / sum_t w_t decided_t``. Feed order does not matter (a first token may be reported
after its request's finish); a finish whose first token was never reported is a miss of the
no-first-token kind, counted once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class TenantCounts:
    """One tenant's requests of one window (arrival times inside it)."""

    arrived: int = 0
    firsts: int = 0  # first tokens reported
    ttft_miss: int = 0  # first tokens after S_F
    finished_ok_ttft: int = 0  # finished, TTFT met (reported with the finish)
    hits: int = 0  # finished, both SLOs met
    finished_no_first: int = 0  # finished without a first token reported (aborted or never timed)
    prompt_tokens: int = 0

    def misses(self, past_ttft: bool = True) -> int:
        """Decided misses; ``past_ttft``: requests without a first token are past their TTFT SLO."""
        no_first = max(self.arrived - self.firsts, 0) if past_ttft else 0
        return self.ttft_miss + (self.finished_ok_ttft - self.hits) + no_first

    def censored(self, past_ttft: bool = True) -> int:
        running = max(self.firsts - self.ttft_miss - self.finished_ok_ttft, 0)
        return running + (0 if past_ttft else max(self.arrived - self.firsts, 0))

    def decided(self, past_ttft: bool = True) -> int:
        return self.hits + self.misses(past_ttft)


@dataclass
class Window:
    """Requests that arrived in ``[start, end)`` under one setting (``label``)."""

    start: float
    end: float
    label: str
    tenants: dict[str, TenantCounts] = field(default_factory=dict)

    def contains(self, t_arr: float) -> bool:
        return self.start <= t_arr < self.end

    def _t(self, tenant: str) -> TenantCounts:
        c = self.tenants.get(tenant)
        if c is None:
            c = self.tenants[tenant] = TenantCounts()
        return c

    # ---- feed -----------------------------------------------------------------------------------
    def arrival(self, tenant: str, prompt_tokens: int = 0) -> None:
        c = self._t(tenant)
        c.arrived += 1
        c.prompt_tokens += int(prompt_tokens)

    def first_token(self, tenant: str, ttft_ok: bool) -> None:
        c = self._t(tenant)
        c.firsts += 1
        if not ttft_ok:
            c.ttft_miss += 1

    def finished(self, tenant: str, ttft_ok: bool | None, tbt_ok: bool) -> None:
        """A finish; ``ttft_ok`` as reported for its first token (None: none was reported)."""
        c = self._t(tenant)
        if ttft_ok is None:
            c.finished_no_first += 1  # counted among arrived - firsts
        elif ttft_ok:
            c.finished_ok_ttft += 1
            if tbt_ok:
                c.hits += 1

    # ---- read -----------------------------------------------------------------------------------
    @property
    def arrived(self) -> int:
        return sum(c.arrived for c in self.tenants.values())

    def censored(self, past_ttft: Mapping[str, bool] | None = None) -> int:
        p = past_ttft or {}
        return sum(c.censored(p.get(t, True)) for t, c in self.tenants.items())

    def score(self, weights: Mapping[str, float], past_ttft: Mapping[str, bool] | None = None,
              provisional: bool = False) -> "Score":
        """The weighted attainment and what a test needs (see :class:`Score`). ``past_ttft[t]``: the
        window's end lies more than tenant ``t``'s S_F in the past (default True). ``provisional``: count
        the requests that met their TTFT SLO and still run as hits (what the guard may act on before they
        finish; their TBT is not known yet)."""
        p = past_ttft or {}
        out = {}
        for t, c in self.tenants.items():
            running = max(c.firsts - c.ttft_miss - c.finished_ok_ttft, 0) if provisional else 0
            out[t] = (c.hits + running, c.decided(p.get(t, True)) + running)
        return Score.of(out, weights)


@dataclass(frozen=True)
class Score:
    """A weighted share: ``value = sum w h / sum w d``; ``n_eff`` Kish's effective number of requests
    ``(sum w d)^2 / sum w^2 d`` (what the share's variance is computed with); ``per_tenant`` maps each
    tenant to ``(hits, decided)``."""

    value: float
    n_eff: float
    decided: int
    per_tenant: dict[str, tuple[int, int]]

    @classmethod
    def of(cls, per_tenant: Mapping[str, tuple[int, int]], weights: Mapping[str, float]) -> "Score":
        num = den = den2 = 0.0
        decided = 0
        for t, (h, d) in per_tenant.items():
            w = float(weights.get(t, 1.0))
            num += w * h
            den += w * d
            den2 += w * w * d
            decided += d
        value = num / den if den > 0 else math.nan
        n_eff = den * den / den2 if den2 > 0 else 0.0
        return cls(value, n_eff, decided, {t: (int(h), int(d)) for t, (h, d) in per_tenant.items()})

    def tenant(self, name: str) -> tuple[float, int]:
        """(attainment, decided) of one tenant; NaN with 0 decided when it had none."""
        h, d = self.per_tenant.get(name, (0, 0))
        return (h / d if d else math.nan), d

    def as_dict(self) -> dict:
        return {"value": None if math.isnan(self.value) else round(self.value, 6), "n_eff": round(self.n_eff, 1),
                "decided": self.decided,
                "per_tenant": {t: {"hits": h, "decided": d} for t, (h, d) in sorted(self.per_tenant.items())}}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Score":
        per = {t: (int(v["hits"]), int(v["decided"])) for t, v in data.get("per_tenant", {}).items()}
        value = data.get("value")
        return cls(math.nan if value is None else float(value), float(data.get("n_eff", 0.0)),
                   int(data.get("decided", 0)), per)
