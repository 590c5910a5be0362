"""A paged KV cache: fixed-size blocks in one preallocated pool, a block table per sequence.

Memory accounting is exact and cheap (`can_allocate` / `allocate` / `free`, block counts), and
sequences of any lengths share one pool without fragmentation. A decode step gathers each
sequence's keys and values through its slot indices into a padded [batch, max length] view;
the mask hides the padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


class KVCacheFull(RuntimeError):
    """No free blocks left for a sequence: free some, or admit fewer sequences."""


@dataclass(eq=False)
class Sequence:
    """One sequence's cache entry: its blocks, its length and the token its next decode step
    feeds. The `KVHandle` of the reference model."""

    blocks: list[int] = field(default_factory=list)
    length: int = 0          # tokens in the cache
    last_token: int = -1     # fed to the next decode step
    freed: bool = False


class KVPool:
    """`layers` × [num_blocks·block_size, kv_heads, head_dim] keys and values."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, block_size: int,
                 capacity_tokens: int, dtype: torch.dtype, device: torch.device | str):
        self.block_size = block_size
        self.num_blocks = max(1, capacity_tokens // block_size)
        slots = self.num_blocks * block_size
        self.k = torch.zeros(layers, slots, kv_heads, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self._free = list(range(self.num_blocks - 1, -1, -1))  # pop() hands out low ids first
        # decode gathers each layer's K/V into these (valid until the next gather)
        self._buf_k = self.k.new_empty((0, kv_heads, head_dim))
        self._buf_v = self.k.new_empty((0, kv_heads, head_dim))

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    def blocks_for(self, seq: Sequence, tokens: int) -> int:
        """Blocks `seq` needs to grow by `tokens`."""
        return max(0, math.ceil((seq.length + tokens) / self.block_size) - len(seq.blocks))

    def can_allocate(self, seq: Sequence, tokens: int) -> bool:
        return self.blocks_for(seq, tokens) <= len(self._free)

    def allocate(self, seq: Sequence, tokens: int) -> torch.Tensor:
        """Grow `seq` by `tokens`; returns their slot indices. KVCacheFull if it cannot."""
        need = self.blocks_for(seq, tokens)
        if need > len(self._free):
            raise KVCacheFull(f"the KV cache needs {need} more blocks of {self.block_size} "
                              f"tokens but {len(self._free)} are free")
        seq.blocks += [self._free.pop() for _ in range(need)]
        pos = torch.arange(seq.length, seq.length + tokens)
        seq.length += tokens
        return self.slots(seq, pos)

    def slots(self, seq: Sequence, positions: torch.Tensor) -> torch.Tensor:
        table = torch.tensor(seq.blocks, dtype=torch.long)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size

    def free(self, seq: Sequence) -> None:
        if seq.freed:
            raise ValueError("this KV handle was freed already")
        self._free += reversed(seq.blocks)
        seq.blocks = []
        seq.freed = True

    def gather_index(self, seqs: list[Sequence]) -> tuple[torch.Tensor, torch.Tensor]:
        """(slot index [B, L], valid mask [B, L]) over each sequence's cached tokens, L the
        longest length; padding points at slot 0 and is masked."""
        longest = max(s.length for s in seqs)
        bs = self.block_size
        nblk = math.ceil(longest / bs)
        table = torch.zeros(len(seqs), nblk, dtype=torch.long)
        for i, s in enumerate(seqs):
            table[i, : len(s.blocks)] = torch.tensor(s.blocks[:nblk], dtype=torch.long)
        idx = (table[:, :, None] * bs + torch.arange(bs)).reshape(len(seqs), nblk * bs)
        idx = idx[:, :longest]
        lengths = torch.tensor([s.length for s in seqs])
        mask = torch.arange(longest)[None] < lengths[:, None]
        dev = self.k.device
        return (idx * mask).to(dev), mask.to(dev)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        slots = slots.to(self.k.device)
        self.k[layer].index_copy_(0, slots, k)
        self.v[layer].index_copy_(0, slots, v)

    def gather(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values at `index` [B, L] as [B, kv_heads, L, head_dim], views of buffers
        reused by the next call. (index_select on the flat index: several times faster than
        advanced indexing on CPU.)"""
        flat = index.reshape(-1)
        n = flat.numel()
        if self._buf_k.shape[0] < n:  # grow the reused buffers (no big allocation per step)
            self._buf_k = self.k.new_empty((max(n, 2 * self._buf_k.shape[0]),
                                            *self.k.shape[2:]))
            self._buf_v = torch.empty_like(self._buf_k)
        k, v = self._buf_k[:n], self._buf_v[:n]
        torch.index_select(self.k[layer], 0, flat, out=k)
        torch.index_select(self.v[layer], 0, flat, out=v)
        shape = (*index.shape, *self.k.shape[2:])
        return k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)

    def export(self, seq: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
        """(K, V) of `seq`: [layers, length, kv_heads, head_dim] copies."""
        slots = self.slots(seq, torch.arange(seq.length)).to(self.k.device)
        return self.k[:, slots].clone(), self.v[:, slots].clone()
