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


DeploymentConfig = Annotated[Union[EPDConfig, EPDStaticConfig], Field(discriminator="architecture")]
_ADAPTER: TypeAdapter[EPDConfig | EPDStaticConfig] = TypeAdapter(DeploymentConfig)
ARCHITECTURES = ("epd", "epd-static")


def parse_config(data: dict, file: str | Path | None = None) -> EPDConfig | EPDStaticConfig:
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


def load_config(path: str | Path) -> EPDConfig | EPDStaticConfig:
    return parse_config(read_yaml_mapping(path, "deployment config"), path)


def dump_config(cfg: EPDConfig | EPDStaticConfig) -> dict:
    d = cfg.model_dump(exclude_none=True)
    return {"kind": d.pop("kind"), "architecture": d.pop("architecture"), **d}
