"""`epd-static` — a Dynamo-like baseline: dedicated encode, prefill and decode pools.

Every prefill is remote (s = 1), encode batches leave when full or `timeout_ms` after their
first request, and the encoder has its GPU to itself (no SM sharing).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from hastune.archs.deploy import Deployment
from hastune.archs.epd_family import EncodePrefillDecode, PoolsConfig, pool_tp
from hastune.cluster import MAX_GPUS


class EPDStaticConfig(PoolsConfig):
    """Dynamo-like baseline: dedicated E, P and D pools, every prefill remote (s = 1), encode
    batches leave when full or `timeout_ms` after their first request, no SM sharing."""

    architecture: Literal["epd-static"]
    n_E: int = Field(ge=1, le=MAX_GPUS)
    n_P: int = Field(ge=1, le=MAX_GPUS)
    n_D: int = Field(ge=1, le=MAX_GPUS)
    tp_E: int = pool_tp("encode")
    tp_P: int = pool_tp("remote prefill")
    tp_D: int = pool_tp("decode")
    batch: int = Field(default=4, ge=1, le=256)
    timeout_ms: float = Field(default=20.0, ge=0.0)
    since: ClassVar[tuple[str, ...]] = ("gpu_E", "gpu_P", "gpu_D")


class EPDStatic(EncodePrefillDecode):
    name = "epd-static"
    config = EPDStaticConfig
    summary = "Dynamo-like baseline: dedicated encode, prefill and decode pools, no SM sharing"

    def batch(self, cfg: Any) -> int:
        return cfg.batch

    def remote_share(self, cfg: Any) -> float:
        return 1.0

    def batch_knobs(self) -> tuple[str, ...]:
        return ("batch", "timeout_ms")

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        dep = super().deployment(cfg, gpus_per_node, closest)
        dep.gateway = {"B": cfg.batch, "s": 1.0, "timeout_ms": cfg.timeout_ms}
        dep.notes.append(f"the hastune gateway in front (router.sh) releases encode batches "
                         f"at {cfg.batch} requests or {cfg.timeout_ms:g} ms after their first "
                         "(the static baseline's timeout batcher, with the simulator's policy "
                         "object); batch also bounds the encode servers' concurrent requests")
        return dep


ARCH = EPDStatic()
