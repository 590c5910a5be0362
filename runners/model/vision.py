"""The image encoder (a ViT over patches) and its projector; video frames go through it too."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runners.model.config import VisionConfig
from runners.model.layers import EncoderStack, Projector, sinusoid_2d


class VisionEncoder(nn.Module):
    """Images [3, H, W] (any size: padded up to a multiple of patch·merge) → LLM embeddings
    [⌈H/(p·m)⌉·⌈W/(p·m)⌉, lm_width]. Images of one size in a call share one batched pass."""

    def __init__(self, cfg: VisionConfig, lm_width: int):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Conv2d(3, cfg.width, kernel_size=cfg.patch, stride=cfg.patch)
        self.stack = EncoderStack(cfg.width, cfg.heads, cfg.layers, cfg.mlp_ratio)
        self.projector = Projector(cfg.width, cfg.merge * cfg.merge, lm_width)
        self._pos: dict[tuple[int, int], torch.Tensor] = {}

    def _pad(self, img: torch.Tensor) -> torch.Tensor:
        cell = self.cfg.patch * self.cfg.merge
        h, w = img.shape[-2:]
        ph, pw = math.ceil(h / cell) * cell - h, math.ceil(w / cell) * cell - w
        return F.pad(img, (0, pw, 0, ph)) if ph or pw else img

    def _pos_emb(self, gh: int, gw: int, like: torch.Tensor) -> torch.Tensor:
        key = (gh, gw)
        if key not in self._pos:
            self._pos[key] = sinusoid_2d(gh, gw, self.cfg.width)
        return self._pos[key].to(device=like.device, dtype=like.dtype)

    def forward(self, images: list[torch.Tensor]) -> list[torch.Tensor]:
        """One embedding tensor per image, in input order."""
        m = self.cfg.merge
        padded = [self._pad(img) for img in images]
        groups: dict[tuple[int, int], list[int]] = {}
        for i, img in enumerate(padded):
            groups.setdefault(tuple(img.shape[-2:]), []).append(i)
        feats, lengths, grids, order = [], [], [], []
        for idx in groups.values():
            x = self.patch_embed(torch.stack([padded[i] for i in idx]))  # [b, w, gh, gw]
            b, w, gh, gw = x.shape
            x = x.flatten(2).transpose(1, 2) + self._pos_emb(gh, gw, x)  # [b, gh·gw, w]
            feats.append(x.reshape(b * gh * gw, w))
            lengths += [gh * gw] * b
            grids += [(gh, gw)] * b
            order += idx
        h = self.stack(torch.cat(feats), lengths)
        merged, counts = [], []
        for x, (gh, gw) in zip(torch.split(h, lengths), grids):
            w = x.shape[-1]
            x = x.view(gh // m, m, gw // m, m, w).permute(0, 2, 1, 3, 4)  # merge m×m patches
            merged.append(x.reshape((gh // m) * (gw // m), m * m * w))
            counts.append(merged[-1].shape[0])
        emb = torch.split(self.projector(torch.cat(merged)), counts)
        out: list[torch.Tensor] = [emb[0]] * len(images)
        for i, e in zip(order, emb):
            out[i] = e
        return out
