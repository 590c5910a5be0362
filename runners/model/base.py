"""The interface a model implements to be served by runners/ and measured by `hastune profile`.

A request's life through a `ServingModel`:

    emb = model.encode([payload, ...])            # Encode: one [llm_tokens, width] per payload
    tok, kv = model.prefill(prompt_ids, emb[i])   # Prefill: first token + KV handle
    while not done:
        toks = model.decode_step([kv, ...])       # Decode: one token per handle, batched
    model.free(kv)

The engine owns batching, routing and timing; the model owns tensors. A KV handle is opaque to
the engine except for `length` (tokens cached, for memory accounting) and `last_token`. For
disaggregated prefill → decode, `export_kv` / `import_kv` move a handle's cache between two
instances of the same model (optional: without them prefill and decode must share a process).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

MODALITIES = ("image", "video", "audio")


@dataclass(frozen=True, eq=False)
class Payload:
    """A request's non-text input. `data` is a tensor: image [3, H, W], video [T, 3, H, W],
    audio a log-mel spectrogram [n_mels, frames] (the model's `example_payload` says more)."""

    modality: str
    data: Any

    def __post_init__(self) -> None:
        if self.modality not in MODALITIES:
            raise ValueError(f"payload modality {self.modality!r} is unknown. Fix: use one of "
                             f"{', '.join(MODALITIES)}")


@runtime_checkable
class KVHandle(Protocol):
    """A sequence's KV cache inside a model. `length`: tokens cached; `last_token`: the token
    the next decode step feeds (the one last returned)."""

    length: int
    last_token: int


@dataclass(frozen=True)
class KVState:
    """A handle's cache outside any model (for the P → D hand-off): keys and values
    [layers, length, kv_heads, head_dim] on the CPU, and the token the next step feeds."""

    k: Any
    v: Any
    last_token: int

    @property
    def length(self) -> int:
        return int(self.k.shape[1])


class ServingModel(ABC):
    """Implement the four abstract methods and the sizes; the rest has defaults."""

    name: str = "model"
    device: str = "cpu"

    # -- the four stages ------------------------------------------------------------------
    @abstractmethod
    def encode(self, payloads: Sequence[Payload]) -> list[Any]:
        """Encode a batch of payloads (mixed modalities and sizes allowed); one embedding
        tensor [llm_tokens(p), hidden_size] per payload, in order."""

    @abstractmethod
    def prefill(self, tokens: Sequence[int], embeddings: Any | None = None
                ) -> tuple[int, KVHandle]:
        """Run the prompt (the embeddings first, then the text tokens) and cache its KV;
        returns the first generated token (greedy) and the sequence's handle."""

    @abstractmethod
    def decode_step(self, handles: Sequence[KVHandle]) -> list[int]:
        """One greedy token for each handle (sequences of any lengths, one batched step);
        each handle grows by one token."""

    @abstractmethod
    def free(self, handle: KVHandle) -> None:
        """Release a handle's KV memory. Freeing twice is an error."""

    # -- sizes: memory accounting, token counts, profiles ----------------------------------
    @property
    @abstractmethod
    def weight_bytes(self) -> int:
        """LLM weights in bytes."""

    @property
    @abstractmethod
    def encoder_weight_bytes(self) -> int:
        """Encoder + projector weights in bytes."""

    @property
    @abstractmethod
    def kv_bytes_per_token(self) -> int:
        """KV cache bytes per token (all layers, K and V)."""

    @property
    @abstractmethod
    def hidden_size(self) -> int:
        """Width of the embeddings `encode` returns (the LM's width)."""

    @property
    def embedding_bytes_per_token(self) -> int:
        """Bytes of one embedding row handed from encode to prefill."""
        return self.hidden_size * 4

    @property
    def modalities(self) -> tuple[str, ...]:
        """Non-text modalities `encode` accepts."""
        return MODALITIES

    def token_counts(self, payload: Payload) -> tuple[int, int]:
        """(encoder input tokens, LLM tokens) of a payload — what a recipe's workload calls
        encoder_tokens and llm_tokens. Default: encode it and count."""
        emb = self.encode([payload])[0]
        return int(emb.shape[0]), int(emb.shape[0])

    # -- batching and disaggregation: defaults that work, override to go faster ------------
    def prefill_batch(self, items: Sequence[tuple[Sequence[int], Any | None]]
                      ) -> list[tuple[int, KVHandle]]:
        """Prefill several prompts in one pass ([(tokens, embeddings)] → [(token, handle)])."""
        return [self.prefill(t, e) for t, e in items]

    def can_allocate(self, tokens: int) -> bool:
        """Whether a new sequence of `tokens` fits in the KV memory now."""
        return True

    # -- chunked prefill (optional: the engine's continuous mode falls back to whole prompts) --
    def begin_prefill(self, tokens: Sequence[int], embeddings: Any | None = None) -> KVHandle:
        """A handle for a prompt that `prefill_chunk` will run piece by piece; nothing runs
        yet (its `length` is 0)."""
        raise NotImplementedError(f"{type(self).__name__} cannot prefill in chunks")

    def prefill_chunk(self, handle: KVHandle, n: int) -> int | None:
        """Run the next `n` positions of `handle`'s prompt (attending to the cached ones);
        the first generated token once the prompt is complete, else None."""
        raise NotImplementedError(f"{type(self).__name__} cannot prefill in chunks")

    def export_kv(self, handle: KVHandle) -> KVState:
        raise NotImplementedError(f"{type(self).__name__} cannot export KV: run prefill and "
                                  "decode in the same worker")

    def import_kv(self, state: KVState) -> KVHandle:
        raise NotImplementedError(f"{type(self).__name__} cannot import KV: run prefill and "
                                  "decode in the same worker")

    # -- payloads for profiling and load generation ----------------------------------------
    def example_payload(self, modality: str, size: float | None = None, seed: int = 0
                        ) -> Payload:
        """A synthetic payload: image of side `size` px, video of `size` frames, audio of
        `size` seconds (None: the model's default size)."""
        raise NotImplementedError(f"{type(self).__name__} makes no example payloads")

    def profile_sizes(self) -> dict[str, list[float]]:
        """Payload sizes `hastune profile` sweeps per modality (see `example_payload`)."""
        return {}
