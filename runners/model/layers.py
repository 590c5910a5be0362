"""Transformer pieces shared by the encoders and the LM.

Sequences of different lengths are *packed*: one [Σ N, width] tensor plus their lengths. The
dense layers run on the packed tensor (cost ∝ Σ N, no padding); attention runs per sequence
(cost ∝ Σ N²), batched into one call when all lengths are equal. That is the cost shape the
profile's linear forms assume (Σ tokens, Σ tokens²).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def init_weights(module: nn.Module, generator: torch.Generator, std: float = 0.02) -> None:
    """Deterministic weights from `generator`: normal(0, std) matrices (output layers scaled
    down by depth, set by the caller), zero biases, unit norms."""
    for name, p in module.named_parameters():
        with torch.no_grad():
            if name.endswith("bias"):
                p.zero_()
            elif p.dim() == 1:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * std)


def split_lengths(x: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return list(torch.split(x, lengths, dim=0))


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: list[int],
                     causal: bool) -> torch.Tensor:
    """Attention within each packed sequence. q: [ΣN, H, D]; k, v: [ΣN, Hkv, D] (Hkv divides
    H: grouped-query attention). Returns [ΣN, H, D]."""
    heads, kv_heads = q.shape[1], k.shape[1]
    gqa = heads != kv_heads
    if len(set(lengths)) == 1:  # one batched call
        b, n = len(lengths), lengths[0]
        qb, kb, vb = (t.view(b, n, t.shape[1], t.shape[2]).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, enable_gqa=gqa)
        return out.transpose(1, 2).reshape(q.shape)
    outs = []
    for qs, ks, vs in zip(*(split_lengths(t, lengths) for t in (q, k, v))):
        o = F.scaled_dot_product_attention(qs.transpose(0, 1)[None], ks.transpose(0, 1)[None],
                                           vs.transpose(0, 1)[None], is_causal=causal,
                                           enable_gqa=gqa)
        outs.append(o[0].transpose(0, 1))
    return torch.cat(outs, dim=0)


def sinusoid(positions: torch.Tensor, width: int) -> torch.Tensor:
    """Fixed sinusoidal embeddings of (float) positions: [N] → [N, width]."""
    half = width // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    ang = positions.float()[:, None] * freq[None]
    emb = torch.cat([ang.sin(), ang.cos()], dim=1)
    return F.pad(emb, (0, width - 2 * half))


def sinusoid_2d(grid_h: int, grid_w: int, width: int) -> torch.Tensor:
    """2-D sinusoidal embeddings of a grid_h × grid_w patch grid (row-major): [gh·gw, width].
    Any image size works: no learned table to interpolate."""
    rows = torch.arange(grid_h).repeat_interleave(grid_w)
    cols = torch.arange(grid_w).repeat(grid_h)
    half = width // 2
    return torch.cat([sinusoid(rows, half), sinusoid(cols, width - half)], dim=1)


class EncoderBlock(nn.Module):
    """Pre-norm transformer block (LayerNorm, bidirectional attention, GELU MLP) on packed
    sequences."""

    def __init__(self, width: int, heads: int, mlp_ratio: float):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        hidden = int(width * mlp_ratio)
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        n, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, 3, self.heads, w // self.heads).unbind(1)
        x = x + self.proj(packed_attention(q, k, v, lengths, causal=False).reshape(n, w))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class EncoderStack(nn.Module):
    def __init__(self, width: int, heads: int, layers: int, mlp_ratio: float):
        super().__init__()
        self.blocks = nn.ModuleList(EncoderBlock(width, heads, mlp_ratio) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor, lengths: list[int]) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x, lengths)
        return self.norm(x)


class Projector(nn.Module):
    """Encoder features → LM width: a two-layer GELU MLP over `group` concatenated
    encoder tokens (merged patches, stacked audio frames)."""

    def __init__(self, in_width: int, group: int, out_width: int):
        super().__init__()
        self.fc1 = nn.Linear(in_width * group, out_width)
        self.fc2 = nn.Linear(out_width, out_width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))
