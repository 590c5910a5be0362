"""The audio encoder: Whisper-style convolutions and transformer over a log-mel spectrogram,
then frame stacking and a projector to the LM width."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from runners.model.config import AudioConfig
from runners.model.layers import EncoderStack, Projector, sinusoid


class AudioEncoder(nn.Module):
    """Spectrograms [n_mels, F] (any F ≥ 1) → LLM embeddings [⌈⌈F/2⌉/stack⌉, lm_width].
    No 30 s window padding (unlike Whisper): cost follows the audio's real length."""

    def __init__(self, cfg: AudioConfig, lm_width: int):
        super().__init__()
        self.cfg = cfg
        self.conv1 = nn.Conv1d(cfg.n_mels, cfg.width, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(cfg.width, cfg.width, kernel_size=3, stride=2, padding=1)
        self.stack = EncoderStack(cfg.width, cfg.heads, cfg.layers, cfg.mlp_ratio)
        self.projector = Projector(cfg.width, cfg.stack, lm_width)

    def _stem(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel))))  # [B, w, ⌈F/2⌉]
        return x.transpose(1, 2)

    def forward(self, mels: list[torch.Tensor]) -> list[torch.Tensor]:
        """One embedding tensor per spectrogram, in input order."""
        if len({m.shape[-1] for m in mels}) == 1:  # equal lengths: one batched stem
            stems = list(self._stem(torch.stack(mels)))
        else:
            stems = [self._stem(m[None])[0] for m in mels]
        lengths = [s.shape[0] for s in stems]
        x = torch.cat(stems)
        pos = torch.cat([torch.arange(n) for n in lengths])
        x = x + sinusoid(pos, self.cfg.width).to(device=x.device, dtype=x.dtype)
        h = self.stack(x, lengths)
        k, w = self.cfg.stack, self.cfg.width
        stacked, counts = [], []
        for seg in torch.split(h, lengths):
            pad = (-seg.shape[0]) % k
            if pad:
                seg = F.pad(seg, (0, 0, 0, pad))
            stacked.append(seg.reshape(-1, k * w))
            counts.append(stacked[-1].shape[0])
        return list(torch.split(self.projector(torch.cat(stacked)), counts))
