"""Deployment configurations: an architecture and its knobs, as YAML files.

A config is what `hastune tune` writes as best_config.yaml, what `hastune evaluate --config`
takes, and what the engine in runners/ runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from hastune.errors import InputError, from_pydantic
from hastune.yamlio import read_yaml_mapping


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["deployment"] = "deployment"
    name: str | None = None

    @property
    def gpus(self) -> int:
        raise NotImplementedError


class EPDConfig(_Base):
    """EAServe: n_E encode GPUs (each with a local prefill worker), n_P remote prefill GPUs,
    n_D decode GPUs; encode micro-batch bound B; remote-prefill share s; batch fill target p."""

    architecture: Literal["epd"]
    n_E: int = Field(ge=1, description="encode GPUs (each also runs a local prefill)")
    n_P: int = Field(ge=0, description="remote prefill GPUs")
    n_D: int = Field(ge=1, description="decode GPUs")
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

    @property
    def gpus(self) -> int:
        return self.n_E + self.n_P + self.n_D


class EPDStaticConfig(_Base):
    """Dynamo-like baseline: dedicated E, P and D pools, every prefill remote (s = 1), encode
    batches leave when full or `timeout_ms` after their first request, no SM sharing."""

    architecture: Literal["epd-static"]
    n_E: int = Field(ge=1)
    n_P: int = Field(ge=1)
    n_D: int = Field(ge=1)
    batch: int = Field(default=4, ge=1, le=256)
    timeout_ms: float = Field(default=20.0, ge=0.0)

    @property
    def gpus(self) -> int:
        return self.n_E + self.n_P + self.n_D


class _Parallel(BaseModel):
    """TP × PP of one full model replica; its GPUs sit next to each other (a TP group never
    spans nodes: the profiles' TP latencies assume an intra-node all-reduce)."""

    tp: int = Field(ge=1, le=64, description="tensor-parallel degree of one instance")
    pp: int = Field(default=1, ge=1, le=16, description="pipeline stages of one instance")

    @property
    def instance_gpus(self) -> int:
        return self.tp * self.pp


class PaDGConfig(_Base, _Parallel):
    """EcoServe (partially disaggregated): `instances` full replicas of tp × pp GPUs, each
    alternating prefill windows and decode windows; macro-instances of at most `n_upper`
    instances admit requests (three checks) and activate their instances in rolling order.
    `slack` chooses the statistic of saved TPOT that check (2) uses: the paper's `mean`, or
    the stricter `min` / `quantile` (the `slack_quantile` lowest). With `mitosis`, instances
    are added on TTFT pressure and drained on high slack, between `n_lower` and `n_upper` per
    macro-instance, splitting past `n_upper`; `max_instances` bounds the GPUs it may take."""

    architecture: Literal["padg"]
    instances: int = Field(ge=1, le=1024, description="instances in service (at start)")
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


class NoDGConfig(_Base, _Parallel):
    """vLLM-like replicas (tp × pp GPUs each): prefill and decode on the same instance with
    continuous batching. `chunk_tokens` is the Sarathi-style token budget of one iteration
    (decode tokens count one each, prefill chunks fill the rest); null runs vLLM's default of
    separate prefill-only iterations that pause decoding. Encoders run inline."""

    architecture: Literal["nodg"]
    replicas: int = Field(ge=1, le=1024)
    chunk_tokens: int | None = Field(default=512, ge=64, le=65536,
                                     description="token budget per iteration (null: no chunking)")

    @property
    def gpus(self) -> int:
        return self.instance_gpus * self.replicas


class FuDGConfig(_Base):
    """DistServe/Mooncake-like: a prefill pool and a decode pool of full-model instances, each
    pool with its own parallelism; the KV cache crosses the cluster's links after prefill.
    `interleaved` placement spreads both pools over every node and prefers a decode instance on
    the prefill's node; `grouped` puts the prefill pool first, then the decode pool."""

    architecture: Literal["fudg"]
    prefill_instances: int = Field(ge=1, le=1024)
    prefill_tp: int = Field(default=1, ge=1, le=64)
    prefill_pp: int = Field(default=1, ge=1, le=16)
    decode_instances: int = Field(ge=1, le=1024)
    decode_tp: int = Field(default=1, ge=1, le=64)
    decode_pp: int = Field(default=1, ge=1, le=16)
    placement: Literal["interleaved", "grouped"] = "interleaved"

    @property
    def gpus(self) -> int:
        return (self.prefill_instances * self.prefill_tp * self.prefill_pp
                + self.decode_instances * self.decode_tp * self.decode_pp)


AnyConfig = Union[EPDConfig, EPDStaticConfig, PaDGConfig, NoDGConfig, FuDGConfig]
DeploymentConfig = Annotated[AnyConfig, Field(discriminator="architecture")]
_ADAPTER: TypeAdapter[AnyConfig] = TypeAdapter(DeploymentConfig)
ARCHITECTURES = ("epd", "epd-static", "padg", "nodg", "fudg")
EPD_FAMILY = ("epd", "epd-static")


def parse_config(data: dict, file: str | Path | None = None) -> AnyConfig:
    if "architecture" not in data:
        raise InputError(file, "architecture", "missing",
                         f"add architecture: one of {', '.join(ARCHITECTURES)}")
    if data["architecture"] not in ARCHITECTURES:
        raise InputError(file, "architecture", f"unknown architecture {data['architecture']!r}",
                         f"use one of {', '.join(ARCHITECTURES)}")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = from_pydantic(file, exc)
        # drop pydantic's union tag ('epd.n_E' → 'n_E')
        if err.field and err.field.split(".")[0] in ARCHITECTURES:
            err = InputError(file, err.field.split(".", 1)[-1] if "." in err.field else None,
                             err.problem, err.fix)
        raise err from None


def load_config(path: str | Path) -> AnyConfig:
    return parse_config(read_yaml_mapping(path, "deployment config"), path)


def config_dict(cfg: AnyConfig) -> dict:
    """A configuration's knobs as plain data, every field included: `null` is a value
    (nodg's chunk_tokens: no chunking; epd's max_gap_ms: uncapped), so it is never dropped
    and `parse_config(config_dict(c)) == c`."""
    return cfg.model_dump(exclude={"kind", "name"})


def dump_config(cfg: AnyConfig) -> dict:
    """What a config file holds (kind and architecture first); parses back to `cfg`."""
    d = cfg.model_dump(exclude={"name"} if cfg.name is None else set())
    return {"kind": d.pop("kind"), "architecture": d.pop("architecture"), **d}
