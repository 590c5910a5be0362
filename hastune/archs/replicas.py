"""What the architectures of full-model replicas share: instances of tp × pp GPUs that prefill
and decode (each kind of instance sized by its own tp/pp fields)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hastune.archs.base import Architecture
from hastune.archs.deploy import Deployment, Pool, Topology

if TYPE_CHECKING:
    from hastune.prune import Bounds


class Colocated(Architecture):
    """Replicas that both prefill and decode, `count_field` of them."""

    count_field: str = "instances"
    ep_knobs = ("expert_parallel",)

    def units(self, cfg: Any) -> int:
        return int(getattr(cfg, self.count_field))

    def streams(self, cfg: Any) -> int:
        return self.units(cfg)

    def decode_units(self, cfg: Any) -> float:
        return 0.5 * self.units(cfg)  # a replica that also prefills decodes about half the time

    def describe(self, cfg: Any) -> str:
        ep = ", expert-parallel" if cfg.expert_parallel else ""
        return (f"{self.name} on {cfg.gpus} GPUs ({self.units(cfg)} {self.pool_word} of "
                f"tp {cfg.tp} × pp {cfg.pp}{ep})")

    def stages(self, b: Bounds, cfg: Any) -> dict[str, float]:
        """An instance that prefills and decodes spends per request at least its prefill work
        without fixed costs (pipelined over pp stages) plus its decode tokens at the best
        per-token time any batch that fits can reach; KV-seconds bound it too (Little's
        law)."""
        inf = float("inf")
        sh = b.shapes(cfg)[0]
        n = self.units(cfg)
        work = sh.prefill_s + sh.decode_s
        return {"encode": inf,
                "prefill": n / sh.prefill_s if sh.prefill_s > 0 else inf,
                "decode": n * min(1 / sh.decode_s if sh.decode_s > 0 else inf, sh.kv_rate),
                "network": inf,  # no KV leaves an instance
                "instances": n / work if work > 0 else inf}  # prefill and decode share it

    def role_pools(self, cfg: Any) -> list[Pool]:
        return [Pool("replica", self.units(cfg), cfg.tp, cfg.pp, cfg.expert_parallel)]

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """Replicas behind a router; a `chunk_tokens` knob is the engine's token budget
        (null: chunked prefill off), a config without one runs the engine's default."""
        if "chunk_tokens" not in type(cfg).model_fields:
            return Deployment(Topology.AGGREGATED, self.role_pools(cfg))
        return Deployment(Topology.AGGREGATED, self.role_pools(cfg),
                          chunk_tokens=cfg.chunk_tokens, chunked=cfg.chunk_tokens is not None)

    def engine_check(self, cfg: Any, path: Any = None) -> None:
        from hastune.errors import InputError

        super().engine_check(cfg, path)
        if cfg.expert_parallel:
            raise InputError(path, "expert_parallel", f"the engine runs each {self.name} "
                             "replica as one worker process on one device and has no expert "
                             "parallelism", "set expert_parallel: false, or evaluate it with "
                             "the simulator (--evaluator sim)")
        for f in ("tp", "pp"):
            v = getattr(cfg, f)
            if v != 1:
                raise InputError(path, f, f"the engine runs each {self.name} replica as one "
                                 f"worker process on one device and cannot split a model "
                                 f"({f} = {v})", f"set {f}: 1, or evaluate {f} > 1 with the "
                                 "simulator (--evaluator sim)")

    def engine_workers(self, cfg: Any) -> list[tuple[str, str]]:
        letter = self.pool_word[0].upper()
        return [(f"{letter}{i}", "replica") for i in range(self.units(cfg))]
