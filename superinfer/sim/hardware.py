"""Hardware profiles for the simulator's cost model (design §6).

Each number cites its source next to it. Three kinds of number appear:

* **datasheet**: copied from NVIDIA's product datasheet (URL given). Memory sizes are the datasheet's
  decimal GB (the driver reports a little more: an "80 GB" H100 shows 81,559 MiB), so capacity is
  slightly conservative.
* **paper**: measured in the SuperInfer paper (MLSys 2026, arXiv 2601.20309) on its GH200.
* **assumption**: a default we could not take from a measurement of that exact machine. Each is
  labelled, is a *lead* only, and is overridden by a calibration file measured on the real engine
  (see ``superinfer.sim.calibration``). Nothing here is tuned to favour any scheduling policy.

Efficiency factors (``mfu``, ``mbu``) scale the datasheet peaks to what an inference engine reaches:

* ``mfu`` 0.6 (assumption): dense bf16 GEMMs at LLM shapes reach roughly 60-75 % of datasheet peak on
  A100/H100 (e.g. FlashAttention-2, Dao 2023, arXiv:2307.08691: 72 % model FLOPs utilisation end to end
  on A100); we take the low end because serving batches mix small and ragged shapes.
* ``mbu`` 0.7 (assumption): "model bandwidth utilisation" as defined by Databricks/MosaicML, "LLM
  Inference Performance Engineering: Best Practices" (2023,
  https://www.databricks.com/blog/llm-inference-performance-engineering-best-practices), which reports
  decode MBU of roughly 55-60 % for 7B-class models on A100/H100 at small batch and higher for large
  weights; 0.7 is a mid-range lead, replaced by calibration.
* ``overhead_s`` 3 ms (assumption): per-iteration CPU time of the engine (scheduling, input preparation,
  sampling, output processing), which Vidur (Agrawal et al., MLSys 2024, arXiv:2405.05465) models as
  separate profiled CPU components of the order of milliseconds per iteration. Calibration replaces it
  with the measured intercept.

PCIe duplex: PCIe is full duplex by specification (separate transmit and receive lanes), but DMA engines
and host memory share work when both directions run; concurrent bidirectional copies (CUDA sample
``bandwidthTest``/``nvbandwidth`` bidirectional tests) typically reach 1.6-1.9x one direction. We assume
0.85 per direction (1.7x aggregate) until measured; the startup probe and calibration replace it.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9
GIB = 1 << 30


@dataclass(frozen=True)
class HardwareProfile:
    """One accelerator plus its host link. Bandwidths in bytes/s, FLOP/s, bytes, seconds."""

    name: str
    hbm_bytes: float
    hbm_bw: float                 # bytes/s, datasheet peak
    peak_bf16_flops: float        # dense (no sparsity) bf16 tensor-core FLOP/s
    mfu: float                    # achievable share of peak_bf16_flops
    mbu: float                    # achievable share of hbm_bw
    h2d_bw: float                 # host->device bytes/s, one direction alone
    d2h_bw: float                 # device->host bytes/s, one direction alone
    duplex_factor: float          # per-direction bw while both run / one-way bw  (0 < f <= 1)
    dram_bytes: float             # host DRAM installed
    overhead_s: float             # fixed per-iteration engine overhead
    gpu_memory_utilization: float = 0.9   # vLLM's default share of HBM it may use
    link: str = ""
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key in ("hbm_bytes", "hbm_bw", "peak_bf16_flops", "h2d_bw", "d2h_bw", "dram_bytes"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"hardware profile {self.name!r}: {key} must be > 0, got {value!r}")
        for key in ("mfu", "mbu", "duplex_factor", "gpu_memory_utilization"):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise ValueError(f"hardware profile {self.name!r}: {key} must be in (0, 1], got {value!r}")
        if not (isinstance(self.overhead_s, (int, float)) and self.overhead_s >= 0):
            raise ValueError(f"hardware profile {self.name!r}: overhead_s must be >= 0, got {self.overhead_s!r}")

    @property
    def duplex_bw(self) -> float:
        """Per-direction bytes/s while both directions run (the BW of design §4's B_xfer)."""
        return min(self.h2d_bw, self.d2h_bw) * self.duplex_factor


_MFU = 0.6        # assumption, see module docstring
_MBU = 0.7        # assumption, see module docstring
_OVERHEAD_S = 3e-3  # assumption, see module docstring
_PCIE_DUPLEX = 0.85  # assumption, see module docstring

# Paper Table 1 (design §4): 8 GB each direction; merged copies + merged kernel, directions one after the
# other: 63.14 ms for 16 GB -> 253.4 GB/s one way (our reading: the next row adds duplex, so this row ran
# the directions serially). Ideal concurrent ceiling 192 + 192 GB/s (8 GB / 41.66 ms).
_GH200_ONE_WAY = 16 * GB / 63.14e-3
# Measured on a lent H200 SXM (HGX board, PCIe 5.0 x16 to the host), 2026-12-04, `superinferd probe`
# (bench/results/gpu_h200_20261204/duplexkv/probe_qwen2.5-32b.json, 1 GiB each way in 4 MiB blocks):
# 53.8 GB/s host->device, 54.0 device->host, 51.4 / 50.0 GB/s with both directions running.
_H200_PCIE5_ONE_WAY = 53.8 * GB
_H200_PCIE5_DUPLEX = 0.93
_GH200_CONCURRENT = 192 * GB

HARDWARE: dict[str, HardwareProfile] = {
    "gh200": HardwareProfile(
        name="gh200",
        hbm_bytes=144 * GB,            # datasheet: GH200 with 144 GB HBM3e (the paper's machine, design §6)
        hbm_bw=4.9e12,                 # datasheet: "up to 4.9 TB/s" HBM3e
        peak_bf16_flops=989e12,        # datasheet: H100 BF16 tensor 1,979 TFLOPS with sparsity -> 989 dense
        mfu=_MFU, mbu=_MBU,
        h2d_bw=_GH200_ONE_WAY,         # paper Table 1, derived above (datasheet link ceiling 450 GB/s/dir)
        d2h_bw=_GH200_ONE_WAY,
        duplex_factor=_GH200_CONCURRENT / _GH200_ONE_WAY,  # paper: 192 GB/s per direction concurrently
        dram_bytes=480 * GB,           # datasheet: up to 480 GB LPDDR5X
        overhead_s=_OVERHEAD_S,
        link="NVLink-C2C, 900 GB/s total (450 GB/s per direction) per datasheet",
        sources=(
            "NVIDIA GH200 Grace Hopper Superchip datasheet, https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/",
            "NVIDIA H100 Tensor Core GPU datasheet (BF16 1,979 TFLOPS sparse), https://www.nvidia.com/en-us/data-center/h100/",
            "SuperInfer, arXiv:2601.20309, Table 1 (192 + 192 GB/s concurrent; 63.14 ms serial merged copies of 2x8 GB)",
        ),
    ),
    "h100-pcie": HardwareProfile(
        name="h100-pcie",
        hbm_bytes=80 * GB,             # datasheet: H100 PCIe 80 GB HBM2e
        hbm_bw=2.0e12,                 # datasheet: H100 PCIe 2 TB/s
        peak_bf16_flops=756e12,        # datasheet: H100 PCIe BF16 1,513 TFLOPS with sparsity -> 756 dense
        mfu=_MFU, mbu=_MBU,
        h2d_bw=55 * GB,                # PCIe 5.0 x16: 64 GB/s raw/dir (32 GT/s x16, 128b/130b = 63 GB/s);
        d2h_bw=55 * GB,                #   ~55 GB/s pinned cudaMemcpy is the usual measured figure (assumption)
        duplex_factor=_PCIE_DUPLEX,
        dram_bytes=512 * GB,           # assumption: host-dependent; a common 2-socket inference server size
        overhead_s=_OVERHEAD_S,
        link="PCIe 5.0 x16 (128 GB/s bidirectional per datasheet)",
        sources=(
            "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/",
            "PCI-SIG PCIe 5.0 base specification: 32 GT/s per lane, 128b/130b encoding",
        ),
    ),
    "h200-pcie": HardwareProfile(
        name="h200-pcie",
        hbm_bytes=141 * GB,            # datasheet: H200 NVL 141 GB HBM3e
        hbm_bw=4.8e12,                 # datasheet: H200 NVL 4.8 TB/s
        peak_bf16_flops=835e12,        # datasheet: H200 NVL BF16 1,671 TFLOPS with sparsity -> 835 dense
        mfu=_MFU, mbu=_MBU,
        h2d_bw=55 * GB,                # PCIe 5.0 x16, as h100-pcie (assumption for measured throughput)
        d2h_bw=55 * GB,
        duplex_factor=_PCIE_DUPLEX,
        dram_bytes=512 * GB,           # assumption: host-dependent
        overhead_s=_OVERHEAD_S,
        link="PCIe 5.0 x16 (128 GB/s bidirectional per datasheet)",
        sources=(
            "NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column), https://www.nvidia.com/en-us/data-center/h200/",
            "PCI-SIG PCIe 5.0 base specification: 32 GT/s per lane, 128b/130b encoding",
        ),
    ),
    "h100-sxm": HardwareProfile(
        name="h100-sxm",
        hbm_bytes=80 * GB,             # datasheet: H100 SXM 80 GB HBM3
        hbm_bw=3.35e12,                # datasheet: H100 SXM 3.35 TB/s
        peak_bf16_flops=989e12,        # datasheet: H100 SXM BF16 1,979 TFLOPS with sparsity -> 989 dense
        mfu=_MFU, mbu=_MBU,
        h2d_bw=_H200_PCIE5_ONE_WAY,    # HGX boards: PCIe 5.0 x16 to the host, as measured on the lent H200
        d2h_bw=_H200_PCIE5_ONE_WAY,
        duplex_factor=_H200_PCIE5_DUPLEX,
        dram_bytes=2048 * GB,          # datasheet: DGX H100 2 TB system memory (8 GPUs share it)
        overhead_s=_OVERHEAD_S,
        link="PCIe 5.0 x16 to the host (HGX board); NVLink 4 / NVSwitch between GPUs",
        sources=(
            "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column, https://www.nvidia.com/en-us/data-center/h100/",
            "NVIDIA DGX H100 datasheet (2 TB system memory)",
            "host link measured on a lent H200 SXM, bench/results/gpu_h200_20261204/duplexkv/probe_qwen2.5-32b.json",
        ),
    ),
    "h200-sxm": HardwareProfile(
        name="h200-sxm",
        hbm_bytes=141 * GB,            # datasheet: H200 SXM 141 GB HBM3e
        hbm_bw=4.8e12,                 # datasheet: H200 SXM 4.8 TB/s
        peak_bf16_flops=989e12,        # datasheet: H200 SXM BF16 1,979 TFLOPS with sparsity -> 989 dense
        mfu=_MFU, mbu=_MBU,
        h2d_bw=_H200_PCIE5_ONE_WAY,    # measured (probe, 2026-12-04): 53.8 GB/s h2d, 54.0 d2h, pinned
        d2h_bw=_H200_PCIE5_ONE_WAY,
        duplex_factor=_H200_PCIE5_DUPLEX,  # measured: 51.4 / 50.0 GB/s per direction with both running
        dram_bytes=2048 * GB,          # datasheet: DGX H200 2 TB system memory (8 GPUs share it)
        overhead_s=_OVERHEAD_S,
        link="PCIe 5.0 x16 to the host (HGX board, measured); NVLink 4 / NVSwitch between GPUs",
        sources=(
            "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column, https://www.nvidia.com/en-us/data-center/h200/",
            "NVIDIA DGX H200 datasheet (2 TB system memory)",
            "host link measured on a lent H200 SXM (700 W), bench/results/gpu_h200_20261204/duplexkv/",
        ),
    ),
    "a100-sxm": HardwareProfile(
        name="a100-sxm",
        hbm_bytes=80 * GB,             # datasheet: A100 80GB SXM, HBM2e
        hbm_bw=2.039e12,               # datasheet: A100 80GB SXM 2,039 GB/s
        peak_bf16_flops=312e12,        # datasheet: A100 BF16 tensor 312 TFLOPS dense (624 sparse)
        mfu=_MFU, mbu=_MBU,
        h2d_bw=25 * GB,                # PCIe 4.0 x16 to the host (HGX A100), as a100-pcie (assumption)
        d2h_bw=25 * GB,
        duplex_factor=_PCIE_DUPLEX,
        dram_bytes=2048 * GB,          # datasheet: DGX A100 2 TB system memory (8 GPUs share it)
        overhead_s=_OVERHEAD_S,
        link="PCIe 4.0 x16 to the host (HGX board); NVLink 3 / NVSwitch between GPUs",
        sources=(
            "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column, https://www.nvidia.com/en-us/data-center/a100/",
            "NVIDIA DGX A100 datasheet (2 TB system memory)",
        ),
    ),
    "a100-pcie": HardwareProfile(
        name="a100-pcie",
        hbm_bytes=80 * GB,             # datasheet: A100 80GB PCIe, HBM2e
        hbm_bw=1.935e12,               # datasheet: A100 80GB PCIe 1,935 GB/s
        peak_bf16_flops=312e12,        # datasheet: A100 BF16 tensor 312 TFLOPS dense (624 sparse)
        mfu=_MFU, mbu=_MBU,
        h2d_bw=25 * GB,                # PCIe 4.0 x16: 31.5 GB/s raw/dir (16 GT/s x16, 128b/130b);
        d2h_bw=25 * GB,                #   ~25 GB/s pinned cudaMemcpy is the usual measured figure (assumption)
        duplex_factor=_PCIE_DUPLEX,
        dram_bytes=512 * GB,           # assumption: host-dependent
        overhead_s=_OVERHEAD_S,
        link="PCIe 4.0 x16 (64 GB/s bidirectional per datasheet)",
        sources=(
            "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/a100/",
            "PCI-SIG PCIe 4.0 base specification: 16 GT/s per lane, 128b/130b encoding",
        ),
    ),
}


def hardware_names() -> list[str]:
    return sorted(HARDWARE)


def get_hardware(name: str) -> HardwareProfile:
    """The profile called ``name`` (case-insensitive). Raises ValueError listing the valid names."""
    key = name.strip().lower() if isinstance(name, str) else name
    try:
        return HARDWARE[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown hardware {name!r}; valid hardware: {', '.join(hardware_names())}") from None
