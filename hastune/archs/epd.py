"""`epd` — EAServe: encode GPUs that also prefill locally, a remote prefill pool, a decode pool.

Encode micro-batches leave on the Poisson-gap rule (bound B, fill target p, capped gap); a
deficit round robin sends a share s of prefills to the remote pool; the encoder and the
co-resident local prefill split the GPU's SMs (latency budget δ = sm_budget).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

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


# the fixed encoder SM shares a search for vLLM or SGLang tries (EPD.target_knobs)
SM_SPLITS: tuple[float | None, ...] = (None, 0.1, 0.2, 0.3, 0.5)


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
    sm_split: float | None = Field(
        default=None, gt=0.0, lt=1.0,
        description="a fixed encoder SM share f for every batch, the local prefill 1 − f at "
                    "all times (CUDA MPS, what the engines people run can do); null: "
                    "EAServe's split per batch within sm_budget")
    since: ClassVar[tuple[str, ...]] = ("sm_split", "gpu_E", "gpu_P", "gpu_D")

    @field_validator("s")
    @classmethod
    def _remote_needs_pool(cls, s: float, info: ValidationInfo) -> float:
        if s > 0 and info.data.get("n_P") == 0:
            raise ValueError(
                f"s = {s} sends prefills to a remote pool but n_P = 0. "
                "Fix: set s: 0, or give n_P ≥ 1"
            )
        return s

    @field_validator("sm_split")
    @classmethod
    def _split_needs_local(cls, f: float | None, info: ValidationInfo) -> float | None:
        if f is not None and info.data.get("s") == 1.0:
            raise ValueError(f"sm_split = {f} splits an encode GPU with its local prefill, "
                             "but s = 1 sends every prefill to the remote pool. Fix: set "
                             "sm_split: null, or s < 1")
        return f


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

    def target_knobs(self, target: str | None) -> dict[str, list[Any]]:
        """vLLM and SGLang run the co-resident local prefill (s < 1) as a second server on
        each encode GPU under CUDA MPS behind the hastune gateway: one fixed split, a knob
        (null: the dynamic split, which only runners/ runs; the only value with s = 1)."""
        return {"sm_split": list(SM_SPLITS)} if target in ("vllm", "sglang") else {}

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """With s = 1 the static E/P/D shape; with s < 1 the co-resident local prefill has
        no engine counterpart: inexpressible, and the closest sends every prefill to the remote
        pool (s ≥ 0.5 with one) or makes the encode GPUs prefill instances that encode
        inline (P/D)."""
        s = cfg.s
        notes = ["the hastune gateway in front (router.sh) runs EAServe's encode batcher (B, "
                 f"p = {cfg.p:g}, max_gap_ms = {cfg.max_gap_ms}) and least-in-flight routing "
                 "with the simulator's policy objects; B also bounds the encode servers' "
                 "concurrent requests"]
        if s >= 1.0:
            dep = super().deployment(cfg, gpus_per_node, closest)
            dep.gateway = self.runtime(cfg)
            dep.notes += notes + ["s = 1: every prefill is remote, so the encode GPUs only "
                                  "encode (sm_budget has nothing to split)"]
            return dep
        block = [f"s = {s:g}: EAServe prefills a share 1 - s = {1 - s:g} of requests on the "
                 "encode GPUs themselves (co-resident local prefill, SMs split by sm_budget = "
                 f"{cfg.sm_budget:g}); neither vLLM nor SGLang runs an encoder and a prefill "
                 "that share a GPU's SMs in one deployment", MPS_NOTE,
                 "the offload ratio s (share of prefills sent to the remote pool) has no "
                 "engine flag: routers balance over the prefill servers they are given"]
        if cfg.sm_split is not None:
            dep = self._fixed_split(cfg)
            dep.notes[:0] = notes
            return dep
        block[0] += " (a fixed split, sm_split, deploys under CUDA MPS behind the hastune gateway)"
        if not closest:
            return Deployment(Topology.EPD, [], blocking=block, notes=notes,
                              encode_batch=cfg.B)
        if cfg.n_P > 0 and s >= 0.5:
            dep = super().deployment(cfg, gpus_per_node, closest)
            dep.gateway = {**self.runtime(cfg), "s": 1.0}
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

    def _fixed_split(self, cfg: Any) -> Deployment:
        """Every encode GPU runs an encode server and a prefill server under CUDA MPS, capped
        at sm_split and 1 − sm_split of its SMs; the hastune gateway in front applies the
        Poisson-gap batcher (B, p, max_gap_ms) and sends a share s of prefills to the remote
        pool, the rest to the encoding GPU's own prefill server."""
        pools = self.role_pools(cfg)
        pools.insert(2, Pool("prefill", cfg.n_E, cfg.tp_E, co_resident=True))
        f = cfg.sm_split
        return Deployment(Topology.EPD, pools, encode_batch=cfg.B, sm_split=f,
                          gateway=self.runtime(cfg),
                          notes=[f"sm_split = {f:g}: one split for every encode batch (CUDA "
                                 "MPS caps each server's SMs once, at its start), as tuned; "
                                 "the two servers each hold their own weights and KV budget",
                                 "the gateway sends a share s of prefills to the remote "
                                 "pool and the rest to the encoding GPU's own prefill "
                                 "server; sm_budget is not used (the split is fixed)"])

    @staticmethod
    def runtime(cfg: Any) -> dict[str, Any]:
        """What the hastune gateway applies of the config (runners/gateway/config.py)."""
        return {"B": cfg.B, "s": cfg.s, "p": cfg.p, "max_gap_ms": cfg.max_gap_ms}


ARCH = EPD()
