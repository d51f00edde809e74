"""GPU-to-GPU interconnects of the twin, and what a collective costs on them (issue 14).

A :class:`Fabric` is a list of tiers, innermost first: a group of ranks that fits in one ``size``-GPU
domain of a tier talks over that tier's :class:`Link` (an NVLink pair, a PCIe host, then the network).
vLLM orders ranks with tensor parallelism innermost, so a TP group of ``tp`` consecutive ranks uses the
smallest tier with ``size >= tp``, and a pipeline hop between ranks ``r`` and ``r + tp`` uses the tier
whose domain contains both.

Collective times follow NCCL's own cost model (``src/graph/tuning.cc``, NVIDIA/nccl at commit
01afd20a77b5): a ring all-reduce of ``S`` bytes over ``n`` ranks takes ``2(n-1)`` steps,

    t = base_lat + 2(n-1) * hw_lat + S / algbw,   algbw = busbw * n / (2(n-1))

for each protocol (LL: base 3.6 us, busbw / 4; Simple: base 8.4 us, full busbw), and NCCL picks the
faster one. ``hw_lat`` per step by link class (Ring, LL / Simple): NVLink 0.47 / 3.4 us, PCIe
1.0 / 5.7 us, network 2.7 / 9.6 us. Point-to-point sends (pipeline hops) are one step with the LL
bandwidth at busbw / 3 (the tuning model's factor for non-all-reduce ring operations).

``busbw`` is the link's datasheet bandwidth per direction times :data:`LINK_EFFICIENCY`:

* ``LINK_EFFICIENCY`` 0.8 (**assumption**, cited): NCCL's maintainer on H100 NVLink, "450GB/s is the
  line rate. With the protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s"
  (NVIDIA/nccl-tests issue 212); NVIDIA/nccl issue 1264 measures 380 of 450 GB/s one way on HGX H100.
  We apply the same share to PCIe and the network until a measurement replaces it.

Known optimism/pessimism, not tuned away: vLLM's custom all-reduce (one-shot/two-shot over NVLink) beats
NCCL on small messages, so TP on NVLink is priced a little high; a pair of H100 PCIe cards on an NVLink
bridge was measured at 116 GB/s all-reduce bus bandwidth (NVIDIA/nccl issue 1161) against the
600 GB/s x 0.8 / 2 = 240 GB/s this model gives, so ``nvlink-bridge`` on ``h100-pcie`` is optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GB = 1e9
US = 1e-6

#: achievable share of a link's datasheet bandwidth per direction (assumption, see module docstring)
LINK_EFFICIENCY = 0.8

# NCCL tuning model (src/graph/tuning.cc @ 01afd20a77b5): Ring base latency per protocol and per-step
# hardware latency per link class, microseconds.
_BASE_LAT_US = {"ll": 3.6, "simple": 8.4}
_HW_LAT_US = {"nvlink": {"ll": 0.47, "simple": 3.4}, "pcie": {"ll": 1.0, "simple": 5.7},
              "net": {"ll": 2.7, "simple": 9.6}}
_LL_BW_SHARE_ALLREDUCE = 1 / 4
_LL_BW_SHARE_P2P = 1 / 3


@dataclass(frozen=True)
class Link:
    """One kind of GPU-to-GPU link. ``bw``: datasheet bytes/s per direction per GPU; ``kind``: the
    NCCL link class of its latency (nvlink, pcie, net)."""

    name: str
    bw: float
    kind: str
    source: str

    def __post_init__(self) -> None:
        if not (isinstance(self.bw, (int, float)) and math.isfinite(self.bw) and self.bw > 0):
            raise ValueError(f"link {self.name!r}: bw must be a number > 0 (bytes/s), got {self.bw!r}")
        if self.kind not in _HW_LAT_US:
            raise ValueError(f"link {self.name!r}: kind must be one of {', '.join(_HW_LAT_US)}, got {self.kind!r}")

    @property
    def busbw(self) -> float:
        return self.bw * LINK_EFFICIENCY


@dataclass(frozen=True)
class Tier:
    """``size`` GPUs that reach each other over ``link`` (the last tier of a fabric is unbounded)."""

    size: int
    link: Link


@dataclass(frozen=True)
class Fabric:
    """The tiers of one deployment shape, innermost first; sizes strictly increase and divide each other."""

    name: str
    tiers: tuple[Tier, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError(f"fabric {self.name!r}: needs at least one tier")
        prev = 1
        for t in self.tiers:
            if not isinstance(t.size, int) or t.size <= prev or t.size % prev:
                raise ValueError(f"fabric {self.name!r}: tier sizes must increase and be multiples of each other, "
                                 f"got {[x.size for x in self.tiers]}")
            prev = t.size

    def link_for_group(self, first_rank: int, ranks: int) -> Link:
        """The link a group of ``ranks`` consecutive ranks from ``first_rank`` is limited by: the smallest
        tier whose aligned domain contains all of them."""
        last = first_rank + ranks - 1
        for t in self.tiers:
            if first_rank // t.size == last // t.size:
                return t.link
        return self.tiers[-1].link


def _ring_s(nbytes: float, link: Link, steps: int, ratio: float, ll_share: float) -> float:
    """min over NCCL's LL and Simple protocols of base + steps*hw + bytes/algbw."""
    lat = _HW_LAT_US[link.kind]
    ll = (_BASE_LAT_US["ll"] + steps * lat["ll"]) * US + nbytes / (link.busbw * ll_share * ratio)
    simple = (_BASE_LAT_US["simple"] + steps * lat["simple"]) * US + nbytes / (link.busbw * ratio)
    return ll if ll < simple else simple


def allreduce_s(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds for a ring all-reduce of ``nbytes`` (the full tensor) over ``ranks`` GPUs; 0 for one rank."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (ranks - 1)
    return _ring_s(nbytes, link, steps, ranks / steps, _LL_BW_SHARE_ALLREDUCE)


def allgather_s(nbytes: float, ranks: int, link: Link) -> float:
    """Seconds for a ring all-gather whose *result* is ``nbytes``; 0 for one rank."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    steps = ranks - 1
    return _ring_s(nbytes, link, steps, ranks / steps, _LL_BW_SHARE_P2P)


def send_s(nbytes: float, link: Link) -> float:
    """Seconds for one point-to-point send of ``nbytes``."""
    if nbytes <= 0:
        return 0.0
    return _ring_s(nbytes, link, 1, 1.0, _LL_BW_SHARE_P2P)


# ---- link data (datasheet numbers, per direction = half the bidirectional figure) ---------------------
NVLINK4 = Link("nvlink4", 450 * GB, "nvlink",
               "NVIDIA H100/GH200 datasheets: NVLink 4, 18 links, 900 GB/s bidirectional per GPU; GH200 NVL2 "
               "joins two superchips with it (NVIDIA GH200 NVL2 product page and Enterprise RA)")
NVLINK_BRIDGE_H100 = Link("nvlink-bridge-h100", 300 * GB, "nvlink",
                          "NVIDIA H100 datasheet, H100 PCIe column: NVLink 600 GB/s (2-way bridge, bidirectional)")
NVLINK_BRIDGE_H200 = Link("nvlink-bridge-h200", 450 * GB, "nvlink",
                          "NVIDIA H200 datasheet, H200 NVL column: 2- or 4-way NVLink bridge 900 GB/s per GPU")
NVLINK_BRIDGE_A100 = Link("nvlink-bridge-a100", 300 * GB, "nvlink",
                          "NVIDIA A100 datasheet, A100 80GB PCIe column: NVLink Bridge for 2 GPUs 600 GB/s")
PCIE5 = Link("pcie5-x16", 63 * GB, "pcie",
             "PCI-SIG PCIe 5.0: 32 GT/s x16 with 128b/130b = 63 GB/s per direction (datasheets: 128 GB/s "
             "bidirectional); GPU peer-to-peer through the host")
PCIE4 = Link("pcie4-x16", 31.5 * GB, "pcie",
             "PCI-SIG PCIe 4.0: 16 GT/s x16 with 128b/130b = 31.5 GB/s per direction (A100 PCIe datasheet: "
             "64 GB/s bidirectional)")
NVSWITCH4 = Link("nvswitch-nvlink4", 450 * GB, "nvlink",
                  "NVIDIA DGX H100 / DGX H200 datasheets: 4 NVSwitch chips, 900 GB/s bidirectional GPU-to-GPU")
NVSWITCH3 = Link("nvswitch-nvlink3", 300 * GB, "nvlink",
                 "NVIDIA DGX A100 datasheet: 6 NVSwitch chips, 600 GB/s bidirectional GPU-to-GPU")
HDR_IB = Link("hdr-200g", 25 * GB, "net",
              "NVIDIA DGX A100 datasheet: 8 single-port ConnectX-6 200 Gb/s HDR InfiniBand = 25 GB/s per direction "
              "per GPU")
NDR_IB = Link("ndr-400g", 50 * GB, "net",
              "NVIDIA ConnectX-7 datasheet: 400 Gb/s (NDR InfiniBand / Ethernet) = 50 GB/s per direction; "
              "assumption: one NIC per GPU")

#: GPUs per PCIe server (assumption: the common 8-GPU PCIe chassis; cross-socket peer-to-peer may be slower)
PCIE_HOST_GPUS = 8
_UNBOUNDED = 1 << 20

FABRICS: dict[str, dict[str, Fabric]] = {
    "gh200": {
        "nvl2": Fabric("nvl2", (Tier(2, NVLINK4), Tier(_UNBOUNDED, NDR_IB)),
                       "GH200 NVL2 nodes: two superchips on NVLink, nodes on 400G networking"),
    },
    "h100-pcie": {
        "pcie": Fabric("pcie", (Tier(PCIE_HOST_GPUS, PCIE5), Tier(_UNBOUNDED, NDR_IB)),
                       "H100 PCIe cards without bridges, 8 per host, hosts on 400G networking"),
        "nvlink-bridge": Fabric("nvlink-bridge", (Tier(2, NVLINK_BRIDGE_H100), Tier(PCIE_HOST_GPUS, PCIE5),
                                                  Tier(_UNBOUNDED, NDR_IB)),
                                "pairs of H100 PCIe cards on NVLink bridges, 8 per host"),
    },
    "h200-pcie": {
        "pcie": Fabric("pcie", (Tier(PCIE_HOST_GPUS, PCIE5), Tier(_UNBOUNDED, NDR_IB)),
                       "H200 NVL cards without bridges, 8 per host"),
        "nvlink-bridge": Fabric("nvlink-bridge", (Tier(4, NVLINK_BRIDGE_H200), Tier(PCIE_HOST_GPUS, PCIE5),
                                                  Tier(_UNBOUNDED, NDR_IB)),
                                "4-way NVLink-bridged H200 NVL cards, 8 per host"),
    },
    "h100-sxm": {
        "dgx-h100": Fabric("dgx-h100", (Tier(8, NVSWITCH4), Tier(_UNBOUNDED, NDR_IB)),
                           "DGX/HGX H100: 8 GPUs on NVSwitch, nodes on 400G NDR InfiniBand (one NIC per GPU)"),
    },
    "h200-sxm": {
        "dgx-h200": Fabric("dgx-h200", (Tier(8, NVSWITCH4), Tier(_UNBOUNDED, NDR_IB)),
                           "DGX/HGX H200: 8 GPUs on NVSwitch, nodes on 400G NDR InfiniBand (one NIC per GPU)"),
    },
    "a100-sxm": {
        "dgx-a100": Fabric("dgx-a100", (Tier(8, NVSWITCH3), Tier(_UNBOUNDED, HDR_IB)),
                           "DGX/HGX A100: 8 GPUs on NVSwitch, nodes on 200G HDR InfiniBand (one NIC per GPU)"),
    },
    "a100-pcie": {
        "pcie": Fabric("pcie", (Tier(PCIE_HOST_GPUS, PCIE4), Tier(_UNBOUNDED, NDR_IB)),
                       "A100 80GB PCIe cards without bridges, 8 per host"),
        "nvlink-bridge": Fabric("nvlink-bridge", (Tier(2, NVLINK_BRIDGE_A100), Tier(PCIE_HOST_GPUS, PCIE4),
                                                  Tier(_UNBOUNDED, NDR_IB)),
                                "pairs of A100 PCIe cards on NVLink bridges, 8 per host"),
    },
}

#: the fabric assumed when none is named: what the hardware profile's name implies (no optional bridges)
DEFAULT_FABRIC = {"gh200": "nvl2", "h100-pcie": "pcie", "h200-pcie": "pcie", "a100-pcie": "pcie",
                  "h100-sxm": "dgx-h100", "h200-sxm": "dgx-h200", "a100-sxm": "dgx-a100"}


def get_fabric(hardware: str, name: str | None = None) -> Fabric:
    """The fabric ``name`` (default: :data:`DEFAULT_FABRIC`) of a hardware profile; ValueError naming the
    valid choices otherwise."""
    key = hardware.strip().lower()
    if key not in FABRICS:
        raise ValueError(f"no interconnect data for hardware {hardware!r}; known: {', '.join(sorted(FABRICS))}")
    choice = DEFAULT_FABRIC[key] if name is None else name.strip().lower()
    try:
        return FABRICS[key][choice]
    except KeyError:
        raise ValueError(f"fabric: unknown fabric {name!r} for {key}; valid: {', '.join(sorted(FABRICS[key]))}") from None
