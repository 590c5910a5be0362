"""What the encode / prefill / decode architectures share (EAServe and its static baseline).

One worker per GPU in three pools: n_E encode GPUs (with EAServe, each also runs a local
prefill), n_P remote prefill GPUs, n_D decode GPUs; the LLM runs whole on one GPU (the
profile's tp must be 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, model_validator

from hastune.archs.base import Architecture, ConfigBase, Shape, pool_gpu
from hastune.archs.deploy import Deployment, Pool, Topology
from hastune.errors import InputError

if TYPE_CHECKING:
    from hastune.evaluators.sim import Evaluation
    from hastune.profile import DecodeSpec
    from hastune.prune import Bounds


def pool_tp(pool: str) -> Any:
    """The field of one pool's tensor-parallel degree (every instance of the pool runs the LLM
    on that many GPUs)."""
    return Field(default=1, ge=1, le=64, description=f"tensor-parallel degree of one {pool} "
                 "instance (GPUs per instance)")


class PoolsConfig(ConfigBase):
    """tp_E × n_E + tp_P × n_P + tp_D × n_D GPUs: three pools of instances, each instance a
    TP group of its pool's degree (tp 1: one worker per GPU). The tp fields are declared by
    each config after its pool counts."""

    gpu_terms = (("tp_E", "n_E"), ("tp_P", "n_P"), ("tp_D", "n_D"))
    type_knobs = ("gpu_E", "gpu_P", "gpu_D")
    gpu_E: str | None = pool_gpu("encode pool")
    gpu_P: str | None = pool_gpu("remote prefill pool")
    gpu_D: str | None = pool_gpu("decode pool")

    @model_validator(mode="before")
    @classmethod
    def _unused_pool_tp(cls, data: Any) -> Any:
        # without a remote pool its TP degree and GPU type mean nothing: one value each (1,
        # null), so configs that differ only there are one config
        if isinstance(data, dict) and data.get("n_P") == 0 and (
                data.get("tp_P", 1) != 1 or data.get("gpu_P") is not None):
            data = {**data, "tp_P": 1, "gpu_P": None}
        return data


class EncodePrefillDecode(Architecture):
    pool_word = "workers"
    engine_mode = "disaggregated"
    simulator_class = "hastune.sim.epd:EPDSimulator"  # one simulator for the family
    simulator_reads_slo = False
    pool_names = ("E", "P", "D")

    def check_mixed(self, cfg: Any, path: str | Path | None) -> None:
        pass  # each pool on its type: the simulator takes each pool's profile

    # knobs: overridden per architecture
    def batch(self, cfg: Any) -> int:
        """The encode micro-batch bound."""
        raise NotImplementedError

    def remote_share(self, cfg: Any) -> float:
        """The share of prefills sent to the remote pool."""
        raise NotImplementedError

    def local_prefill(self, cfg: Any) -> bool:
        """Whether encode GPUs also prefill (some share stays local)."""
        return self.remote_share(cfg) < 1.0

    def describe(self, cfg: Any) -> str:
        tp = ("" if (cfg.tp_E, cfg.tp_P, cfg.tp_D) == (1, 1, 1) else
              f", tp {cfg.tp_E}/{cfg.tp_P}/{cfg.tp_D}")
        return f"{self.name} on {cfg.gpus} GPUs ({cfg.n_E} E + {cfg.n_P} P + {cfg.n_D} D{tp})"

    def pools(self, cfg: Any) -> list[tuple[str, int, int]]:
        """(pool letter, instances, tp) of each pool with instances."""
        return [(x, n, tp) for x, n, tp in (("E", cfg.n_E, cfg.tp_E), ("P", cfg.n_P, cfg.tp_P),
                                            ("D", cfg.n_D, cfg.tp_D)) if n > 0]

    def shapes(self, cfg: Any) -> list[Shape]:
        return []

    def check(self, ev: Evaluation, cfg: Any, path: str | Path | None) -> None:
        """Each pool's TP degree is one the profile has and stays inside a node; its weights
        leave room for KV; closed loop is refused (the family's simulator is open loop)."""
        for x, _, tp in self.pools(cfg):
            view = ev.pool_view(cfg, f"gpu_{x}")  # the pool's GPU type: its profile, nodes
            prof, cluster = view.profile, view.recipe.cluster
            if tp not in prof.tp_degrees:
                how = "the model does not fit one GPU: " if prof.tp > 1 and tp == 1 else ""
                raise InputError(path, f"tp_{x}", f"{how}the profile {prof.name} has no "
                                 f"tensor-parallel variant tp = {tp}",
                                 f"set tp_{x} to one of " + ", ".join(map(str, prof.tp_degrees))
                                 + " (tp_E, tp_P, tp_D size each pool's instances)")
            if tp > cluster.gpus_per_node:
                raise InputError(path, f"tp_{x}", f"tp_{x} = {tp} spans nodes (gpus_per_node "
                                 f"= {cluster.gpus_per_node}); TP groups stay inside a node",
                                 f"lower tp_{x}")
            if prof.for_tp(tp).memory.kv_capacity_tokens() <= 0:
                raise InputError(path, f"tp_{x}", f"the model's weights leave no room for KV "
                                 f"cache at tp = {tp}", f"raise tp_{x}")
        if ev.recipe.workload.arrival.process == "closed":
            raise InputError(ev.recipe.path, "workload.arrival.process",
                             f"closed-loop arrivals are not simulated for {self.name}",
                             "use poisson or gamma arrivals, or an architecture of full-model "
                             "replicas")

    def streams(self, cfg: Any) -> int:
        return int(cfg.n_D)

    def decode_units(self, cfg: Any) -> float:
        return float(cfg.n_D)

    def decode_timing(self, ev: Evaluation, cfg: Any) -> tuple[DecodeSpec, float]:
        prof = ev.pool_view(cfg, "gpu_D").profile.for_tp(cfg.tp_D)
        return prof.decode, prof.memory.kv_capacity_tokens()

    # -- pruning ---------------------------------------------------------------------------
    def memory_ok(self, b: Bounds, cfg: Any) -> bool:
        bE, bD = b.at_tp(cfg.tp_E), b.at_tp(cfg.tp_D)
        if bE is None or bD is None or (cfg.n_P and b.at_tp(cfg.tp_P) is None):
            return False  # a TP degree the profile lacks
        if bD.max_reserve > bD.kv_cap:
            return False  # some request can never be decoded
        return not (self.local_prefill(cfg) and not bE.local_fits)

    def prefill_paths(self, cfg: Any) -> list[int]:
        """The TP degrees prefills run at: local (tp_E) when s < 1, remote (tp_P) when s > 0."""
        s = self.remote_share(cfg)
        return sorted(({cfg.tp_E} if s < 1 else set()) | ({cfg.tp_P} if s > 0 else set()))

    def zero_load_ok(self, b: Bounds, cfg: Any) -> bool:
        """TTFT ≥ encode alone + prefill alone on the fastest prefill path the config uses;
        TPOT ≥ one decode step alone at tp_D."""
        paths = self.prefill_paths(cfg)
        key = ("pools", tuple(paths), cfg.tp_D)
        if paths == [cfg.tp_D] == [b.profile.tp]:
            return b.lb_ok_cached(key, b.ttft_lb, b.tpot_lb)

        def ttft() -> np.ndarray:
            lbs = [b.at_tp(t).ttft_lb for t in paths]  # type: ignore[union-attr]
            return lbs[0] if len(lbs) == 1 else np.minimum(*lbs)

        return b.lb_ok_cached(key, ttft, lambda: b.at_tp(cfg.tp_D).tpot_lb)  # type: ignore

    def stages(self, b: Bounds, cfg: Any) -> dict[str, float]:
        """Per pool, from the profile at that pool's TP degree: encode (compute, grows with
        the batch), prefill split by s between local (encode instances) and remote, decode
        (memory- and step-bound), network (the KV senders' ports; every GPU of a sending
        instance sends its shard over its own port)."""
        inf = float("inf")
        bE, bP, bD = b.at_tp(cfg.tp_E), b.at_tp(cfg.tp_P), b.at_tp(cfg.tp_D)
        enc_per_req = bE.mm_share * bE.profile.encode.fixed_s / self.batch(cfg) + bE.enc_work_var
        st = {"encode": cfg.n_E / enc_per_req if enc_per_req > 0 else inf}
        s = self.remote_share(cfg)
        remote = cfg.n_P / (s * bP.prefill_work) if s > 0 else inf
        local = cfg.n_E / ((1 - s) * bE.prefill_work) if s < 1 else inf
        st["prefill"] = min(remote, local)
        st["decode"] = cfg.n_D * min(bD.decode_per_gpu, bD.decode_kv_per_gpu)
        if cfg.tp_E == cfg.tp_P == 1 or b.kv_bytes <= 0:  # as one pool of whole-GPU senders
            senders = cfg.n_P + (cfg.n_E if s < 1 else 0)
            st["network"] = senders * b.port_bw / b.kv_bytes if b.kv_bytes > 0 else inf
        else:
            st["network"] = ((cfg.n_P * bP.port_bw / bP.kv_bytes if s > 0 else 0.0)
                             + (cfg.n_E * bE.port_bw / bE.kv_bytes if s < 1 else 0.0))
        return st

    def batch_knobs(self) -> tuple[str, ...]:
        """Knobs of the encode batcher (they change nothing without multimodal requests)."""
        return ()

    def equivalent_key(self, b: Bounds, cfg: Any) -> tuple | None:
        if b.mm_share > 0.0:
            return None
        knobs = cfg.model_dump(exclude={"kind", "name", *self.batch_knobs()})
        return tuple(sorted(knobs.items()))

    # -- real engines ----------------------------------------------------------------------
    def role_pools(self, cfg: Any) -> list[Pool]:
        return [Pool("encode", cfg.n_E, cfg.tp_E), Pool("prefill", cfg.n_P, cfg.tp_P),
                Pool("decode", cfg.n_D, cfg.tp_D)]

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """Encode servers in front of P/D, at most B concurrent requests on each encoder."""
        return Deployment(Topology.EPD, self.role_pools(cfg), encode_batch=self.batch(cfg))

    # -- the engine ------------------------------------------------------------------------
    def engine_check(self, cfg: Any, path: Any = None) -> None:
        super().engine_check(cfg, path)
        for x, _, tp in self.pools(cfg):
            if tp != 1:
                raise InputError(path, f"tp_{x}", f"the engine runs every {self.name} worker as "
                                 f"one process on one device and cannot split a model "
                                 f"(tp_{x} = {tp})", f"set tp_{x}: 1, or evaluate TP pools "
                                 "with the simulator (--evaluator sim)")

    def engine_workers(self, cfg: Any) -> list[tuple[str, str]]:
        return ([(f"E{i}", "encode") for i in range(cfg.n_E)]
                + [(f"P{i}", "prefill") for i in range(cfg.n_P)]
                + [(f"D{i}", "decode") for i in range(cfg.n_D)])
