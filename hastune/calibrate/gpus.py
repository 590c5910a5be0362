"""The GPUs profiles are shipped for, and which measured table each one rests on.

Measured GPUs take their specs from the table's hardware.yaml. A GPU without a table is
derived from its nearest measured relative: `peak_flops`, `mem_bw` and `mem_bytes` are its own
nominal figures (vendor datasheets, bf16 dense tensor-core FLOP/s), and the kernel times of
the relative are scaled by the ratios (see hastune.calibrate.device).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPUSpec:
    name: str                       # profiles/<name>/
    label: str
    system: str                     # calibration system whose kernel tables are used
    peak_flops: float = 0.0         # 0: the system's hardware.yaml figure
    mem_bw: float = 0.0
    mem_bytes: float = 0.0
    interconnect_ratio: float = 1.0  # all-reduce bandwidth relative to the system's
    note: str = ""

    @property
    def derived(self) -> bool:
        return bool(self.peak_flops or self.mem_bw or self.interconnect_ratio != 1.0)


GPUS: dict[str, GPUSpec] = {
    "a100-80gb": GPUSpec("a100-80gb", "A100-SXM4-80GB", "a100_sxm"),
    "h100-80gb": GPUSpec("h100-80gb", "H100-SXM5-80GB", "h100_sxm"),
    "h200-141gb": GPUSpec("h200-141gb", "H200-SXM-141GB", "h200_sxm"),
    "l40s-48gb": GPUSpec("l40s-48gb", "L40S 48GB", "l40s"),
    "a800-80gb": GPUSpec(
        "a800-80gb", "A800-SXM4-80GB", "a100_sxm",
        peak_flops=312e12, mem_bw=2.039e12, mem_bytes=85899345920.0,
        interconnect_ratio=400 / 600,
        note="A800 = A100 silicon (312 TFLOP/s bf16, 2,039 GB/s HBM2e, 80 GB) with NVLink cut "
             "to 400 GB/s (A100: 600 GB/s, both bidirectional): compute and memory kernels as "
             "measured on A100, all-reduce bandwidth × 2/3"),
    "l20-48gb": GPUSpec(
        "l20-48gb", "L20 48GB", "l40s",
        peak_flops=119.5e12, mem_bw=864e9, mem_bytes=48305799168.0,
        note="L20 (AD102, 92 SMs, PCIe 4.0, no NVLink): nominal 119.5 TFLOP/s bf16 dense, "
             "864 GB/s GDDR6, 48 GB; derived from L40S (362.05 TFLOP/s, 864 GB/s) by the "
             "compute ratio 0.330 and bandwidth ratio 1.0; usable memory as measured on L40S"),
    "rtx6000ada-48gb": GPUSpec(
        "rtx6000ada-48gb", "RTX 6000 Ada 48GB", "l40s",
        peak_flops=364.2e12, mem_bw=960e9, mem_bytes=48305799168.0,
        note="RTX 6000 Ada (AD102, 142 SMs, PCIe 4.0, no NVLink): nominal 364.2 TFLOP/s bf16 "
             "dense (1,457 FP8 sparse / 4), 960 GB/s GDDR6, 48 GB; derived from L40S "
             "(362.05 TFLOP/s, 864 GB/s) by the compute ratio 1.006 and bandwidth ratio 1.111; "
             "usable memory as measured on L40S"),
}
