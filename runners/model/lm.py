"""The decoder-only language model: RMSNorm, grouped-query attention with rotary positions,
SwiGLU MLP, embeddings tied to the output head. Three ways to run it:

- `forward` over packed sequences with no cache (the reference the cached paths must equal);
- prefill: the same, writing each layer's keys and values into a paged `KVPool`;
- decode: one new token per sequence, attending over the pool through a gather index.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runners.model.config import LMConfig
from runners.model.kv_cache import KVPool
from runners.model.layers import packed_attention


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [N, heads, D] by per-token angles (cos, sin: [N, D/2])."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None], sin[:, None]
    return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)


class DecoderBlock(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.norm1 = RMSNorm(cfg.width)
        self.qkv = nn.Linear(cfg.width, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim,
                             bias=False)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, cfg.width, bias=False)
        self.norm2 = RMSNorm(cfg.width)
        self.gate_up = nn.Linear(cfg.width, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.width, bias=False)

    def _qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        n, d = x.shape[0], self.head_dim
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        q = rope(q.view(n, self.heads, d), cos, sin)
        k = rope(k.view(n, self.kv_heads, d), cos, sin)
        return q, k, v.view(n, self.kv_heads, d)

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)

    def forward_packed(self, x, lengths, cos, sin, pool: KVPool | None, layer: int,
                       slots: torch.Tensor | None) -> torch.Tensor:
        q, k, v = self._qkv(x, cos, sin)
        if pool is not None:
            pool.write(layer, slots, k, v)  # type: ignore[arg-type]
        att = packed_attention(q, k, v, lengths, causal=True)
        return self._mlp(x + self.o(att.reshape(x.shape[0], -1)))

    def forward_chunk(self, x, cos, sin, pool: KVPool, layer: int, slots: torch.Tensor,
                      index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """A prompt chunk of one sequence: its K/V written at `slots` first, then attention
        over the sequence's cached rows `index` [1, L] under the causal `mask` [N, L]."""
        n = x.shape[0]
        q, k, v = self._qkv(x, cos, sin)
        pool.write(layer, slots, k, v)
        keys, vals = pool.gather(layer, index)  # [1, Hkv, L, D]
        att = F.scaled_dot_product_attention(
            q.transpose(0, 1)[None], keys, vals, attn_mask=mask[None, None],
            enable_gqa=self.heads != self.kv_heads)  # [1, H, N, D]
        return self._mlp(x + self.o(att[0].transpose(0, 1).reshape(n, -1)))

    def forward_decode(self, x, cos, sin, pool: KVPool, layer: int, slots: torch.Tensor,
                       index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self._qkv(x, cos, sin)
        pool.write(layer, slots, k, v)
        keys, vals = pool.gather(layer, index)  # [B, Hkv, L, D]
        att = F.scaled_dot_product_attention(
            q[:, :, None], keys, vals, attn_mask=mask[:, None, None, :],
            enable_gqa=self.heads != self.kv_heads)  # [B, H, 1, D]
        return self._mlp(x + self.o(att.reshape(b, -1)))


class LanguageModel(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.width)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width)
        half = cfg.head_dim // 2
        inv = 1.0 / cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half)
        ang = torch.arange(cfg.max_seq, dtype=torch.float64)[:, None] * inv[None]
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def _angles(self, positions: torch.Tensor, like: torch.Tensor):
        positions = positions.to(self.cos.device)
        return (self.cos[positions].to(like.dtype), self.sin[positions].to(like.dtype))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and the tied output head: [N, width] → [N, vocab] (float32)."""
        return F.linear(self.norm(h), self.embed.weight).float()

    def forward(self, x: torch.Tensor, lengths: list[int], pool: KVPool | None = None,
                slots: torch.Tensor | None = None) -> torch.Tensor:
        """Packed input embeddings [ΣN, width] (each sequence from position 0) → hidden
        states; with `pool`, every layer's K/V is written at `slots` ([ΣN])."""
        positions = torch.cat([torch.arange(n) for n in lengths])
        cos, sin = self._angles(positions, x)
        for i, blk in enumerate(self.blocks):
            x = blk.forward_packed(x, lengths, cos, sin, pool, i, slots)
        return x

    def extend(self, x: torch.Tensor, start: int, pool: KVPool, slots: torch.Tensor,
               index: torch.Tensor) -> torch.Tensor:
        """Chunked prefill: x [N, width] at positions start..start+N−1 of one sequence whose
        first `start` positions are cached; `index` [1, start+N] its pool rows. Hidden states
        [N, width]."""
        n = x.shape[0]
        cos, sin = self._angles(torch.arange(start, start + n), x)
        total = index.shape[1]
        mask = (torch.arange(total)[None] <= torch.arange(start, start + n)[:, None])
        mask = mask.to(x.device)
        slots = slots.to(x.device)
        for i, blk in enumerate(self.blocks):
            x = blk.forward_chunk(x, cos, sin, pool, i, slots, index, mask)
        return x

    def decode(self, x: torch.Tensor, positions: torch.Tensor, pool: KVPool,
               slots: torch.Tensor, index: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One token per sequence: x [B, width] at `positions`, its K/V written at `slots`
        ([B]) first; attention over the pool rows `index` [B, L] where `mask`."""
        cos, sin = self._angles(positions, x)
        slots = slots.to(x.device)
        for i, blk in enumerate(self.blocks):
            x = blk.forward_decode(x, cos, sin, pool, i, slots, index, mask)
        return x
