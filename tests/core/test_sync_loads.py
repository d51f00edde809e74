"""Synchronous loads (``Capacity.sync_loads``: vLLM with a KV connector whose loads are synchronous, the
plugin on CPU): a parked request loaded whole computes in the iteration of its copy, with room for what it
computes; a load the link cannot take whole goes as an asynchronous one."""

import pytest

from superinfer.core import get_policy
from tests.core.builders import BS, PARAMS, TENANTS, rotary, state

NOW = 100.0


def plan(name, s, c):
    return get_policy(name).plan(s, c, PARAMS, TENANTS, NOW)


def decisions(p):
    return (dict(zip(p.swap_ids.tolist(), p.swap_blocks.tolist())), dict(zip(p.sched_ids.tolist(), p.sched_tokens.tolist())),
            dict(zip(p.alloc_ids.tolist(), p.alloc_blocks.tolist())))


@pytest.mark.parametrize("name", ["lvf", "lvf-paper", "vllm-offload"])
def test_a_parked_request_loaded_synchronously_computes_in_the_iteration_of_its_copy(name):
    parked = rotary(1, tokens=BS * 3, t_last=NOW - 1)  # three full blocks: its next token needs a fourth
    swap, sched, alloc = decisions(plan(name, *state(parked, free=10, sync_loads=True)))
    assert swap == {1: 3} and sched == {1: 1}
    assert alloc == {1: 4}, "its blocks and room for the token it computes"
    swap, sched, alloc = decisions(plan(name, *state(parked, free=10)))
    assert swap == {1: 3} and sched == {}, "asynchronous: it joins once its copy completed"
    assert alloc == {1: 4}, "its blocks and the one its next token needs, reserved with the copy"


def test_a_load_the_link_cannot_take_whole_goes_asynchronously():
    swap, sched, _ = decisions(plan("lvf", *state(rotary(1, tokens=BS * 3, t_last=NOW - 1), free=10, b_xfer=2,
                                                  sync_loads=True)))
    assert swap == {1: 2} and sched == {}


@pytest.mark.parametrize("sync_loads", [True, False])
def test_a_swap_in_needs_room_for_its_next_token(sync_loads):
    """Three free blocks (the rest held elsewhere) hold its KV but not its next token: it waits, loaded
    synchronously or not (vLLM allocates the fourth block on resume and cannot; the twin would have to park
    it again on its first step)."""
    parked = rotary(1, tokens=BS * 3, t_last=NOW - 1)
    assert decisions(plan("lvf", *state(parked, free=3, hbm=10, sync_loads=sync_loads))) == ({}, {}, {})


def test_a_swap_in_parked_within_a_block_needs_only_its_blocks():
    """Parked two tokens short of three full blocks: its next token goes into its third block."""
    parked = rotary(1, tokens=BS * 3 - 2, t_last=NOW - 1)
    swap, sched, alloc = decisions(plan("lvf", *state(parked, free=3, hbm=10)))
    assert swap == {1: 3} and sched == {} and alloc == {1: 3}
