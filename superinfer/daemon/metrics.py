"""Prometheus metrics of one daemon, on a dedicated :class:`CollectorRegistry`.

Conventions (design §7, vLLM's metrics design): prefix ``superinfer_``, base units (``_seconds``,
``_bytes``), counters end in ``_total``, no per-request labels (``tenant`` is bounded by the profile;
requests naming an unknown tenant are counted under the default tenant or rejected), ratios are left to
PromQL over counters. Label children are created once per tenant so the per-token path is one
``observe`` call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from superinfer.core.view import PHASE_NAMES as PHASES
from superinfer.daemon.params import PARAM_KEYS

DIRECTIONS = ("h2d", "d2h")
TIERS = ("hbm", "dram")
SLOS = ("ttft", "tbt", "both")
PARAM_NAMES = PARAM_KEYS  # every live knob of the core (superinfer.core.PARAM_BOUNDS)

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
GAP_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0)
PLANNER_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1)

__all__ = ["CONTENT_TYPE_LATEST", "DaemonMetrics"]

# ``*_created`` series double the exposition for no use here (process-wide switch; the daemon owns it).
disable_created_metrics()


class DaemonMetrics:
    """Every metric the daemon exports. Backends call the ``observe_*``/``set_*`` methods."""

    def __init__(self, tenants: Iterable[str], *, backend: str, profile: str, model: str, simulation: bool) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.tenants = list(tenants)
        p = "superinfer_"
        self.info = Info(p + "build", "Daemon identity: backend, profile, model, whether it is a simulation",
                         registry=r)
        self.info.info({"backend": backend, "profile": profile, "model": model,
                        "simulation": "true" if simulation else "false"})
        self.simulation = Gauge(p + "simulation", "1 when the backend is the digital twin (no real engine)",
                                registry=r)
        self.simulation.set(1 if simulation else 0)
        self.start_time = Gauge(p + "start_time_seconds", "Unix time the daemon started", registry=r)
        self.start_time.set_to_current_time()

        self.arrived = Counter(p + "requests_arrived_total", "Requests admitted to the engine", ["tenant"], registry=r)
        self.finished = Counter(p + "requests_finished_total", "Requests that finished", ["tenant"], registry=r)
        self.rejected = Counter(p + "requests_rejected_total", "Requests refused, by reason",
                                ["tenant", "reason"], registry=r)
        self.shed = Counter(p + "requests_shed_total", "Requests shed before their first token, by reason "
                            "(deadline: 503, the tenant's max_queue_s passed; tenant_limit: 429, the tenant "
                            "had max_inflight requests in flight)",
                            ["tenant", "reason"], registry=r)
        self.tokens = Counter(p + "generation_tokens_total", "Output tokens produced", ["tenant"], registry=r)
        self.ttft = Histogram(p + "time_to_first_token_seconds", "Arrival to first output token", ["tenant"],
                              buckets=TTFT_BUCKETS, registry=r)
        self.gap = Histogram(p + "inter_token_seconds", "Time between consecutive output tokens of a request",
                             ["tenant"], buckets=GAP_BUCKETS, registry=r)
        self.slo_ok = Counter(p + "slo_attained_total", "Requests within their SLO (ttft: first token; tbt: "
                              "mean inter-token time at finish; both: TTFT and TBT, at finish)", ["tenant", "slo"],
                              registry=r)
        self.slo_bad = Counter(p + "slo_violations_total", "Requests outside their SLO (both: at the first token "
                               "when TTFT missed, else at finish)", ["tenant", "slo"], registry=r)
        self.gap_ok = Counter(p + "inter_token_slo_attained_total", "Inter-token gaps within the tenant's TBT SLO",
                              ["tenant"], registry=r)
        self.gap_bad = Counter(p + "inter_token_slo_violations_total", "Inter-token gaps longer than the tenant's "
                               "TBT SLO", ["tenant"], registry=r)
        self.queue = Gauge(p + "queue_requests", "Live requests by phase", ["phase"], registry=r)
        self.blocks_used = Gauge(p + "kv_blocks_used", "KV blocks in use by tier", ["tier"], registry=r)
        self.blocks_cap = Gauge(p + "kv_blocks_capacity", "KV blocks in the pool by tier", ["tier"], registry=r)
        self.xfer_bytes = Counter(p + "kv_transfer_bytes_total", "KV bytes copied by direction", ["direction"],
                                  registry=r)
        self.xfer_seconds = Counter(p + "kv_transfer_seconds_total", "Link busy time by direction",
                                    ["direction"], registry=r)
        self.rotations = Counter(p + "rotations_total", "Preemptions that parked KV in DRAM", registry=r)
        self.tenant_rotations = Counter(p + "tenant_rotations_total", "Rotations by the tenant of the rotated "
                                        "request (sums to superinfer_rotations_total)", ["tenant"], registry=r)
        self.preemptions = Counter(p + "preemptions_total", "Requests preempted (any mode)", registry=r)
        self.recompute = Counter(p + "recompute_fallbacks_total", "Preemptions that dropped KV to recompute",
                                 registry=r)
        self.iterations = Counter(p + "iterations_total", "Engine iterations", registry=r)
        self.loop_lag = Histogram(p + "event_loop_lag_seconds", "How late the daemon's event loop ran a timer "
                                  "(sampled every 0.1 s): a stall every request in flight and the API wait out",
                                  buckets=GAP_BUCKETS, registry=r)
        self.planner = Histogram(p + "planner_seconds", "Scheduler planning time per iteration",
                                 buckets=PLANNER_BUCKETS, registry=r)
        self.param = Gauge(p + "scheduler_param", "Current scheduler parameter value", ["param"], registry=r)
        self.b_xfer = Gauge(p + "b_xfer_blocks", "Transfer budget, blocks per iteration per direction", registry=r)
        self.params_version = Gauge(p + "params_version", "Increases with every accepted parameter change",
                                    registry=r)
        self.probe_bw = Gauge(p + "probe_bandwidth_bytes_per_second", "Startup probe bandwidth",
                              ["direction", "mode"], registry=r)
        self.probe_b_xfer = Gauge(p + "probe_b_xfer_blocks", "B_xfer derived from the startup probe", registry=r)
        self.lag = Gauge(p + "sim_lag_seconds", "How far the twin's last iteration ended behind the wall clock",
                         registry=r)
        self.inflight = Gauge(p + "inflight_requests", "HTTP requests the daemon holds", registry=r)
        self.draining = Gauge(p + "draining", "1 while shutting down (admission stopped)", registry=r)

        self.t_arrived = {t: self.arrived.labels(t) for t in self.tenants}
        self.t_finished = {t: self.finished.labels(t) for t in self.tenants}
        self.t_tokens = {t: self.tokens.labels(t) for t in self.tenants}
        self.t_ttft = {t: self.ttft.labels(t) for t in self.tenants}
        self.t_gap = {t: self.gap.labels(t) for t in self.tenants}
        self.t_ok = {(t, s): self.slo_ok.labels(t, s) for t in self.tenants for s in SLOS}
        self.t_bad = {(t, s): self.slo_bad.labels(t, s) for t in self.tenants for s in SLOS}
        self.t_gap_ok = {t: self.gap_ok.labels(t) for t in self.tenants}
        self.t_gap_bad = {t: self.gap_bad.labels(t) for t in self.tenants}
        self.t_rotations = {t: self.tenant_rotations.labels(t) for t in self.tenants}
        for d in DIRECTIONS:
            self.xfer_bytes.labels(d)
            self.xfer_seconds.labels(d)
        for ph in PHASES:
            self.queue.labels(ph).set(0)
        for tier in TIERS:
            self.blocks_used.labels(tier).set(0)
            self.blocks_cap.labels(tier).set(0)

    # ---- per event ---------------------------------------------------------------------------
    def observe_first_token(self, tenant: str, ttft_s: float, ok: bool) -> None:
        """A request's first token, ``ttft_s`` after arrival; ``ok``: within S_F. A miss also decides
        ``slo="both"`` now (a violation): the request cannot meet both SLOs any more."""
        self.t_ttft[tenant].observe(ttft_s)
        (self.t_ok if ok else self.t_bad)[(tenant, "ttft")].inc()
        if not ok:
            self.t_bad[(tenant, "both")].inc()

    def shed_by_tenant(self) -> dict[str, dict[str, int]]:
        """``superinfer_requests_shed_total`` as ``{tenant: {reason: n}}`` (every tenant, ``{}`` when none)."""
        out: dict[str, dict[str, int]] = {t: {} for t in self.tenants}
        for metric in self.shed.collect():
            for s in metric.samples:
                if s.name.endswith("_total"):
                    out.setdefault(s.labels["tenant"], {})[s.labels["reason"]] = int(s.value)
        return out

    def observe_finished(self, tenant: str, tbt_ok: bool, ttft_ok: bool | None) -> None:
        """A request finished; ``tbt_ok``: its mean inter-token time was within S_B; ``ttft_ok``: what
        :meth:`observe_first_token` was told for it, or None when it never had a first token observed.

        ``slo="both"``: attained iff ``ttft_ok and tbt_ok``; a violation when ``ttft_ok`` is True and
        ``tbt_ok`` False, or ``ttft_ok`` is None; nothing when ``ttft_ok`` is False (counted at the first
        token). So every request is counted under ``both`` at most once, and exactly once if it finished
        or missed TTFT."""
        self.t_finished[tenant].inc()
        (self.t_ok if tbt_ok else self.t_bad)[(tenant, "tbt")].inc()
        if ttft_ok is None:
            self.t_bad[(tenant, "both")].inc()
        elif ttft_ok:
            (self.t_ok if tbt_ok else self.t_bad)[(tenant, "both")].inc()

    def observe_gap(self, tenant: str, gap_s: float, ok: bool) -> None:
        """One inter-token gap of ``tenant``; ``ok``: ``gap_s <= S_B``."""
        self.t_gap[tenant].observe(gap_s)
        (self.t_gap_ok if ok else self.t_gap_bad)[tenant].inc()

    def observe_gaps(self, tenant: str, gaps_s: Sequence[float], n_ok: int) -> None:
        """Many inter-token gaps of ``tenant`` at once, ``n_ok`` of them within S_B
        (``0 <= n_ok <= len(gaps_s)``)."""
        if not 0 <= n_ok <= len(gaps_s):
            raise ValueError(f"n_ok must be within [0, {len(gaps_s)}], got {n_ok}")
        h = self.t_gap[tenant]
        for x in gaps_s:
            h.observe(x)
        if n_ok:
            self.t_gap_ok[tenant].inc(n_ok)
        if len(gaps_s) > n_ok:
            self.t_gap_bad[tenant].inc(len(gaps_s) - n_ok)

    def set_params(self, values: dict[str, float], b_xfer: int, version: int) -> None:
        for name in PARAM_NAMES:
            self.param.labels(name).set(values[name])
        self.b_xfer.set(b_xfer)
        self.params_version.set(version)

    def set_probe(self, probe: dict) -> None:
        self.probe_bw.labels("h2d", "oneway").set(probe["h2d_gbps"] * 1e9)
        self.probe_bw.labels("d2h", "oneway").set(probe["d2h_gbps"] * 1e9)
        self.probe_bw.labels("h2d", "duplex").set(probe["duplex_h2d_gbps"] * 1e9)
        self.probe_bw.labels("d2h", "duplex").set(probe["duplex_d2h_gbps"] * 1e9)
        self.probe_b_xfer.set(probe["b_xfer_blocks"])

    def render(self) -> bytes:
        return generate_latest(self.registry)
