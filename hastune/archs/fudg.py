"""`fudg` — DistServe/Mooncake-like full disaggregation: a prefill pool and a decode pool of
full-model instances, each pool with its own parallelism; the KV cache crosses the cluster's
links after prefill."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from hastune.archs.base import Architecture, ConfigBase, Shape, ep_needs_tp, pool_gpu
from hastune.archs.deploy import Deployment, Pool, Topology
from hastune.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from hastune.prune import Bounds


class FuDGConfig(ConfigBase):
    """DistServe/Mooncake-like: a prefill pool and a decode pool of full-model instances, each
    pool with its own parallelism; the KV cache crosses the cluster's links after prefill.
    `interleaved` placement spreads both pools over every node and prefers a decode instance on
    the prefill's node; `grouped` puts the prefill pool first, then the decode pool."""

    gpu_terms = (("prefill_tp", "prefill_pp", "prefill_instances"),
                 ("decode_tp", "decode_pp", "decode_instances"))
    type_knobs = ("prefill_gpu", "decode_gpu")
    since = ("prefill_expert_parallel", "decode_expert_parallel", "prefill_gpu", "decode_gpu")
    architecture: Literal["fudg"]
    prefill_instances: int = Field(ge=1, le=1024)
    prefill_tp: int = Field(default=1, ge=1, le=64)
    prefill_pp: int = Field(default=1, ge=1, le=16)
    decode_instances: int = Field(ge=1, le=1024)
    decode_tp: int = Field(default=1, ge=1, le=64)
    decode_pp: int = Field(default=1, ge=1, le=16)
    placement: Literal["interleaved", "grouped"] = "interleaved"
    prefill_expert_parallel: bool = Field(
        default=False, description="MoE: prefill instances hold whole experts (ep = tp)")
    decode_expert_parallel: bool = Field(
        default=False, description="MoE: decode instances hold whole experts (ep = tp)")
    prefill_gpu: str | None = pool_gpu("prefill pool")
    decode_gpu: str | None = pool_gpu("decode pool")

    @field_validator("prefill_expert_parallel", "decode_expert_parallel")
    @classmethod
    def _ep_needs_tp(cls, v: bool, info: ValidationInfo) -> bool:
        return ep_needs_tp(v, info, info.field_name.split("_")[0] + "_")  # type: ignore

    @property
    def prefill_ep(self) -> int:
        return self.prefill_tp if self.prefill_expert_parallel else 1

    @property
    def decode_ep(self) -> int:
        return self.decode_tp if self.decode_expert_parallel else 1


class FuDG(Architecture):
    name = "fudg"
    config = FuDGConfig
    summary = "DistServe/Mooncake-like: prefill and decode pools, KV over the network"
    simulator_class = "hastune.sim.fudg:FuDGSimulator"
    not_runnable = "its KV cache transfer between instances is simulated only"
    ep_knobs = ("prefill_expert_parallel", "decode_expert_parallel")
    pool_names = ("prefill", "decode")

    def check_mixed(self, cfg: Any, path: str | Path | None) -> None:
        if cfg.placement != "grouped":
            raise InputError(path, "placement", "interleaved placement spreads both pools over "
                             "every node, and its pools sit on different GPU types",
                             "set placement: grouped (each pool on its type's nodes)")

    def shapes(self, cfg: Any) -> list[Shape]:
        # decode instances hold no encoder (multimodal requests are encoded at prefill)
        return [Shape("prefill_", cfg.prefill_tp, cfg.prefill_pp, ep=cfg.prefill_ep),
                Shape("decode_", cfg.decode_tp, cfg.decode_pp, encoder=False, ep=cfg.decode_ep)]

    def streams(self, cfg: Any) -> int:
        return int(cfg.decode_instances)

    def decode_units(self, cfg: Any) -> float:
        return float(cfg.decode_instances)

    def describe(self, cfg: Any) -> str:
        pe = ", ep" if cfg.prefill_expert_parallel else ""
        de = ", ep" if cfg.decode_expert_parallel else ""
        return (f"{self.name} on {cfg.gpus} GPUs ({cfg.prefill_instances} prefill × tp "
                f"{cfg.prefill_tp} × pp {cfg.prefill_pp}{pe}, {cfg.decode_instances} decode × "
                f"tp {cfg.decode_tp} × pp {cfg.decode_pp}{de})")

    def zero_load_ok(self, b: Bounds, cfg: Any) -> bool:
        shapes = b.shapes(cfg)
        if any(sh is None for sh in shapes):
            return False
        p, d = shapes
        return b.lb_ok(p.ttft_lb + self.kv_lb_s(b, cfg), d.tpot_lb)  # type: ignore[union-attr]

    def kv_lb_s(self, b: Bounds, cfg: Any) -> np.ndarray:
        """Least time to move each request's KV: over the fastest path, every shard at once."""
        c = b.recipe.cluster
        p = b.shape(cfg.prefill_tp, cfg.prefill_pp, ep=cfg.prefill_ep)
        gp = cfg.prefill_tp * cfg.prefill_pp
        bw = max(c.intra_node.bandwidth_GBps * gp, c.inter_node.bandwidth_GBps) * 1e9
        lat = min(c.intra_node.latency_us, c.inter_node.latency_us) * 1e-6
        moved = b.reqs.prefill_tokens * (b.reqs.output_tokens > 1)  # 1 token: no decode
        return (lat + moved * p.kv_bytes / bw) * (moved > 0)  # type: ignore[union-attr]

    def stages(self, b: Bounds, cfg: Any) -> dict[str, float]:
        inf = float("inf")
        p, d = b.shapes(cfg)
        st = {"encode": inf,
              "prefill": cfg.prefill_instances / p.prefill_s if p.prefill_s > 0 else inf,
              "decode": cfg.decode_instances * min(1 / d.decode_s if d.decode_s > 0 else inf,
                                                   d.kv_rate)}
        c = b.recipe.cluster
        ports = (cfg.prefill_instances * cfg.prefill_tp * cfg.prefill_pp
                 * c.intra_node.bandwidth_GBps
                 + (-(-cfg.gpus // c.gpus_per_node)) * c.inter_node.bandwidth_GBps) * 1e9
        cr = b.cap_reqs
        moved = cr.prefill_tokens * (cr.output_tokens > 1)
        kv = float(moved.mean()) * p.kv_bytes
        st["network"] = ports / kv if kv > 0 else inf
        return st

    def role_pools(self, cfg: Any) -> list[Pool]:
        return [Pool("prefill", cfg.prefill_instances, cfg.prefill_tp, cfg.prefill_pp,
                     cfg.prefill_expert_parallel),
                Pool("decode", cfg.decode_instances, cfg.decode_tp, cfg.decode_pp,
                     cfg.decode_expert_parallel)]

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        dep = Deployment(Topology.PD, self.role_pools(cfg))
        if cfg.placement == "interleaved" and cfg.gpus > gpus_per_node:
            dep.notes.append("placement: interleaved spreads both pools over every node; the "
                             "scripts place the prefill pool first, then the decode pool")
        return dep


ARCH = FuDG()
