"""A minimal user model: what plugging your own model into runners/ takes (the conformance
suite runs it next to the reference model). Loadable as tests.runners.toy_model:make."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runners.model.base import Payload, ServingModel

WIDTH, VOCAB = 8, 97


@dataclass(eq=False)
class ToyKV:
    length: int
    last_token: int
    freed: bool = False


class ToyModel(ServingModel):
    """Embeddings: one row per 16 payload elements. Next token: a hash of the last one and
    the length — deterministic, no weights."""

    name = "toy"

    def encode(self, payloads):
        return [torch.full((self.token_counts(p)[1], WIDTH), 0.5) for p in payloads]

    def token_counts(self, payload):
        n = max(1, payload.data.numel() // 16)
        return n, n

    def prefill(self, tokens, embeddings=None):
        n = len(tokens) + (0 if embeddings is None else int(embeddings.shape[0]))
        tok = (sum(tokens) + n) % VOCAB
        return tok, ToyKV(n, tok)

    def decode_step(self, handles):
        for h in handles:
            if h.freed:
                raise ValueError("freed handle")
            h.last_token = (h.last_token * 31 + h.length) % VOCAB
            h.length += 1
        return [h.last_token for h in handles]

    def free(self, handle):
        if handle.freed:
            raise ValueError("this KV handle was freed already")
        handle.freed = True

    weight_bytes = 1
    encoder_weight_bytes = 0
    kv_bytes_per_token = 2
    hidden_size = WIDTH

    def example_payload(self, modality, size=None, seed=0):
        if modality != "image":
            raise ValueError("toy: image only")
        side = int(size or 16)
        return Payload("image", torch.ones(3, side, side))

    @property
    def modalities(self):
        return ("image",)

    def profile_sizes(self):
        return {"image": [16, 32]}


def make(device: str = "cpu") -> ToyModel:
    return ToyModel()
