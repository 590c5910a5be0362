"""`epd` — EAServe: encode GPUs that also prefill locally, a remote prefill pool, a decode pool.

Encode micro-batches leave on the Poisson-gap rule (bound B, fill target p, capped gap); a
deficit round robin sends a share s of prefills to the remote pool; the encoder and the
co-resident local prefill split the GPU's SMs (latency budget δ = sm_budget).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from hastune.archs.epd_family import EncodePrefillDecode, PoolsConfig, pool_tp
from hastune.cluster import MAX_GPUS


class EPDConfig(PoolsConfig):
    """EAServe: n_E encode GPUs (each with a local prefill worker), n_P remote prefill GPUs,
    n_D decode GPUs; encode micro-batch bound B; remote-prefill share s; batch fill target p."""

    architecture: Literal["epd"]
    n_E: int = Field(ge=1, le=MAX_GPUS,
                     description="encode instances (each also runs a local prefill)")
    n_P: int = Field(ge=0, le=MAX_GPUS, description="remote prefill instances")
    n_D: int = Field(ge=1, le=MAX_GPUS, description="decode instances")
    tp_E: int = pool_tp("encode")
    tp_P: int = pool_tp("remote prefill")
    tp_D: int = pool_tp("decode")
    B: int = Field(ge=1, le=256, description="encode micro-batch bound")
    s: float = Field(ge=0.0, le=1.0, description="share of prefills sent to the remote pool")
    p: float = Field(default=0.6, gt=0.0, lt=1.0, description="target batch fill probability")
    sm_budget: float = Field(default=0.2, gt=0.0, le=1.0, description="encode latency budget δ")
    max_gap_ms: float | None = Field(
        default=50.0, gt=0.0,
        description="cap on the batcher's gap g (null: the paper's uncapped g)")

    @field_validator("s")
    @classmethod
    def _remote_needs_pool(cls, s: float, info: ValidationInfo) -> float:
        if s > 0 and info.data.get("n_P") == 0:
            raise ValueError(
                f"s = {s} sends prefills to a remote pool but n_P = 0. "
                "Fix: set s: 0, or give n_P ≥ 1"
            )
        return s


class EPD(EncodePrefillDecode):
    name = "epd"
    config = EPDConfig
    summary = "EAServe: encode GPUs with local prefill, remote prefill and decode pools"

    def batch(self, cfg: Any) -> int:
        return cfg.B

    def remote_share(self, cfg: Any) -> float:
        return cfg.s

    def batch_knobs(self) -> tuple[str, ...]:
        return ("B", "p")


ARCH = EPD()
