"""How an architecture's config deploys on the engines people run: its pools by role, the
topology the engines know it by, and what they cannot express (each architecture's
`deployment`, read by hastune.export).

vLLM and SGLang know three topologies: aggregated replicas behind a router, prefill/decode
disaggregation with a KV connector, and a disaggregated encoder in front of P/D. An
architecture maps its config onto one of them, says which of its knobs have no engine flag
(`notes`), what makes it inexpressible (`blocking`), and, asked for the closest expressible
deployment, what it changed (`closest`) and that deployment as a hastune config
(`closest_config`, to evaluate). Placement on GPUs and ports is export's (hastune.export.plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

Role = Literal["encode", "prefill", "decode", "replica"]
ROLES: tuple[Role, ...] = ("encode", "prefill", "decode", "replica")


class Topology(StrEnum):
    AGGREGATED = "aggregated"  # replicas that prefill and decode, behind a router
    PD = "pd"                  # prefill and decode instances, KV over a connector
    EPD = "epd"                # encode instances in front of P/D, embeddings over a connector

    @property
    def moves_kv(self) -> bool:
        """Prefill and decode run on different instances (a KV connector between them)."""
        return self is not Topology.AGGREGATED

    @property
    def moves_embeddings(self) -> bool:
        """Encoders run on instances of their own (an encoder-cache connector after them)."""
        return self is Topology.EPD


@dataclass(frozen=True)
class Pool:
    """One role's instances: how many, and each one's parallelism."""

    role: Role
    instances: int
    tp: int
    pp: int = 1
    expert_parallel: bool = False
    # on the GPUs of the encode pool's instances, one each (EAServe's co-resident local
    # prefill), not on GPUs of its own
    co_resident: bool = False
    gpu: str | None = None  # its GPU type, on a cluster of several (None: the one type)


@dataclass
class Deployment:
    topology: Topology
    pools: list[Pool]                    # empty where nothing deploys (see blocking)
    chunk_tokens: int | None = None      # token budget per iteration (None: no chunking)
    chunked: bool | None = None          # None: the engine's default
    encode_batch: int | None = None      # encode servers' most concurrent requests
    notes: list[str] = field(default_factory=list)      # knobs the engines do not take
    blocking: list[str] = field(default_factory=list)   # what makes it inexpressible
    closest: list[str] = field(default_factory=list)    # what the closest deployment changed
    closest_config: dict[str, Any] | None = None        # it as a hastune config
    # an encode GPU's SM share under CUDA MPS, its co-resident prefill server the rest (None:
    # no GPU holds two servers)
    sm_split: float | None = None
    # EAServe's runtime in front (the hastune gateway, runners/gateway) instead of the
    # engine's router or proxy: its knobs (B, s, p, max_gap_ms); None: the engine's own front
    gateway: dict[str, Any] | None = None
