"""`padg` — EcoServe, partially disaggregated serving.

`instances` full replicas of tp × pp GPUs, each alternating prefill windows and decode windows;
macro-instances of at most `n_upper` instances admit requests (three checks) and activate
their instances in rolling order; with `mitosis`, instances are added and drained with the
load.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from hastune.archs.base import ConfigBase, Parallel, pool_gpu
from hastune.archs.deploy import Deployment, Topology
from hastune.archs.replicas import Colocated
from hastune.errors import InputError


class PaDGConfig(ConfigBase, Parallel):
    """EcoServe (partially disaggregated): `instances` full replicas of tp × pp GPUs, each
    alternating prefill windows and decode windows; macro-instances of at most `n_upper`
    instances admit requests (three checks) and activate their instances in rolling order.
    `slack` chooses the statistic of saved TPOT that check (2) uses: the paper's `mean`, or
    the stricter `min` / `quantile` (the `slack_quantile` lowest). With `mitosis`, instances
    are added on TTFT pressure and drained on high slack, between `n_lower` and `n_upper` per
    macro-instance, splitting past `n_upper`; `max_instances` bounds the GPUs it may take."""

    gpu_terms = (("tp", "pp", "instances"),)
    type_knobs = ("gpu",)
    since = ("expert_parallel", "gpu")
    architecture: Literal["padg"]
    instances: int = Field(ge=1, le=1024, description="instances in service (at start)")
    gpu: str | None = pool_gpu("instances")
    n_upper: int = Field(default=8, ge=1, description="N_u: most instances per macro-instance")
    n_lower: int = Field(default=1, ge=1, description="N_l: fewest instances per macro-instance")
    slack: Literal["mean", "min", "quantile"] = Field(
        default="mean", description="saved-TPOT statistic of admission check (2)")
    slack_quantile: float = Field(default=0.1, gt=0.0, lt=1.0,
                                  description="which quantile, for slack: quantile")
    status_interval_ms: float = Field(
        default=10.0, gt=0.0, description="period at which instances report to the scheduler")
    mitosis: bool = Field(default=False, description="elastic instance count (time-varying load)")
    max_instances: int | None = Field(default=None, ge=1,
                                      description="mitosis: the most instances (GPUs reserved)")
    scale_interval_s: float = Field(default=5.0, gt=0.0, description="mitosis: decision period")
    startup_s: float = Field(default=0.0, ge=0.0, description="mitosis: a new instance's load time")

    @model_validator(mode="after")
    def _bounds(self) -> PaDGConfig:
        if self.n_upper < self.n_lower:
            raise ValueError(f"n_upper ({self.n_upper}) < n_lower ({self.n_lower}). "
                             "Fix: make n_lower ≤ n_upper")
        if self.max_instances is not None and self.max_instances < self.instances:
            raise ValueError(f"max_instances ({self.max_instances}) < instances "
                             f"({self.instances}). Fix: raise max_instances or remove it")
        return self

    @property
    def gpus(self) -> int:
        return self.instance_gpus * (self.max_instances if self.mitosis and self.max_instances
                                     else self.instances)


class PaDG(Colocated):
    name = "padg"
    config = PaDGConfig
    summary = "EcoServe: replicas alternating prefill and decode windows, rolling activation"
    simulator_class = "hastune.sim.padg:PaDGSimulator"
    engine_mode = "windows"  # runners/engine/modes.py
    pool_word = "instances"
    count_field = "instances"

    def engine_check(self, cfg: Any, path: Any = None) -> None:
        super().engine_check(cfg, path)
        if cfg.mitosis:
            raise InputError(path, "mitosis", f"the engine runs a fixed set of {self.name} "
                             "instances", "set mitosis: false, or evaluate mitosis with the "
                             "simulator (--evaluator sim)")

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """No engine alternates windows: inexpressible; the closest is nodg's replicas with
        chunked prefill."""
        block = ["EcoServe's temporal disaggregation (each instance alternating prefill and "
                 "decode windows, macro-instances of up to n_upper instances admitting requests "
                 "and activating them in rolling order) has no vLLM or SGLang counterpart"]
        if cfg.mitosis:
            block.append("mitosis (instances added and drained with the load) has no flag")
        if not closest:
            return Deployment(Topology.AGGREGATED, [], blocking=block)
        chunk = 512  # nodg's default budget, emitted as the engine's token budget
        return Deployment(
            Topology.AGGREGATED, self.role_pools(cfg), chunk_tokens=chunk, chunked=True,
            closest_config={"architecture": "nodg", "replicas": cfg.instances, "tp": cfg.tp,
                            "pp": cfg.pp, "chunk_tokens": chunk,
                            **({"expert_parallel": True} if cfg.expert_parallel else {})},
            closest=[block[0], f"closest: {cfg.instances} aggregated replicas of tp {cfg.tp} x "
                     f"pp {cfg.pp} behind a router, with the engine's chunked prefill ({chunk} "
                     "tokens a step) mixing prefill and decode in every step instead of in "
                     "windows"])


ARCH = PaDG()
