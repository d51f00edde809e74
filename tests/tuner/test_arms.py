"""The arms file: round trip, and every kind of bad content refused with the file and key named."""

from __future__ import annotations

import json

import pytest

from superinfer.tuner.arms import ARMS_KIND, Arm, Arms, ArmsError, load_arms, save_arms


def test_round_trip(tmp_path) -> None:
    arms = Arms(Arm("robust", {"step_slo_share": 1.6}, 0.91),
                {"chat": Arm("chat", {"step_slo_share": 2.0, "hopeless_last": 1.0}, 0.97, {"log_rate": 1.8},
                             {"start": 0.4})},
                {"scenario": "x"}, start=Arm("start", {"step_slo_share": 0.8, "hopeless_last": 1.0}))
    save_arms(arms, tmp_path / "a.json")
    back = load_arms(tmp_path / "a.json")
    assert back.robust.params == {"step_slo_share": 1.6} and back.phases["chat"].features == {"log_rate": 1.8}
    assert back.centroids() == {"chat": {"log_rate": 1.8}}
    assert back.phases["chat"].versus == {"start": 0.4} and back.start.params == arms.start.params


@pytest.mark.parametrize("body, where", [
    ({"version": 2, "kind": ARMS_KIND}, "version 2"),
    ({"version": 1, "kind": ARMS_KIND, "robust": {"params": {"speed": 1}}}, "robust.params.speed: unknown knob"),
    ({"version": 1, "kind": ARMS_KIND, "robust": {"params": {"alpha": 500}}}, "robust.params.alpha: expected a number within"),
    ({"version": 1, "kind": ARMS_KIND, "phases": {"c": {"params": {"min_residency": 1.5}}}}, "phases.c.params.min_residency: expected an integer"),
    ({"version": 1, "kind": ARMS_KIND, "phases": {"c": {"params": {"alpha": 1}, "score": 2}}}, "phases.c.score"),
    ({"version": 1, "kind": ARMS_KIND, "extra": 1}, "unknown key"),
    ({"version": 1, "kind": ARMS_KIND, "phases": {"c": {"params": {"alpha": 1}, "versus": {"start": 1.5}}}},
     "phases.c.versus: expected an object of scores"),
    ({"version": 1, "kind": ARMS_KIND, "phases": {"c": {"params": {"alpha": 1}, "versus": {"d": 0.5}}}},
     r"phases.c.versus: unknown setting\(s\) \['d'\]"),
    ({"version": 1, "kind": ARMS_KIND, "start": {"params": {"alpha": -1}}}, "start.params.alpha"),
])
def test_bad_files_name_the_key(tmp_path, body: dict, where: str) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(body))
    with pytest.raises(ArmsError, match=where):
        load_arms(p)


def test_unreadable_and_not_json(tmp_path) -> None:
    with pytest.raises(ArmsError, match="cannot read"):
        load_arms(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(ArmsError, match="not JSON"):
        load_arms(tmp_path / "x.json")
