"""Bad planner input raises ValueError naming the field."""

import math

import pytest

from superinfer.core import Capacity, Params, Tenant, TenantTable, get_policy
from superinfer.core.types import Snapshot
from tests.core.builders import PARAMS, TENANTS, cap, running, snap, waiting


def plan(s, c):
    return get_policy("lvf").plan(s, c, PARAMS, TENANTS, 10.0)


def with_column(s: Snapshot, name, row, value):
    col = getattr(s, name).copy()
    col[row] = value
    setattr(s, name, col)
    return s


@pytest.mark.parametrize("name", ["num_tokens", "num_computed", "blocks_hbm", "blocks_dram", "synced",
                                  "h2d_pending", "rotations"])
def test_negative_sizes_name_the_field(name):
    s = with_column(snap(waiting(1), running(2)), name, 0, -1)
    with pytest.raises(ValueError, match=rf"^{name}"):
        plan(s, cap(10, reqs=(running(2),)))


def test_unknown_phase():
    s = with_column(snap(waiting(1)), "phase", 0, 7)
    with pytest.raises(ValueError, match=r"^phase: unknown phase"):
        plan(s, cap(10))


@pytest.mark.parametrize("name", ["t_arr", "t_last", "t_run"])
def test_nan_times(name):
    s = with_column(snap(waiting(1)), name, 0, math.nan)
    with pytest.raises(ValueError, match=rf"^{name}: must be a finite number"):
        plan(s, cap(10))


def test_request_needing_more_blocks_than_hbm_holds():
    with pytest.raises(ValueError, match=r"^num_tokens: request 1 needs 7 blocks, more than hbm_blocks 4"):
        plan(snap(waiting(1, prompt=100)), cap(4))


def test_free_blocks_beyond_capacity():
    r = running(2, tokens=64)
    with pytest.raises(ValueError, match=r"^free_blocks"):
        plan(snap(r), cap(10, hbm=12))


def test_capacity_fields_are_checked():
    with pytest.raises(ValueError, match=r"b_xfer must be >= 0"):
        Capacity(hbm_blocks=10, free_blocks=5, b_xfer=-1, token_budget=10, max_num_seqs=4, block_size=16)
    with pytest.raises(ValueError, match=r"block_size must be >= 1"):
        Capacity(hbm_blocks=10, free_blocks=5, b_xfer=1, token_budget=10, max_num_seqs=4, block_size=0)


def test_params_and_tenants_are_checked():
    with pytest.raises(ValueError, match=r"alpha must be within"):
        Params(alpha=-1.0)
    with pytest.raises(ValueError, match=r"weight must be >= 1"):
        Tenant("t", 5.0, 0.1, 0.5)
    with pytest.raises(ValueError, match=r"duplicate tenant"):
        TenantTable([Tenant("a"), Tenant("a")])
    with pytest.raises(ValueError, match=r"ttft_slo must be"):
        Tenant("t", 0.0, 0.1)


def test_duplicate_ids_and_bad_tenant_index():
    with pytest.raises(ValueError, match=r"^req_id: duplicate"):
        plan(snap(waiting(1), waiting(1)), cap(10))
    with pytest.raises(ValueError, match=r"^tenant: tenant index out of range"):
        plan(snap(waiting(1, tenant=3)), cap(10))


def test_unknown_policy():
    with pytest.raises(ValueError, match=r"unknown policy 'nope'"):
        get_policy("nope")
