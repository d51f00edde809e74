"""DuplexKV: the KV transfer engine (design §4). It owns bytes; the core owns block counts.

Import the pieces from here::

    from superinfer.duplexkv import DuplexKVEngine, KVLayout, TransferPlan, HostPoolFull
"""

from superinfer.duplexkv.engine import DuplexKVEngine
from superinfer.duplexkv.errors import (
    BackendUnavailable,
    DependencyNotMet,
    DuplexKVError,
    HostPoolFull,
    PinnedMemoryError,
    PlanError,
    TransferError,
)
from superinfer.duplexkv.fences import CudaFence, HostFence
from superinfer.duplexkv.layout import KVLayout, Segment
from superinfer.duplexkv.merge import Direction
from superinfer.duplexkv.plan import Ticket, TransferPlan
from superinfer.duplexkv.pool import HostPool

__all__ = [
    "BackendUnavailable",
    "CudaFence",
    "DependencyNotMet",
    "Direction",
    "DuplexKVEngine",
    "DuplexKVError",
    "HostFence",
    "HostPool",
    "HostPoolFull",
    "KVLayout",
    "PinnedMemoryError",
    "PlanError",
    "Segment",
    "Ticket",
    "TransferError",
    "TransferPlan",
]
