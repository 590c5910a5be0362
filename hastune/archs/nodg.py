"""`nodg` — vLLM-like replicas: prefill and decode on the same instance, continuous batching.

Each of `replicas` instances of tp × pp GPUs admits requests FIFO under its seats and KV and
runs iterations of a `chunk_tokens` budget (Sarathi-style chunked prefill beside decoding), or
with `chunk_tokens: null` separate prefill-only iterations that pause decoding. Encoders run
inline.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hastune.archs.base import ConfigBase, Parallel, pool_gpu
from hastune.archs.replicas import Colocated


class NoDGConfig(ConfigBase, Parallel):
    """vLLM-like replicas (tp × pp GPUs each): prefill and decode on the same instance with
    continuous batching. `chunk_tokens` is the Sarathi-style token budget of one iteration
    (decode tokens count one each, prefill chunks fill the rest); null runs vLLM's default of
    separate prefill-only iterations that pause decoding. Encoders run inline."""

    gpu_terms = (("tp", "pp", "replicas"),)
    type_knobs = ("gpu",)
    since = ("expert_parallel", "gpu")
    architecture: Literal["nodg"]
    replicas: int = Field(ge=1, le=1024)
    gpu: str | None = pool_gpu("replicas")
    chunk_tokens: int | None = Field(default=512, ge=64, le=65536,
                                     description="token budget per iteration (null: no chunking)")


class NoDG(Colocated):
    name = "nodg"
    config = NoDGConfig
    summary = "vLLM-like replicas: continuous batching, chunked prefill beside decoding"
    simulator_class = "hastune.sim.nodg:NoDGSimulator"
    engine_mode = "continuous"  # runners/engine/modes.py
    pool_word = "replicas"
    count_field = "replicas"
    terms_checked = True  # docs/fidelity.md: the measured runs are of one aggregated instance
    terms_simulated = frozenset({"batch_wait", "token_frontend"})
    engine_chunk_knob = "chunk_tokens"


ARCH = NoDG()
