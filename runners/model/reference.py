"""The reference multimodal model: ViT image/video encoder, Whisper-style audio encoder,
projectors and a decoder-only LM with a paged KV cache, behind the `ServingModel` interface.
Weights come from the config's seed (no downloads); decoding is greedy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from runners.model.audio import AudioEncoder
from runners.model.base import KVState, Payload, ServingModel
from runners.model.config import ModelConfig, get_config
from runners.model.kv_cache import KVCacheFull, KVPool
from runners.model.kv_cache import Sequence as KVSeq
from runners.model.layers import init_weights
from runners.model.lm import LanguageModel
from runners.model.vision import VisionEncoder

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
RESIDUAL_OUT = ("o.weight", "down.weight", "proj.weight", "fc2.weight")


@dataclass(eq=False)
class _PromptSeq(KVSeq):
    """A sequence being prefilled in chunks: the prompt's input embeddings ride along until
    its last chunk has run."""

    inputs: torch.Tensor | None = None


class ReferenceNet(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.lm = LanguageModel(cfg.lm)
        self.vision = VisionEncoder(cfg.vision, cfg.lm.width) if cfg.vision else None
        self.audio = AudioEncoder(cfg.audio, cfg.lm.width) if cfg.audio else None


def _bytes(module: nn.Module | None) -> int:
    if module is None:
        return 0
    return sum(p.numel() * p.element_size() for p in module.parameters())


class ReferenceModel(ServingModel):
    """`ReferenceModel("ref-small")` or `ReferenceModel(ModelConfig(...))`. `kv_tokens`: KV
    cache capacity (default: the config's); `dtype` overrides the config's."""

    def __init__(self, config: ModelConfig | str = "ref-small", device: str = "cpu",
                 kv_tokens: int | None = None, dtype: str | None = None):
        cfg = get_config(config) if isinstance(config, str) else config
        if dtype is not None:
            cfg = cfg.with_(dtype=dtype)
        self.config, self.name, self.device = cfg, cfg.name, str(device)
        self.dtype = DTYPES[cfg.dtype]
        gen = torch.Generator().manual_seed(cfg.seed)
        net = ReferenceNet(cfg)
        init_weights(net, gen)
        with torch.no_grad():  # GPT-2's scaling: residual outputs shrink with depth
            for name, p in net.named_parameters():
                if name.endswith(RESIDUAL_OUT):
                    p.mul_((2 * cfg.lm.layers) ** -0.5)
        self.net = net.to(device=device, dtype=self.dtype).eval().requires_grad_(False)
        lm = cfg.lm
        self.pool = KVPool(lm.layers, lm.kv_heads, lm.head_dim, cfg.kv_block,
                           kv_tokens or cfg.kv_tokens, self.dtype, device)

    # -- sizes ----------------------------------------------------------------------------
    @property
    def weight_bytes(self) -> int:
        return _bytes(self.net.lm)

    @property
    def encoder_weight_bytes(self) -> int:
        return _bytes(self.net.vision) + _bytes(self.net.audio)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.config.kv_bytes_per_token

    @property
    def hidden_size(self) -> int:
        return self.config.lm.width

    @property
    def embedding_bytes_per_token(self) -> int:
        return self.hidden_size * self.config.dtype_bytes

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(m for m in self.config.modalities if m != "text")

    def token_counts(self, payload: Payload) -> tuple[int, int]:
        cfg, d = self.config, payload.data
        if payload.modality == "audio":
            return cfg.audio.tokens(int(d.shape[-1]))  # type: ignore[union-attr]
        enc, llm = cfg.vision.tokens(int(d.shape[-2]), int(d.shape[-1]))  # type: ignore
        frames = int(d.shape[0]) if payload.modality == "video" else 1
        return enc * frames, llm * frames

    # -- encode ---------------------------------------------------------------------------
    def _check(self, p: Payload) -> None:
        if p.modality not in self.modalities:
            raise ValueError(f"{self.name} has no {p.modality} encoder. Fix: send "
                             f"{', '.join(self.modalities) or 'text only'}")
        want = {"image": 3, "video": 4, "audio": 2}[p.modality]
        if not isinstance(p.data, torch.Tensor) or p.data.dim() != want:
            raise ValueError(f"a {p.modality} payload must be a {want}-D tensor. Fix: image "
                             "[3, H, W], video [T, 3, H, W], audio [n_mels, frames]")

    @torch.inference_mode()
    def encode(self, payloads: Sequence[Payload]) -> list[torch.Tensor]:
        for p in payloads:
            self._check(p)
        frames: list[torch.Tensor] = []
        owner: list[int] = []
        mels: list[torch.Tensor] = []
        mel_owner: list[int] = []
        for i, p in enumerate(payloads):
            x = p.data.to(device=self.device, dtype=self.dtype)
            if p.modality == "audio":
                mels.append(x)
                mel_owner.append(i)
            else:
                batch = x if p.modality == "video" else x[None]
                frames += list(batch)
                owner += [i] * batch.shape[0]
        parts: list[list[torch.Tensor]] = [[] for _ in payloads]
        if frames:
            for i, e in zip(owner, self.net.vision(frames)):  # type: ignore[misc]
                parts[i].append(e)
        if mels:
            for i, e in zip(mel_owner, self.net.audio(mels)):  # type: ignore[misc]
                parts[i].append(e)
        return [ps[0] if len(ps) == 1 else torch.cat(ps) for ps in parts]

    # -- prefill --------------------------------------------------------------------------
    def _inputs(self, tokens: Sequence[int], embeddings: torch.Tensor | None) -> torch.Tensor:
        lm = self.config.lm
        ids = torch.as_tensor(list(tokens), dtype=torch.long)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= lm.vocab):
            raise ValueError(f"token ids must lie in [0, {lm.vocab}). Fix: map the prompt "
                             "into the model's vocabulary")
        x = self.net.lm.embed(ids.to(self.device))
        if embeddings is not None:
            x = torch.cat([embeddings.to(device=self.device, dtype=self.dtype), x])
        if x.shape[0] == 0 or x.shape[0] >= lm.max_seq:
            raise ValueError(f"a prompt must have 1 to {lm.max_seq - 1} tokens (got "
                             f"{x.shape[0]}). Fix: shorten it, or raise lm.max_seq")
        return x

    @torch.inference_mode()
    def prefill_logits(self, items: Sequence[tuple[Sequence[int], torch.Tensor | None]]
                       ) -> tuple[torch.Tensor, list[KVSeq]]:
        """Prefill packed prompts; (logits of each prompt's last position [B, vocab],
        handles). KVCacheFull (nothing allocated) if they do not all fit."""
        xs = [self._inputs(t, e) for t, e in items]
        lengths = [x.shape[0] for x in xs]
        bs = self.pool.block_size
        if sum(-(-n // bs) for n in lengths) > self.pool.free_blocks:
            raise KVCacheFull(f"{sum(lengths)} prompt tokens do not fit in the KV cache "
                              f"({self.pool.free_blocks} free blocks of {bs})")
        seqs = [KVSeq() for _ in xs]
        slots = torch.cat([self.pool.allocate(s, n) for s, n in zip(seqs, lengths)])
        h = self.net.lm(torch.cat(xs), lengths, self.pool, slots)
        last = torch.tensor(lengths).cumsum(0) - 1
        logits = self.net.lm.logits(h[last.to(h.device)])
        for s, t in zip(seqs, logits.argmax(-1).tolist()):
            s.last_token = t
        return logits, seqs

    def prefill_batch(self, items):  # type: ignore[override]
        logits, seqs = self.prefill_logits(items)
        return [(s.last_token, s) for s in seqs]

    def prefill(self, tokens, embeddings=None):  # type: ignore[override]
        return self.prefill_batch([(tokens, embeddings)])[0]

    # -- chunked prefill ------------------------------------------------------------------
    def begin_prefill(self, tokens, embeddings=None):  # type: ignore[override]
        seq = _PromptSeq()
        seq.inputs = self._inputs(tokens, embeddings)
        return seq

    @torch.inference_mode()
    def prefill_chunk(self, handle, n):  # type: ignore[override]
        x_all = handle.inputs
        if x_all is None:
            raise ValueError("prefill_chunk got a handle whose prompt is complete")
        s = handle.length
        e = min(s + max(1, int(n)), x_all.shape[0])
        if not self.pool.can_allocate(handle, e - s):
            raise KVCacheFull(f"a {e - s}-token prefill chunk does not fit in the KV cache "
                              f"({self.pool.free_blocks} free blocks)")
        slots = self.pool.allocate(handle, e - s)
        index, _ = self.pool.gather_index([handle])
        h = self.net.lm.extend(x_all[s:e], s, self.pool, slots, index)
        if e < x_all.shape[0]:
            return None
        handle.inputs = None
        handle.last_token = int(self.net.lm.logits(h[-1:]).argmax(-1))
        return handle.last_token

    # -- decode ---------------------------------------------------------------------------
    @torch.inference_mode()
    def step_logits(self, handles: Sequence[KVSeq]) -> torch.Tensor:
        """One decode step; logits [B, vocab] of the new tokens (each handle's last_token
        becomes its argmax). KVCacheFull (nothing changed) if a new block is missing."""
        seqs = list(handles)
        if not seqs:
            return torch.empty(0, self.config.lm.vocab)
        for s in seqs:
            if s.freed:
                raise ValueError("decode_step got a freed KV handle")
            if s.length + 1 >= self.config.lm.max_seq:
                raise ValueError(f"a sequence reached lm.max_seq ({self.config.lm.max_seq}). "
                                 "Fix: stop it earlier, or raise lm.max_seq")
        if len(set(map(id, seqs))) != len(seqs):
            raise ValueError("decode_step got the same KV handle twice")
        need = sum(self.pool.blocks_for(s, 1) for s in seqs)
        if need > self.pool.free_blocks:
            raise KVCacheFull(f"a decode step needs {need} new KV blocks, "
                              f"{self.pool.free_blocks} are free")
        positions = torch.tensor([s.length for s in seqs])
        slots = torch.cat([self.pool.allocate(s, 1) for s in seqs])
        index, mask = self.pool.gather_index(seqs)
        ids = torch.tensor([s.last_token for s in seqs], device=self.device)
        h = self.net.lm.decode(self.net.lm.embed(ids), positions, self.pool, slots, index, mask)
        logits = self.net.lm.logits(h)
        for s, t in zip(seqs, logits.argmax(-1).tolist()):
            s.last_token = t
        return logits

    def decode_step(self, handles):  # type: ignore[override]
        self.step_logits(handles)
        return [s.last_token for s in handles]

    def free(self, handle) -> None:  # type: ignore[override]
        self.pool.free(handle)

    def can_allocate(self, tokens: int) -> bool:
        return -(-tokens // self.pool.block_size) <= self.pool.free_blocks

    # -- disaggregation -------------------------------------------------------------------
    def export_kv(self, handle) -> KVState:  # type: ignore[override]
        k, v = self.pool.export(handle)
        return KVState(k.cpu(), v.cpu(), handle.last_token)

    @torch.inference_mode()
    def import_kv(self, state: KVState) -> KVSeq:
        seq = KVSeq()
        if not self.can_allocate(state.length):
            raise KVCacheFull(f"{state.length} imported tokens do not fit in the KV cache")
        slots = self.pool.allocate(seq, state.length)
        for layer in range(self.config.lm.layers):
            self.pool.write(layer, slots, state.k[layer].to(self.device, self.dtype),
                            state.v[layer].to(self.device, self.dtype))
        seq.last_token = state.last_token
        return seq

    # -- references and helpers -----------------------------------------------------------
    @torch.inference_mode()
    def forward_logits(self, tokens: Sequence[int], embeddings: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """Logits at every position, without any cache (what cached decoding must equal)."""
        x = self._inputs(tokens, embeddings)
        return self.net.lm.logits(self.net.lm(x, [x.shape[0]]))

    def generate(self, tokens: Sequence[int], embeddings: torch.Tensor | None = None,
                 max_new_tokens: int = 16) -> list[int]:
        """Greedy decoding of one prompt: `max_new_tokens` tokens (the first from prefill)."""
        tok, kv = self.prefill(tokens, embeddings)
        out = [tok]
        try:
            while len(out) < max_new_tokens:
                out += self.decode_step([kv])
        finally:
            self.free(kv)
        return out

    def synthetic_handle(self, length: int, last_token: int = 0) -> KVSeq:
        """A handle of `length` cached tokens without running prefill (their K/V is whatever
        the pool holds): decode steps at a given context cost the same. For profiling."""
        seq = KVSeq()
        self.pool.allocate(seq, length)
        seq.last_token = last_token
        return seq

    def example_payload(self, modality: str, size: float | None = None, seed: int = 0
                        ) -> Payload:
        cfg = self.config
        gen = torch.Generator().manual_seed(seed)
        if modality == "audio" and cfg.audio is not None:
            frames = cfg.audio.frames(4.0 if size is None else size)
            return Payload("audio", torch.randn(cfg.audio.n_mels, frames, generator=gen))
        if modality in ("image", "video") and cfg.vision is not None:
            side = cfg.vision.side
            if modality == "image":
                side = int(size) if size is not None else side
                return Payload("image", torch.rand(3, side, side, generator=gen))
            frames = int(size) if size is not None else 4
            return Payload("video", torch.rand(frames, 3, side, side, generator=gen))
        raise ValueError(f"{self.name} has no {modality} encoder. Fix: use one of "
                         f"{', '.join(self.modalities) or '(none: text only)'}")

    def profile_sizes(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        v = self.config.vision
        if v is not None:
            cell = v.patch * v.merge
            out["image"] = sorted({cell * k for k in (2, 4, 7, 10, 14)} | {v.side})
            out["video"] = [2, 4, 8]
        if self.config.audio is not None:
            out["audio"] = [1, 2, 4, 8, 16]
        return out
