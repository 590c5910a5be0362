"""What the encode / prefill / decode architectures share (EAServe and its static baseline).

One worker per GPU in three pools: n_E encode GPUs (with EAServe, each also runs a local
prefill), n_P remote prefill GPUs, n_D decode GPUs; the LLM runs whole on one GPU (the
profile's tp must be 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hastune.archs.base import Architecture, ConfigBase, Shape
from hastune.errors import InputError

if TYPE_CHECKING:
    from hastune.evaluate import Evaluation
    from hastune.profile import DecodeSpec, Profile
    from hastune.prune import Bounds


class PoolsConfig(ConfigBase):
    """n_E + n_P + n_D GPUs, one worker each."""

    gpu_terms = (("n_E",), ("n_P",), ("n_D",))


class EncodePrefillDecode(Architecture):
    pool_word = "workers"
    engine_mode = "disaggregated"
    simulator_class = "hastune.sim.epd:EPDSimulator"  # one simulator for the family

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

    def simulator(self, profile: Any, cluster: Any, config: Any, warmup: float,
                  slo: Any) -> Any:
        from hastune.sim.epd import EPDSimulator

        return EPDSimulator(profile, cluster, config, warmup=warmup)  # reads no SLO

    def describe(self, cfg: Any) -> str:
        return f"{self.name} on {cfg.gpus} GPUs ({cfg.n_E} E + {cfg.n_P} P + {cfg.n_D} D)"

    def shapes(self, cfg: Any) -> list[Shape]:
        return []

    def check_profile(self, profile: Profile) -> None:
        if profile.tp != 1:
            raise InputError(profile.path, "tp",
                             f"the profile describes a tensor-parallel group of {profile.tp} "
                             f"GPUs, but {self.name} workers run on one GPU each",
                             "use a GPU whose memory holds the model (a profile with tp: 1), "
                             "e.g. a 80 GB or 141 GB card, or an architecture that runs TP "
                             "groups")

    def check(self, ev: Evaluation, cfg: Any, path: str | Path | None) -> None:
        self.check_profile(ev.profile)
        if ev.recipe.workload.arrival.process == "closed":
            raise InputError(ev.recipe.path, "workload.arrival.process",
                             f"closed-loop arrivals are not simulated for {self.name}",
                             "use poisson or gamma arrivals, or an architecture of full-model "
                             "replicas")

    def decode_units(self, cfg: Any) -> float:
        return float(cfg.n_D)

    def decode_timing(self, ev: Evaluation, cfg: Any) -> tuple[DecodeSpec, float]:
        return ev.profile.decode, ev.profile.memory.kv_capacity_tokens()

    # -- pruning ---------------------------------------------------------------------------
    def memory_ok(self, b: Bounds, cfg: Any) -> bool:
        if b.max_reserve > b.kv_cap:
            return False  # some request can never be decoded
        return not (self.local_prefill(cfg) and not b.local_fits)

    def zero_load_ok(self, b: Bounds, cfg: Any) -> bool:
        return b.zero_load_whole_gpu

    def stages(self, b: Bounds, cfg: Any) -> dict[str, float]:
        inf = float("inf")
        enc_per_req = b.mm_share * b.profile.encode.fixed_s / self.batch(cfg) + b.enc_work_var
        st = {"encode": cfg.n_E / enc_per_req if enc_per_req > 0 else inf}
        s = self.remote_share(cfg)
        w = b.prefill_work
        remote = cfg.n_P / (s * w) if s > 0 else inf
        local = cfg.n_E / ((1 - s) * w) if s < 1 else inf
        st["prefill"] = min(remote, local)
        st["decode"] = cfg.n_D * min(b.decode_per_gpu, b.decode_kv_per_gpu)
        senders = cfg.n_P + (cfg.n_E if s < 1 else 0)
        st["network"] = senders * b.port_bw / b.kv_bytes if b.kv_bytes > 0 else inf
        return st

    def batch_knobs(self) -> tuple[str, ...]:
        """Knobs of the encode batcher (they change nothing without multimodal requests)."""
        return ()

    def equivalent_key(self, b: Bounds, cfg: Any) -> tuple | None:
        if b.mm_share > 0.0:
            return None
        from hastune.space import config_key

        return tuple((k, v) for k, v in config_key(cfg) if k not in self.batch_knobs())

    # -- the engine ------------------------------------------------------------------------
    def engine_workers(self, cfg: Any) -> list[tuple[str, str]]:
        return ([(f"E{i}", "encode") for i in range(cfg.n_E)]
                + [(f"P{i}", "prefill") for i in range(cfg.n_P)]
                + [(f"D{i}", "decode") for i in range(cfg.n_D)])
