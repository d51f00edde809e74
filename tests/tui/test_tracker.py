"""The tracker: rates and counter resets, restart detection, event dedup, param changes, disconnects."""

from __future__ import annotations

import pytest

from superinfer.tui.events import EventLog
from superinfer.tui.tracker import Tracker
from tests.tui.builders import rot_event, state


def texts(tr: Tracker) -> list[str]:
    return [e.render() for e in tr.events.events]


def test_rates_come_from_counter_deltas() -> None:
    tr = Tracker(rate_window_s=5.0)
    tr.observe(state(), 1000.0)
    assert tr.rates["arrived"] is None  # one sample: no rate yet
    c = dict(state()["counters"], arrived=110, finished=85)
    tr.observe(state(counters=c), 1002.0)
    assert tr.rates["arrived"] == pytest.approx(5.0) and tr.rates["finished"] == pytest.approx(2.5)


def test_a_counter_going_backwards_resets_the_baseline_instead_of_a_negative_rate() -> None:
    tr = Tracker()
    tr.observe(state(), 1000.0)
    tr.observe(state(counters=dict(state()["counters"], arrived=3, finished=1)), 1001.0)
    assert tr.rates["arrived"] is None  # no negative rate, no rate across the reset
    assert any("counters went backwards (arrived 100 → 3)" in t for t in texts(tr))
    tr.observe(state(counters=dict(state()["counters"], arrived=7, finished=1)), 1003.0)
    assert tr.rates["arrived"] == pytest.approx(2.0)


def test_a_new_pid_is_a_restart_and_resets_baselines() -> None:
    tr = Tracker()
    assert tr.observe(state(), 1000.0) is True  # first process: fetch /v1/config
    assert tr.observe(state(counters=dict(state()["counters"], arrived=120)), 1001.0) is False
    assert tr.rates["arrived"] == pytest.approx(20.0)
    restarted = state(pid=200, started_at=2000.0, counters=dict(state()["counters"], arrived=130))
    assert tr.observe(restarted, 1002.0) is True
    assert tr.restarts == 1 and tr.restart_at == 1002.0
    assert tr.rates["arrived"] is None  # 130 - 120 over 1 s would be a lie: another process
    assert any("daemon restarted: pid 100 → 200" in t for t in texts(tr))
    assert tr.series("waiting") == [5.0]  # histories start afresh
    # same pid but a new start time is a restart too (pid reuse)
    assert tr.observe(state(pid=200, started_at=3000.0), 1003.0) is True and tr.restarts == 2


def test_rotation_events_are_deduplicated_across_overlapping_polls() -> None:
    tr = Tracker()
    first = [rot_event(990.0 + i, i) for i in range(5)]
    tr.observe(state(rotation_events=first), 1000.0)  # history before the dashboard started: not news
    assert not any(e.kind == "rotation" for e in tr.events.events)
    # the next poll lists the last 20 again: 3 old ones overlap, 2 are new
    second = first[2:] + [rot_event(1000.5, 10), rot_event(1000.6, 11, "swap_in", "voice")]
    c = dict(state()["counters"], rotations=51, swap_ins=49)
    tr.observe(state(rotation_events=second, counters=c), 1001.0)
    rot = [e for e in tr.events.events if e.kind == "rotation"]
    assert len(rot) == 1
    assert rot[0].tally["swap_out"] == 1 and rot[0].tally["swap_in"] == 1 and rot[0].tally["tenant:chat"] == 1
    # a third identical poll adds nothing; a later one merges into the same line
    tr.observe(state(rotation_events=second, counters=c), 1002.0)
    assert [e.kind for e in tr.events.events].count("rotation") == 1
    assert rot[0].tally["swap_out"] == 1
    c2 = dict(c, rotations=61, swap_ins=49)  # 10 rotations, 1 listed: 9 happened beyond the daemon's list
    tr.observe(state(rotation_events=second + [rot_event(1002.5, 12)], counters=c2), 1003.0)
    assert rot[0].tally["swap_out"] == 11 and rot[0].hidden == 9
    assert "KV rotations in 2s: 11 out, 1 in (chat 2)" in rot[0].render()
    assert "9 not in the daemon's last-20 list" in rot[0].render()


def test_rotations_far_apart_are_separate_lines_and_repeats_are_counted() -> None:
    log = EventLog()
    log.rotations(0.0, [rot_event(1.0, 1)])
    log.rotations(100.0, [rot_event(99.0, 2)])
    assert [e.kind for e in log.events] == ["rotation", "rotation"]
    log.add(101.0, "status", "status ok → draining")
    log.add(102.0, "status", "status ok → draining")
    assert len(log) == 3 and log.events[-1].render() == "status ok → draining (×2)"
    with pytest.raises(ValueError, match="maxlen"):
        EventLog(0)


def test_param_change_is_logged_highlighted_and_explained() -> None:
    tr = Tracker()
    tr.observe(state(), 1000.0)
    p = dict(state()["params"], alpha=6.0, version=2, source="api:127.0.0.1")
    tr.observe(state(params=p), 1001.0)
    assert "params v1 → v2 by api:127.0.0.1: alpha 3 → 6" in texts(tr)
    assert tr.fresh["alpha"] > 1001.0 and "delta_b" not in tr.fresh
    assert "params v2 1s ago (alpha 3 → 6)" in tr.tenant("chat", 1002.0)["why"]


def test_disconnect_and_reconnect_are_logged_once() -> None:
    tr = Tracker()
    tr.observe(state(), 1000.0)
    tr.lost("connection refused", 1001.0, retry_in=2.0)
    tr.lost("connection refused", 1003.0, retry_in=4.0)
    assert not tr.connected and tr.lost_since == 1001.0 and tr.retry_at == 1007.0
    assert tr.state is not None  # the last frame stays
    tr.observe(state(), 1010.0)
    assert texts(tr)[-2:] == ["disconnected: connection refused", "reconnected after 9s"]


def test_tuner_decisions_and_freeze_are_events() -> None:
    tr = Tracker()
    tuner = {"mode": "advise", "state": "watching", "frozen": False, "frozen_reason": None, "incumbent": {},
             "candidate": None, "phase": None, "last_decisions": [], "rollbacks_last_hour": 0}
    tr.observe(state(tuner=tuner), 1000.0)
    t2 = dict(tuner, frozen=True, frozen_reason="operator", last_decisions=[
        {"at": 1000.5, "action": "rollback", "reason": "attainment fell"}])
    tr.observe(state(tuner=t2), 1001.0)
    assert "tuner frozen: operator" in texts(tr) and "tuner: rollback (attainment fell)" in texts(tr)
    assert tr.derived(1001.0)["tuner_available"] is True


def test_derived_fields() -> None:
    tr = Tracker()
    tr.set_config({"tuner": {"target_attainment": {"value": 0.8, "source": "profile"}},
                   "engine": {"max_num_seqs": {"value": 64, "source": "profile"}}})
    tr.observe(state(), 1000.0)
    d = tr.derived(1000.5)
    assert d["target_attainment"] == 0.8 and d["data_age_s"] == 0.5 and d["connected"] is True
    assert d["kv"]["hbm"]["used_share"] == pytest.approx(1000 / 1085, abs=1e-4)
    assert d["kv"]["dram"]["total_gib"] == 16.0
    assert d["tenants"]["voice"]["verdict"] == "—"  # 4 requests
    chat = d["tenants"]["chat"]
    # against 0.8 (warn line 0.9): TTFT 0.9 is OK, both-SLO 0.88 is a WARN, so the tenant is WARN
    assert (chat["ttft"], chat["slo"], chat["verdict"]) == ("OK", "WARN", "WARN")
    assert tr.config_value("engine", "max_num_seqs") == 64
    with pytest.raises(ValueError, match="history"):
        Tracker(history=1)


def test_a_tenant_verdict_change_is_logged_once_it_holds() -> None:
    tr = Tracker()
    good = state()
    good["tenants"]["chat"]["window"].update(ttft_attainment=1.0, slo_attainment=1.0)
    tr.observe(good, 1000.0)
    assert tr.verdicts["chat"] == "OK"
    bad = state()  # chat: both-SLO 0.88 < 0.9: BREACH
    tr.observe(bad, 1001.0)
    tr.observe(good, 1002.0)  # a one-poll dip is not news
    for t in (1003.0, 1004.0):
        tr.observe(bad, t)
    assert not any(e.kind == "verdict" for e in tr.events.events)
    tr.observe(bad, 1005.0)
    assert [e.render() for e in tr.events.events if e.kind == "verdict"] == ["chat: OK → BREACH (TTFT 90%, both 88%)"]
    assert [e.level for e in tr.events.events if e.kind == "verdict"] == ["error"]


def _with_shed(**shed: dict[str, int]) -> dict:
    s = state()
    for name, counts in shed.items():
        s["tenants"][name]["shed"] = counts
    return s


def test_shed_requests_are_one_warning_line_per_burst_by_tenant_and_reason() -> None:
    tr = Tracker()
    tr.observe(_with_shed(chat={"deadline": 40}), 1000.0)  # shed before the dashboard started: not news
    assert not any(e.kind == "shed" for e in tr.events.events)
    tr.observe(_with_shed(chat={"deadline": 43}, voice={"tenant_limit": 2}), 1001.0)
    tr.observe(_with_shed(chat={"deadline": 50}, voice={"tenant_limit": 2}), 1003.0)  # merges into the line
    (ev,) = [e for e in tr.events.events if e.kind == "shed"]
    assert ev.level == "warn"
    assert ev.render() == "shed 12 in 2s: chat 10 past its deadline (503), voice 2 over its max_inflight (429)"
    tr.observe(_with_shed(chat={"deadline": 51}, voice={"tenant_limit": 2}), 1100.0)  # much later: a new line
    assert [e.render() for e in tr.events.events if e.kind == "shed"][-1] == "shed 1: chat 1 past its deadline (503)"
