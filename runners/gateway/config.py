"""The gateway's config file (gateway.yaml): which engine, which servers in which role, and the
EAServe knobs the runtime applies (B, s, the batcher's p and gap cap), admission limits and
timeouts. Read with hastune's safe YAML reader, validated with pydantic; a bad value is an
InputError naming the file, the field and the fix.

    engine: vllm                     # vllm | sglang: which hand-off the servers speak
    model: Qwen/Qwen2.5-VL-7B-Instruct
    listen: {host: 127.0.0.1, port: 8000}
    encode:                          # one entry per encode GPU ($NODE_ADDR_<k>: from the
                                     # environment, as `hastune export` writes them)
      - url: http://127.0.0.1:8100
        prefill: http://127.0.0.1:8110   # its co-resident (local) prefill server, or null
    prefill:                         # the remote prefill pool
      - http://127.0.0.1:8200        # SGLang: {url: …, bootstrap_port: 8998}
    decode: [http://127.0.0.1:8300]
    B: 4
    s: 0.5
    batcher: {p: 0.6, max_gap_ms: 50, rate_hint: 1.0}   # or {timeout_ms: 20} (epd-static)
    admission: {max_inflight: 256, ttft_slo_s: null}
    timeouts: {connect_s: 10, request_s: 600}
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hastune.errors import InputError, from_pydantic
from hastune.yamlio import read_yaml_mapping


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


NODE_ADDR = re.compile(r"\$(?:\{(NODE_ADDR_[0-9]+)\}|(NODE_ADDR_[0-9]+)(?![A-Za-z0-9_]))")


def _nodes(url: str) -> str:
    """A URL with the nodes' addresses filled in: `hastune export` writes them as
    $NODE_ADDR_<k>, set by its scripts (and read from this process's environment)."""
    def addr(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        value = os.environ.get(name)
        if not value:
            raise ValueError(f"{url!r} names ${name}, which is not set. Fix: export {name}="
                             "the address of that node (launch.sh and router.sh set it)")
        return value
    return NODE_ADDR.sub(addr, url)


def _check_url(url: str) -> str:
    url = _nodes(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host. "
                         "Fix: write it as http://HOST:PORT")
    return url.rstrip("/")


class _Url(_Strict):
    """A server given by its base URL (no /v1), or written as that URL alone."""

    url: str

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else data

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return _check_url(v)


class Server(_Url):
    """A server of one role: its base URL, and for an SGLang prefill server the port of its
    disaggregation bootstrap server (--disaggregation-bootstrap-port)."""

    bootstrap_port: int | None = Field(default=None, ge=1, le=65535)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""


class EncodeServer(_Url):
    """An encode server and the prefill server that shares its GPU (EAServe's local
    prefill), or null where it has none (its prefills all go to the remote pool)."""

    prefill: Server | None = None


class Listen(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)


class BatcherKnobs(_Strict):
    """The Poisson-gap micro-batcher's knobs (hastune.policies.batcher.PoissonGapBatcher)."""

    p: float = Field(default=0.6, gt=0.0, lt=1.0, description="target batch fill probability")
    max_gap_ms: float | None = Field(default=50.0, gt=0.0,
                                     description="cap on the gap g (null: the paper's uncapped g)")
    rate_hint: float = Field(default=1.0, gt=0.0,
                             description="multimodal requests/s to the whole encode pool, "
                                         "before λ is estimated online")
    timeout_ms: float | None = Field(
        default=None, ge=0.0, description="the static baseline's batcher instead (epd-static, "
        "hastune.policies.batcher.TimeoutBatcher): a batch leaves at B requests or this long "
        "after its first; p, max_gap_ms and rate_hint are then not used, and s must be 1")


class AdmissionKnobs(_Strict):
    """max_inflight: admitted requests not yet finished, beyond which an arrival is shed (429);
    ttft_slo_s: with it, the bundled engine's admission gate (runners/engine/admission.py)
    sheds an arrival whose predicted TTFT tail passes the SLO (503)."""

    max_inflight: int = Field(default=1024, ge=1)
    ttft_slo_s: float | None = Field(default=None, gt=0.0)
    margin: float = Field(default=2.0, gt=0.0)
    prior: int = Field(default=4, ge=1)


class Timeouts(_Strict):
    connect_s: float = Field(default=10.0, gt=0.0)
    request_s: float = Field(default=600.0, gt=0.0)


class GatewayConfig(_Strict):
    engine: Literal["vllm", "sglang"]
    model: str = Field(min_length=1)
    listen: Listen = Listen()
    encode: list[EncodeServer] = Field(min_length=1)
    prefill: list[Server] = Field(default_factory=list)
    decode: list[Server] = Field(min_length=1)
    B: int = Field(ge=1, le=256, description="encode micro-batch bound")
    s: float = Field(ge=0.0, le=1.0, description="share of prefills sent to the remote pool")
    batcher: BatcherKnobs = BatcherKnobs()
    admission: AdmissionKnobs = AdmissionKnobs()
    timeouts: Timeouts = Timeouts()

    @model_validator(mode="after")
    def _pools(self) -> GatewayConfig:
        local = [e.prefill for e in self.encode if e.prefill is not None]
        if self.batcher.timeout_ms is not None and (self.s < 1 or local):
            raise ValueError("batcher.timeout_ms is the static baseline's batcher, which sends "
                             "every prefill to the remote pool. Fix: set s: 1 and give no "
                             "encode server a prefill:, or drop batcher.timeout_ms")
        if self.s > 0 and not self.prefill:
            raise ValueError(f"s = {self.s} sends prefills to the remote pool but prefill: is "
                             "empty. Fix: set s: 0, or list the remote prefill servers")
        if self.s < 1 and not local:
            raise ValueError(f"s = {self.s} keeps a share of prefills local but no encode "
                             "server names its co-resident prefill. Fix: set s: 1, or give "
                             "the encode servers a prefill: URL")
        if self.engine == "sglang":
            for role, servers in (("prefill server", self.prefill),
                                  ("encode server's co-resident prefill", local)):
                for srv in servers:
                    if srv.bootstrap_port is None:
                        raise ValueError(
                            f"{role} {srv.url} has no bootstrap_port: SGLang's decode "
                            "server pulls the KV cache through the prefill server's "
                            "bootstrap server. Fix: write it as {url: …, bootstrap_port: "
                            "N} (its --disaggregation-bootstrap-port)")
        urls = [e.url for e in self.encode] + [s.url for s in (*local, *self.prefill,
                                                               *self.decode)]
        dup = next((u for u in urls if urls.count(u) > 1), None)
        if dup is not None:
            raise ValueError(f"{dup} is listed twice. Fix: give each server one role and one "
                             "entry (a co-resident prefill goes only under its encode server)")
        return self


def parse_gateway_config(data: dict, file: str | Path | None = None) -> GatewayConfig:
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as err:
        raise from_pydantic(file, err, model=GatewayConfig) from None


def load_gateway_config(path: str | Path) -> GatewayConfig:
    """gateway.yaml, validated (InputError naming the file, field and fix)."""
    return parse_gateway_config(read_yaml_mapping(path, "gateway config"), path)


__all__ = ["GatewayConfig", "InputError", "load_gateway_config", "parse_gateway_config"]
