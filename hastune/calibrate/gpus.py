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

# Systems of aiconfigurator-core's kernel database that no GPU above stands for, under
# hastune-style names (type-memory, the vendor's capacity). Their specs (peak bf16 FLOP/s,
# bandwidth, memory, NVLink bandwidth) are the package's systems/<system>.yaml; they have no
# shipped profiles: a recipe naming one gets a profile built on demand
# (hastune.calibrate.ondemand). The system's own name (b200_sxm, ...) is accepted too.
SYSTEM_GPUS: dict[str, GPUSpec] = {
    "b200-180gb": GPUSpec("b200-180gb", "B200-SXM-180GB", "b200_sxm"),
    "b300-288gb": GPUSpec("b300-288gb", "B300-SXM-288GB", "b300_sxm"),
    "gb200-186gb": GPUSpec("gb200-186gb", "GB200 (Grace Blackwell, 186 GB)", "gb200"),
    "gb300-288gb": GPUSpec("gb300-288gb", "GB300 (Grace Blackwell Ultra, 288 GB)", "gb300"),
    "rtx-pro-6000-96gb": GPUSpec("rtx-pro-6000-96gb", "RTX PRO 6000 Blackwell Server 96GB",
                                 "rtx_pro_6000_server"),
    "b60-24gb": GPUSpec("b60-24gb", "Intel Arc Pro B60 24GB", "b60"),
}


def gpu_names() -> list[str]:
    """Every name `cluster.gpu` may give for a profile built on demand (hastune names, then
    the kernel database's system names)."""
    systems = sorted({s.system for s in (*GPUS.values(), *SYSTEM_GPUS.values())})
    return [*GPUS, *SYSTEM_GPUS, *(s for s in systems if s not in GPUS)]


def canonical_gpu(name: str) -> tuple[str, str] | None:
    """(hastune name, what hastune.calibrate.aic_profiles.build_profile takes) for a GPU or
    system name: a GPU of GPUS is itself; one of SYSTEM_GPUS, or a system either table names,
    is built from the system's tables (a measured GPU of GPUS for its system: h100_sxm →
    h100-80gb). None for a name neither knows."""
    if name in GPUS:
        return name, name
    if name in SYSTEM_GPUS:
        return name, SYSTEM_GPUS[name].system
    for g, spec in GPUS.items():
        if spec.system == name and not spec.derived:
            return g, g
    for g, spec in SYSTEM_GPUS.items():
        if spec.system == name:
            return g, spec.system
    return None
