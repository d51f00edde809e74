"""The futility look (superinfer/tuner/trials.py): a local step far behind the incumbent once the first
C I I C block is in is rejected half-way; an arm, a step within the margin, and a config that turns the
look off run to the end."""

from __future__ import annotations

from dataclasses import replace

from superinfer.tuner.config import TunerConfig
from superinfer.tuner.measure import Measurements
from superinfer.tuner.trials import Trials
from tests.tuner.world import TENANTS

CFG = TunerConfig(mode="auto", window_s=20.0, warmup_s=2.0, switch_warmup_s=1.0, min_requests=150, settle_s=1.0,
                  max_settle_s=10.0, cooldown_s=5.0, slot_s=5.0, guard_min_requests=30, seed=1)
INC, CAND = {"step_slo_share": 1.0}, {"step_slo_share": 1.6}
#: per slot of the first block (C I I C), the share of its requests meeting both SLOs: noisy slots, so the
#: slot-level guard (two slots a side, t at 1 %) cannot fire; the candidate's mean is 25 pp behind
FAR = (0.30, 0.95, 0.60, 0.75)
NEAR = (0.80, 0.95, 0.80, 0.90)  # 7.5 pp behind: within the 10 pp margin


def run_first_block(cfg: TunerConfig, arm: str, shares: tuple[float, ...], n: int = 40):
    """Start a trial of ``arm``, serve ``n`` requests in each of its first four slots (met: the first
    ``share`` of them), enter slot 4 and return the verdict then."""
    m = Measurements(TENANTS, cfg.slot_s, cfg.settle_s, cfg.max_settle_s, 0.0)
    trials = Trials(cfg, m)
    trials.start(0.0, arm, CAND, None, INC, None, 0.9)
    s = cfg.switch_s
    for k, share in enumerate(shares):
        trials.switch(k * s, INC)
        for i in range(n):
            t = k * s + cfg.switch_warmup_s + (i + 0.5) * (s - cfg.switch_warmup_s) / n
            ok = i < round(share * n)
            m.arrival(t, "chat", 1000)
            m.first_token(t, "chat", ok)
            m.finished(t, "chat", ok, True, 10)
    trials.switch(4 * s, INC)
    return trials.judge(4 * s + 0.5)


def test_a_local_step_far_behind_half_way_is_rejected_at_once() -> None:
    v = run_first_block(CFG, "local", FAR)
    assert v is not None and v.outcome == "reject" and v.reason.startswith("futility:"), v
    assert v.write_back and v.gain < -CFG.futility_margin


def test_a_step_within_the_margin_an_arm_or_no_look_run_on() -> None:
    assert run_first_block(CFG, "local", NEAR) is None  # 7.5 pp behind: it may still recover
    assert run_first_block(CFG, "arm:chat", FAR) is None  # an arm is judged by its own test at the end
    assert run_first_block(replace(CFG, futility_margin=1.0), "local", FAR) is None
