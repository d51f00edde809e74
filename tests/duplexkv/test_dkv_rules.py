"""The six ordering rules of design §4, and proof that each test notices its rule's removal."""

from __future__ import annotations

import pytest

from superinfer.duplexkv import rules
from tests.duplexkv.dkv_helpers import SCENARIOS


@pytest.mark.parametrize("rule", sorted(SCENARIOS))
def test_rule_holds(rule: int) -> None:
    assert SCENARIOS[rule]() == []


# Permissive replacements: what the code would do without the rule.
REMOVED = {
    1: {"mark_synced_on_completion": lambda st, key, handle: st.synced.add(key)},
    2: {
        "release_after_copy_out": lambda st, dev, handle: st.released.append(dev),
        "wait_copy_out_before_overwrite": lambda st, dev: [],
    },
    3: {
        "h2d_after_pending_d2h": lambda st, host, dev: (False, []),
        "d2h_after_pending_h2d": lambda st, host: [],
    },
    4: {"d2h_after_writer": lambda st, dev: []},
    5: {"readable": lambda st, dev: True, "read_fences": lambda st, dev: []},
    6: {"assign_waves": lambda copies: [0] * len(copies)},
}


@pytest.mark.parametrize("rule", sorted(REMOVED))
def test_scenario_detects_rule_removal(rule: int, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, permissive in REMOVED[rule].items():
        assert hasattr(rules, name)
        monkeypatch.setattr(rules, name, permissive)
    assert SCENARIOS[rule]() != [], f"the rule {rule} scenario passes without rule {rule}"


def test_waves_only_split_conflicts() -> None:
    from superinfer.duplexkv.merge import Direction

    D2H, H2D = Direction.D2H, Direction.H2D
    # independent copies share wave 0; a copy-in into a block being copied out goes one wave later
    assert rules.assign_waves([(D2H, 1, 0), (D2H, 2, 1), (H2D, 3, 2)]) == [0, 0, 0]
    assert rules.assign_waves([(D2H, 1, 0), (H2D, 1, 5)]) == [0, 1]
    # two readers of one host block do not conflict; a writer after them does
    assert rules.assign_waves([(H2D, 1, 0), (H2D, 2, 0), (D2H, 3, 0)]) == [0, 0, 1]
