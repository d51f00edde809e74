"""``bench vllm --policies POLICY@KNOB=VALUE``: a policy with knobs changed for its runs only, paired with
the same policy on the same requests like any two policies."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from superinfer.bench.engine.paired import parse_pairs
from superinfer.bench.engine.replay import ENGINE_POLICIES
from superinfer.bench.engine.variants import VariantError, split_variant


def test_a_plain_policy_has_no_overrides_and_a_variant_its_checked_knobs() -> None:
    assert split_variant("lvf", ENGINE_POLICIES) == ("lvf", {})
    policy, knobs = split_variant("lvf@tbt_credit=1+rotation_margin_s=2.5", ENGINE_POLICIES)
    assert policy == "lvf" and knobs == {"tbt_credit": 1, "rotation_margin_s": 2.5}
    assert type(knobs["tbt_credit"]) is int  # an integer knob stays an integer
    assert split_variant("vllm@async_scheduling=1", ENGINE_POLICIES) == ("vllm", {"async_scheduling": 1})


@pytest.mark.parametrize("label, message", [
    ("nope@alpha=1", "unknown policy 'nope'"),
    ("lvf@", "expected KNOB=VALUE"),
    ("lvf@alpha", "expected KNOB=VALUE"),
    ("lvf@alpha=x", "alpha must be a number"),
    ("lvf@speed=1", "unknown parameter 'speed'"),
    ("lvf@tbt_credit=2", "tbt_credit must be within [0, 1]"),
    ("lvf@tbt_credit=0.5", "tbt_credit must be an integer"),
    ("lvf@alpha=1+alpha=2", "alpha given twice"),
    ("lvf@async_scheduling=2", "async_scheduling takes 0 or 1"),
])
def test_a_bad_label_names_itself_and_what_is_wrong(label: str, message: str) -> None:
    with pytest.raises(VariantError) as info:
        split_variant(label, ENGINE_POLICIES)
    assert label in str(info.value) and message in str(info.value)


def test_a_variant_pairs_with_its_base_policy() -> None:
    policies = ["lvf", "lvf@tbt_credit=1"]
    assert parse_pairs("lvf@tbt_credit=1:lvf", policies) == [("lvf@tbt_credit=1", "lvf")]


@pytest.mark.parametrize("policies, message", [("vllm,lvf@nope=1", "unknown parameter 'nope'"),
                                               ("lvf,lvf", "distinct policies")])
def test_bad_variants_are_usage_errors_before_anything_is_built(tmp_path: Path, policies: str, message: str) -> None:
    from superinfer.bench.engine.run import bench_vllm

    r = CliRunner().invoke(bench_vllm, ["--build-tiny", str(tmp_path / "m"), "--policies", policies])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "m").exists()


class _Opened(Exception):
    pass


def test_the_variants_knobs_reach_its_engine_and_nothing_else_changes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_policy`` opens the engine of the label's policy with the label's knobs over the bench's own."""
    from superinfer.bench.engine import replay
    from superinfer.bench.engine.run import run_policy
    from superinfer.core import PARAM_BOUNDS

    seen = []

    def opened(spec, workdir):  # stops the run where the engine would start
        seen.append(spec)
        raise _Opened

    monkeypatch.setattr(replay, "open_engine", opened)
    o = {"workload": "chat", "start_s": None, "arrival": "poisson", "rps": 2.0, "duration": 2.0, "max_model_len": 256,
         "b_xfer": "auto", "model": str(tmp_path), "num_blocks": 64, "block_size": 16, "max_num_seqs": 8,
         "max_num_batched_tokens": 256, "host_blocks": 0, **{k: None for k in PARAM_BOUNDS}, "alpha": 2.0}
    for label in ("lvf", "lvf@tbt_credit=1+alpha=1", "lvf@async_scheduling=1", "lvf@async_scheduling=0"):
        with pytest.raises(_Opened):
            run_policy(label, 0, o, (1.0, 0.1), tmp_path)
    base, variant, on, off = seen
    assert base.async_scheduling is None and on.async_scheduling is True and off.async_scheduling is False
    assert on.params == off.params == base.params  # an engine setting, not a knob
    assert base.policy == variant.policy == "lvf"
    assert base.params["alpha"] == 2.0 and "tbt_credit" not in base.params  # the params file's default
    assert variant.params["alpha"] == 1.0 and variant.params["tbt_credit"] == 1
    assert {k: v for k, v in variant.params.items() if k not in ("alpha", "tbt_credit")} == \
        {k: v for k, v in base.params.items() if k != "alpha"}
