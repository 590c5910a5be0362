"""`epd` — EAServe: encode GPUs that also prefill locally, a remote prefill pool, a decode pool.

Encode micro-batches leave on the Poisson-gap rule (bound B, fill target p, capped gap); a
deficit round robin sends a share s of prefills to the remote pool; the encoder and the
co-resident local prefill split the GPU's SMs (latency budget δ = sm_budget).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from hastune.archs.deploy import Deployment, Pool, Topology
from hastune.archs.epd_family import EncodePrefillDecode, PoolsConfig, pool_tp
from hastune.cluster import MAX_GPUS

MPS_NOTE = (
    "EAServe's SM split between an encoder and a co-resident local prefill: CUDA MPS "
    "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per client process) can cap the SM share of an "
    "encode-only server and of a prefill server started on the same GPU, which approximates a "
    "fixed split only: EAServe chooses the split per encode batch against its latency budget "
    "(sm_budget), the two servers each hold their own weights and KV budget on the GPU, and "
    "neither engine sends a share s of prefills to a co-resident server; hastune emits no MPS "
    "setup")


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

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """With s = 1 the static E/P/D shape; with s < 1 the co-resident local prefill has
        no engine counterpart: inexpressible, and the closest sends every prefill to the remote
        pool (s ≥ 0.5 with one) or makes the encode GPUs prefill instances that encode
        inline (P/D)."""
        s = cfg.s
        notes = [f"p = {cfg.p:g} and max_gap_ms = {cfg.max_gap_ms}: the encode batcher's "
                 "Poisson-gap rule has no engine flag; B bounds the encode servers' concurrent "
                 "requests"]
        if s >= 1.0:
            dep = super().deployment(cfg, gpus_per_node, closest)
            dep.notes += notes + ["s = 1: every prefill is remote, so the encode GPUs only "
                                  "encode (sm_budget has nothing to split)"]
            return dep
        block = [f"s = {s:g}: EAServe prefills a share 1 - s = {1 - s:g} of requests on the "
                 "encode GPUs themselves (co-resident local prefill, SMs split by sm_budget = "
                 f"{cfg.sm_budget:g}); neither vLLM nor SGLang runs an encoder and a prefill "
                 "that share a GPU's SMs in one deployment", MPS_NOTE,
                 "the offload ratio s (share of prefills sent to the remote pool) has no "
                 "engine flag: routers balance over the prefill servers they are given"]
        if not closest:
            return Deployment(Topology.EPD, [], blocking=block, notes=notes,
                              encode_batch=cfg.B)
        if cfg.n_P > 0 and s >= 0.5:
            dep = super().deployment(cfg, gpus_per_node, closest)
            dep.closest_config = {**cfg.model_dump(exclude={"kind", "name"}), "s": 1.0}
            dep.closest = [f"s = {s:g} -> 1: every prefill goes to the {cfg.n_P} remote "
                           f"prefill instances; the {cfg.n_E} encode instances only encode"]
        else:
            n_pre = cfg.n_E + cfg.n_P
            dep = Deployment(Topology.PD, [Pool("prefill", n_pre, cfg.tp_E),
                                           Pool("decode", cfg.n_D, cfg.tp_D)])
            dep.closest_config = {"architecture": "fudg", "prefill_instances": n_pre,
                                  "prefill_tp": cfg.tp_E, "decode_instances": cfg.n_D,
                                  "decode_tp": cfg.tp_D, "placement": "grouped"}
            dep.closest = [f"the {cfg.n_E} encode instances become prefill instances that "
                           "encode inline (what their local prefill did, time-shared instead "
                           "of SM-split)"
                           + (f", beside the {cfg.n_P} remote prefill instances"
                              if cfg.n_P else "")
                           + f": P/D with {n_pre} prefill and {cfg.n_D} decode instances"]
            if cfg.n_P and cfg.tp_P != cfg.tp_E:
                dep.closest.append(f"tp_P = {cfg.tp_P} -> tp_E = {cfg.tp_E} for every "
                                   "prefill instance")
        dep.notes += notes
        dep.closest.insert(0, block[0])
        dep.notes.append(MPS_NOTE)
        return dep


ARCH = EPD()
