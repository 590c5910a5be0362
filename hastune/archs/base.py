"""What every architecture module provides, and the defaults most share.

An architecture module (hastune/archs/<name>.py) holds its config model and an `Architecture`
subclass that names everything else about it: its GPU accounting, its simulator, the checks and
bounds pruning uses, how the engine in runners/ runs it (or why it cannot), and how it is shown.
The registry (hastune/archs/__init__.py) lists the modules; config parsing, recipes, search
spaces, pruning, evaluation, the engine and the CLI read it instead of naming architectures.

The defaults here are those of replica-based architectures (full-model instances of tp × pp
GPUs); the encode/prefill/decode family overrides them (hastune/archs/epd_family.py).

The registry is part of hastune's input model (recipes and configs are validated against it),
so it imports nothing above that: simulators are named as "module:Class" strings, and the
rules that need timing or bounds receive the objects that hold them (an Evaluation, pruning's
Bounds) instead of importing their modules.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer

from hastune.archs.deploy import Deployment, Pool, Topology
from hastune.errors import InputError
from hastune.schema import drop_new_defaults

if TYPE_CHECKING:  # the layers above; imported where used
    from hastune.cluster import Cluster
    from hastune.evaluators.sim import Evaluation
    from hastune.profile import DecodeSpec, Profile
    from hastune.prune import Bounds
    from hastune.sim import Simulator


class ConfigBase(BaseModel):
    """A deployment config: `architecture` (the discriminator) and its knobs. Its GPU count is
    a sum of products of knobs, one term per pool (`gpu_terms`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN / ±inf
    kind: Literal["deployment"] = "deployment"
    name: str | None = None
    gpu_terms: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # the knob naming each pool's GPU type (one per GPU term, in its order): an inventory
    # entry's gpu, or null for the cluster's first type (hastune.cluster)
    type_knobs: ClassVar[tuple[str, ...]] = ()
    # knobs added since the architecture's first release, left out of a dump while at their
    # default: a config that does not use them dumps, keys and hashes as before
    since: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler: Any) -> Any:
        return drop_new_defaults(self, handler(self), self.since)

    @property
    def gpus(self) -> int:
        total = 0
        for term in self.gpu_terms:
            prod = 1
            for k in term:
                prod *= int(getattr(self, k))
            total += prod
        return total

    def pool_gpus(self, default: str) -> list[tuple[str, int]]:
        """(GPU type, GPUs) of each pool, in the order of `gpu_terms` (the order a simulator
        lays its GPUs out in); a type left null is `default`, the cluster's first."""
        out = []
        for i, term in enumerate(self.gpu_terms):
            prod = 1
            for k in term:
                prod *= int(getattr(self, k))
            t = getattr(self, self.type_knobs[i]) if self.type_knobs else None
            out.append((t or default, prod))
        return out

    def gpus_by_type(self, default: str) -> dict[str, int]:
        """GPUs per GPU type (a pool without GPUs counts for none)."""
        out: dict[str, int] = {}
        for t, n in self.pool_gpus(default):
            if n:
                out[t] = out.get(t, 0) + n
        return out

    @property
    def largest_gpu_knob(self) -> str | None:
        """The knob with the largest value in the pool of most GPUs: what a config over a
        GPU budget names as its field."""
        best: tuple[int, str] | None = None
        for term in self.gpu_terms:
            prod = 1
            for k in term:
                prod *= int(getattr(self, k))
            if best is None or prod > best[0]:
                best = (prod, max(term, key=lambda k: int(getattr(self, k))))
        return best[1] if best else None


class Parallel(BaseModel):
    """TP × PP of one full model replica; its GPUs sit next to each other (a TP group never
    spans nodes: the profiles' TP latencies assume an intra-node all-reduce). With
    `expert_parallel` (MoE models) each GPU of the TP group holds whole experts (ep = tp,
    vLLM's --enable-expert-parallel) instead of a 1/tp slice of every expert."""

    tp: int = Field(ge=1, le=64, description="tensor-parallel degree of one instance")
    pp: int = Field(default=1, ge=1, le=16, description="pipeline stages of one instance")
    expert_parallel: bool = Field(
        default=False, description="MoE: whole experts spread over the TP group (ep = tp)")

    @field_validator("expert_parallel")
    @classmethod
    def _ep_needs_tp(cls, v: bool, info: ValidationInfo) -> bool:
        return ep_needs_tp(v, info, "")

    @property
    def ep(self) -> int:
        """Expert-parallel degree: tp with `expert_parallel`, else 1 (experts TP-split)."""
        return self.tp if self.expert_parallel else 1

    @property
    def instance_gpus(self) -> int:
        return self.tp * self.pp


def pool_gpu(pool: str) -> Any:
    """The field of one pool's GPU type: an entry of the cluster's inventory, or null for its
    first type (a cluster of one type: always null)."""
    return Field(default=None, min_length=1, max_length=100, description=f"GPU type of the "
                 f"{pool} (an entry of cluster.inventory; null: the first type of the cluster)")


def ep_needs_tp(on: bool, info: ValidationInfo, prefix: str) -> bool:
    """A `<prefix>expert_parallel` field validator (declared after `<prefix>tp`): expert
    parallelism over a TP group of one GPU is no expert parallelism, so it is refused (a
    search space then lists each deployment once)."""
    tp = info.data.get(f"{prefix}tp", 1)  # absent: tp itself was refused
    if on and isinstance(tp, int) and tp < 2:
        raise ValueError(f"expert parallelism spreads whole experts over the TP group, and "
                         f"{prefix}tp = {tp}. Fix: set {prefix}tp ≥ 2 or "
                         f"{prefix}expert_parallel: false")
    return on


@dataclass(frozen=True)
class Shape:
    """One kind of model instance a config runs: the prefix of its fields (`prefill_tp`: the
    prefix is 'prefill_'), its tp × pp, whether it holds the encoder's weights (it encodes
    multimodal requests inline), and its expert-parallel degree."""

    prefix: str
    tp: int
    pp: int
    encoder: bool = True
    ep: int = 1  # expert-parallel degree (1: experts split over the TP group; else tp)


def check_ep(profile: Profile, sh: Shape, path: str | Path | None) -> None:
    """Refuse expert parallelism the profile has no sections for, naming the field: a dense
    model's profile (none at all), or a MoE profile without that TP degree's."""
    if sh.ep == 1:
        return
    field = f"{sh.prefix}expert_parallel"
    if not profile.ep_variants:
        raise InputError(path, field, f"the profile {profile.name} ({profile.model}) has no "
                         "expert-parallel sections: expert parallelism needs a mixture-of-"
                         "experts model", f"set {field}: false (or remove it)")
    if sh.ep not in profile.ep_degrees(sh.tp):
        have = [t for t in profile.tp_degrees if len(profile.ep_degrees(t)) > 1]
        raise InputError(path, field, f"the profile {profile.name} has no expert-parallel "
                         f"variant at {sh.prefix}tp = {sh.tp} (ep = tp)",
                         f"use {sh.prefix}tp " + ", ".join(map(str, have))
                         + f" with {field}, or set {field}: false")


class Architecture:
    """Everything about one architecture that code outside its module needs."""

    name: ClassVar[str]
    config: ClassVar[type[ConfigBase]]
    summary: ClassVar[str]                 # one line, for help and docs
    simulator_class: ClassVar[str]         # "module:Class", imported on first use
    simulator_reads_slo: ClassVar[bool] = True  # its simulator takes the SLOs (`slo=`)
    # the engine mode that runs it (runners/engine: "disaggregated" or "replica"), or None
    engine_mode: ClassVar[str | None] = None
    not_runnable: ClassVar[str] = ""       # why the engine cannot run it (engine_mode None)
    pool_word: ClassVar[str] = "instances"  # what its units are called ("replicas", …)
    # its expert-parallel switches (bool knobs, MoE models only: see `check`); a search space
    # keeps only their false value for a profile without expert-parallel sections
    ep_knobs: ClassVar[tuple[str, ...]] = ()
    # engine terms (hastune.engine_terms): whether they were fitted and checked on measured
    # runs of this architecture, which of the terms only some simulators run ("batch_wait":
    # TensorRT-LLM's batch waiting; "token_frontend": SGLang's front-end cost per output
    # token) its simulator runs, and the knob that, left out of a config, takes the engine
    # scheduler's chunked-prefill budget
    terms_checked: ClassVar[bool] = False
    terms_simulated: ClassVar[frozenset[str]] = frozenset()
    engine_chunk_knob: ClassVar[str | None] = None

    # -- GPU accounting -------------------------------------------------------------------
    @property
    def gpu_terms(self) -> tuple[tuple[str, ...], ...]:
        return self.config.gpu_terms

    @property
    def gpu_knobs(self) -> tuple[str, ...]:
        """The GPU knobs in order; with `budget: exact` the last is derived from the others."""
        return tuple(k for term in self.gpu_terms for k in term)

    @property
    def count_knobs(self) -> tuple[str, ...]:
        """The knobs that count its instances, one per pool ("replicas"; "n_E", "n_P",
        "n_D"): each GPU term's last knob."""
        return tuple(term[-1] for term in self.gpu_terms)

    @property
    def gpu_formula(self) -> str:
        """How the GPU count is made, for messages: 'n_E + n_P + n_D', 'tp × pp × replicas'."""
        return " + ".join(" × ".join(t) for t in self.gpu_terms)

    def describe(self, cfg: Any) -> str:
        """The deployment in a few words, for one-line views."""
        return f"{self.name} on {cfg.gpus} GPUs"

    # -- simulation -----------------------------------------------------------------------
    def simulator(self, profile: Profile, cluster: Cluster, config: Any, warmup: float,
                  slo: Any, **mixed: Any) -> Simulator:
        """`mixed` (pools on several GPU types, only where `pool_names` has several pools):
        `pools`, each pool's profile by its name, and `layout` (Cluster.node_layout)."""
        module, name = self.simulator_class.split(":")
        cls = getattr(importlib.import_module(module), name)  # named, not imported: layers
        if self.simulator_reads_slo:
            return cls(profile, cluster, config, warmup=warmup, slo=slo, **mixed)
        return cls(profile, cluster, config, warmup=warmup, **mixed)

    # the name the simulator knows each pool by, one per GPU term (pools on several GPU
    # types: its `pools` argument); empty: one pool, always on one type
    pool_names: ClassVar[tuple[str, ...]] = ()

    def check_mixed(self, cfg: Any, path: str | Path | None) -> None:
        """Refuse a config whose pools sit on several GPU types where this architecture
        cannot run them so (named by field)."""
        if not self.pool_names:
            raise InputError(path, self.config.type_knobs[0], f"{self.name} runs one pool",
                             "give it one GPU type")

    def shapes(self, cfg: Any) -> list[Shape]:
        """The kinds of model instance `cfg` runs."""
        return [Shape("", cfg.tp, cfg.pp, ep=cfg.ep)]

    def check(self, ev: Evaluation, cfg: Any, path: str | Path | None) -> None:
        """Refuse a config the recipe cannot run (beyond the GPU budget), naming the field:
        every instance's TP degree must be in the profile and inside a node, its expert
        parallelism in the profile (a MoE model's), and its weights must leave room for KV
        cache."""
        for sh in self.shapes(cfg):
            ev = ev.pool_view(cfg, f"{sh.prefix}gpu")  # the pool's GPU type: profile, nodes
            cluster = ev.recipe.cluster
            if sh.tp not in ev.profile.tp_degrees:
                raise InputError(path, f"{sh.prefix}tp",
                                 f"the profile {ev.profile.name} has no tensor-parallel "
                                 f"variant tp = {sh.tp}",
                                 "use one of tp " + ", ".join(map(str, ev.profile.tp_degrees)))
            if sh.tp > cluster.gpus_per_node:
                raise InputError(path, f"{sh.prefix}tp",
                                 f"tp = {sh.tp} spans nodes (gpus_per_node = "
                                 f"{cluster.gpus_per_node}); TP groups stay inside a node",
                                 "lower tp and use pp for more GPUs per instance")
            check_ep(ev.profile, sh, path)
            if ev.instance_timing(sh.tp, sh.pp, ep=sh.ep).kv_cap_text <= 0:
                raise InputError(path, f"{sh.prefix}pp",
                                 f"the model's weights leave no room for KV cache at "
                                 f"tp = {sh.tp}, pp = {sh.pp}", "raise tp or pp")

    def streams(self, cfg: Any) -> int:
        """The instances that stream output tokens to clients, an API server each (what its
        simulator gives EventLoop as `streams`; tests/sim/test_serial_frontend.py)."""
        raise NotImplementedError

    def decode_units(self, cfg: Any) -> float:
        """How many whole decode instances the config has (a replica that also prefills counts
        about half): scales the goodput search's first guess."""
        raise NotImplementedError

    def decode_timing(self, ev: Evaluation, cfg: Any) -> tuple[DecodeSpec, float]:
        """The decode step form and KV capacity (tokens) of one decode instance."""
        sh = self.shapes(cfg)[-1]
        tm = ev.pool_view(cfg, f"{sh.prefix}gpu").instance_timing(sh.tp, sh.pp, ep=sh.ep)
        return tm.decode, tm.kv_cap_text

    # -- pruning (hastune.prune) ----------------------------------------------------------
    def memory_ok(self, b: Bounds, cfg: Any) -> bool:
        """Every instance holds its weights and the largest request's KV."""
        for sh in b.shapes(cfg):
            if sh is None or sh.max_reserve > sh.kv_cap:
                return False
        return True

    def zero_load_ok(self, b: Bounds, cfg: Any) -> bool:
        """Whether the requests' zero-load latency bounds meet the SLOs at its parallelism."""
        shapes = b.shapes(cfg)
        if any(sh is None for sh in shapes):
            return False
        return b.lb_ok(shapes[0].ttft_lb, shapes[0].tpot_lb)  # type: ignore[union-attr]

    def stages(self, b: Bounds, cfg: Any) -> dict[str, float]:
        """Upper bounds on sustainable throughput (req/s) per stage; the bound is the least.
        Every architecture reports encode, prefill, decode and network (∞ where it has none),
        so tables read the same."""
        raise NotImplementedError

    def equivalent_key(self, b: Bounds, cfg: Any) -> tuple | None:
        """A key shared by configs that behave the same on this workload (all but one go), or
        None."""
        return None

    # -- real engines (hastune.export) ----------------------------------------------------
    def target_knobs(self, target: str | None) -> dict[str, list[Any]]:
        """Knobs (and their values) a search for `target` adds where its space does not list
        them: what lets that engine run more of this architecture (none by default)."""
        return {}

    def role_pools(self, cfg: Any) -> list[Pool]:
        """Its pools by role (empty ones too), as a deployment file names them."""
        raise NotImplementedError

    def deployment(self, cfg: Any, gpus_per_node: int, closest: bool = False) -> Deployment:
        """`cfg` on the engines people run (hastune/archs/deploy.py); with `closest`, the
        nearest expressible deployment where `cfg` itself is not."""
        return Deployment(Topology.AGGREGATED, [],
                          blocking=[f"architecture {self.name} has no export"])

    # -- the engine (runners/engine) ------------------------------------------------------
    def engine_check(self, cfg: Any, path: Any = None) -> None:
        """InputError (naming the field and the fix) for a config the engine cannot run."""
        if self.engine_mode is None:
            raise InputError(path, "architecture", f"the engine does not run {self.name}: "
                             f"{self.not_runnable}",
                             "evaluate it with the simulator (--evaluator sim)")

    def engine_workers(self, cfg: Any) -> list[tuple[str, str]]:
        """(name, role) of the engine's workers for `cfg`, in start order."""
        raise NotImplementedError
