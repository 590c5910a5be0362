"""Cluster description: GPU type, budget, nodes and the links between GPUs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_GPUS = 100_000  # plausibility bound on a GPU budget (and on GPUs per node)

# Nominal one-direction bandwidths (GB/s) and per-message latencies (µs) of common links.
LINK_PRESETS: dict[str, tuple[float, float]] = {
    "pcie4": (25.0, 10.0),          # PCIe 4.0 x16, ~25 GB/s achievable
    "pcie5": (50.0, 8.0),           # PCIe 5.0 x16
    "nvlink-a100": (300.0, 3.0),    # NVLink 3 (600 GB/s bidirectional)
    "nvlink-h100": (450.0, 3.0),    # NVLink 4 (900 GB/s bidirectional)
    "10gbe": (1.25, 30.0),          # 10 Gb Ethernet, TCP
    "25gbe-roce": (3.125, 10.0),    # 25 Gb Ethernet with RoCE
    "100gbe-roce": (12.5, 8.0),
    "ib-200g": (25.0, 5.0),         # HDR InfiniBand
    "ib-400g": (50.0, 5.0),         # NDR InfiniBand
}


class Link(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    bandwidth_GBps: float = Field(ge=1e-6, le=1e6,
                                  description="one-direction bandwidth, GB/s (1e9 bytes/s)")
    latency_us: float = Field(ge=0, le=1e8, default=5.0)

    def seconds(self, nbytes: float) -> float:
        return self.latency_us * 1e-6 + nbytes / (self.bandwidth_GBps * 1e9)


def _link(v: object) -> object:
    if isinstance(v, str):
        if v not in LINK_PRESETS:
            raise ValueError(
                f"unknown link preset {v!r}. Fix: use one of {', '.join(LINK_PRESETS)} "
                "or {bandwidth_GBps: ..., latency_us: ...}"
            )
        bw, lat = LINK_PRESETS[v]
        return {"bandwidth_GBps": bw, "latency_us": lat}
    return v


class Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gpu: str = Field(max_length=100, description="GPU type, e.g. a100-80gb; selects the profile")
    gpus: int = Field(gt=0, le=MAX_GPUS, strict=True, description="GPU budget G")
    gpus_per_node: int = Field(gt=0, le=MAX_GPUS, strict=True, default=8)
    intra_node: Link = Field(default_factory=lambda: Link(**_link("pcie4")))  # type: ignore[arg-type]
    inter_node: Link = Field(default_factory=lambda: Link(**_link("25gbe-roce")))  # type: ignore[arg-type]

    @field_validator("intra_node", "inter_node", mode="before")
    @classmethod
    def _preset(cls, v: object) -> object:
        return _link(v)

    def node_of(self, gpu_index: int) -> int:
        return gpu_index // self.gpus_per_node
