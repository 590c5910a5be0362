"""Sizes of the reference multimodal model: one dataclass per part, named presets.

Torch-free, so `hastune` can list presets and compute token counts without loading torch.

Token counts (what the encoders emit; docs/engine.md#models):
- image H×W: padded up to a multiple of patch·merge pixels; encoder tokens (patches)
  = (⌈H/(p·m)⌉·m)·(⌈W/(p·m)⌉·m), LLM tokens = ⌈H/(p·m)⌉·⌈W/(p·m)⌉ (m×m patches merged);
- video: T frames, each through the image encoder: T × the image counts;
- audio of F spectrogram frames (frames_per_second per second): encoder tokens = ⌈F/2⌉
  (the second conv has stride 2), LLM tokens = ⌈⌈F/2⌉/stack⌉ (stack frames per token).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace


def _need(cond: bool, what: str, fix: str) -> None:
    if not cond:
        raise ValueError(f"{what}. Fix: {fix}")


@dataclass(frozen=True)
class VisionConfig:
    """ViT over square patches; `merge`×`merge` patches become one LLM token."""

    patch: int = 16
    merge: int = 2
    width: int = 128
    layers: int = 4
    heads: int = 2
    mlp_ratio: float = 4.0
    side: int = 224           # default image side (pixels) for example payloads

    def __post_init__(self) -> None:
        _need(self.patch > 0 and self.merge > 0, "vision.patch and vision.merge must be > 0",
              "use positive sizes, e.g. patch 16, merge 2")
        _need(self.width % self.heads == 0, f"vision.width {self.width} is not divisible by "
              f"vision.heads {self.heads}", "pick heads that divide width")
        _need(self.layers >= 1, "vision.layers must be ≥ 1", "use at least one layer")

    def tokens(self, height: int, width: int) -> tuple[int, int]:
        """(encoder tokens, LLM tokens) of one H×W image."""
        cell = self.patch * self.merge
        gh, gw = math.ceil(height / cell), math.ceil(width / cell)
        return gh * gw * self.merge * self.merge, gh * gw


@dataclass(frozen=True)
class AudioConfig:
    """Whisper-style: two 1-D convs (the second stride 2) over a log-mel spectrogram, then a
    transformer; `stack` consecutive encoder frames become one LLM token."""

    n_mels: int = 80
    frames_per_second: int = 100  # spectrogram hop of 10 ms, as Whisper
    width: int = 128
    layers: int = 4
    heads: int = 2
    mlp_ratio: float = 4.0
    stack: int = 4

    def __post_init__(self) -> None:
        _need(self.width % self.heads == 0, f"audio.width {self.width} is not divisible by "
              f"audio.heads {self.heads}", "pick heads that divide width")
        _need(self.stack >= 1 and self.n_mels >= 1 and self.frames_per_second >= 1,
              "audio.stack, n_mels and frames_per_second must be ≥ 1", "use positive sizes")

    def frames(self, seconds: float) -> int:
        return max(1, math.ceil(seconds * self.frames_per_second))

    def tokens(self, frames: int) -> tuple[int, int]:
        """(encoder tokens, LLM tokens) of F spectrogram frames."""
        enc = math.ceil(frames / 2)
        return enc, math.ceil(enc / self.stack)


@dataclass(frozen=True)
class LMConfig:
    """Decoder-only LM: RMSNorm, grouped-query attention with RoPE, SwiGLU, tied embeddings."""

    vocab: int = 4096
    width: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    ffn: int = 768
    max_seq: int = 4096
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        _need(self.width % self.heads == 0, f"lm.width {self.width} is not divisible by "
              f"lm.heads {self.heads}", "pick heads that divide width")
        _need(self.heads % self.kv_heads == 0, f"lm.heads {self.heads} is not a multiple of "
              f"lm.kv_heads {self.kv_heads}", "pick kv_heads that divide heads")
        _need((self.width // self.heads) % 2 == 0, "lm head dim must be even (RoPE)",
              "make width / heads even")
        _need(self.vocab >= 2 and self.layers >= 1 and self.max_seq >= 2,
              "lm.vocab, layers and max_seq must be positive", "use positive sizes")

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


@dataclass(frozen=True)
class ModelConfig:
    """The whole reference model. `vision` / `audio` None: that modality is not supported
    (video needs vision). Weights are drawn from `seed`; `dtype` is a torch dtype name."""

    name: str = "ref-small"
    lm: LMConfig = field(default_factory=LMConfig)
    vision: VisionConfig | None = field(default_factory=VisionConfig)
    audio: AudioConfig | None = field(default_factory=AudioConfig)
    seed: int = 0
    dtype: str = "float32"
    kv_block: int = 16        # tokens per KV-cache block
    kv_tokens: int = 65536    # KV-cache capacity (tokens) when the caller gives none

    def __post_init__(self) -> None:
        _need(self.dtype in ("float32", "bfloat16", "float16"), f"dtype {self.dtype!r} is "
              "not supported", "use float32 (CPU), bfloat16 or float16 (CUDA)")
        _need(self.kv_block >= 1 and self.kv_tokens >= self.kv_block,
              "kv_block must be ≥ 1 and kv_tokens ≥ kv_block", "raise kv_tokens")

    @property
    def modalities(self) -> tuple[str, ...]:
        out = ["text"]
        if self.vision is not None:
            out += ["image", "video"]
        if self.audio is not None:
            out.append("audio")
        return tuple(out)

    @property
    def dtype_bytes(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token."""
        lm = self.lm
        return 2 * lm.layers * lm.kv_heads * lm.head_dim * self.dtype_bytes

    def with_(self, **changes: object) -> ModelConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


PRESETS: dict[str, ModelConfig] = {
    # for tests: everything tiny, still every part exercised
    "ref-tiny": ModelConfig(
        name="ref-tiny",
        lm=LMConfig(vocab=512, width=64, layers=2, heads=4, kv_heads=2, ffn=128, max_seq=1024),
        vision=VisionConfig(patch=16, merge=2, width=64, layers=2, heads=2, side=64),
        audio=AudioConfig(n_mels=32, width=64, layers=2, heads=2, stack=4),
        kv_tokens=8192),
    # the default: tens of multimodal requests per second on 2 CPU cores
    "ref-small": ModelConfig(name="ref-small"),
    # a GPU-sized member of the family (0.34 B parameters, bf16)
    "ref-base": ModelConfig(
        name="ref-base",
        lm=LMConfig(vocab=32000, width=1024, layers=16, heads=16, kv_heads=8, ffn=2816,
                    max_seq=8192),
        vision=VisionConfig(patch=14, merge=2, width=768, layers=12, heads=12, side=336),
        audio=AudioConfig(n_mels=128, width=512, layers=8, heads=8, stack=8),
        dtype="bfloat16", kv_tokens=262144),
}


def get_config(name: str, **changes: object) -> ModelConfig:
    """A preset by name, optionally with top-level fields changed (seed, dtype, kv_tokens…)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}. Fix: use one of "
                         f"{', '.join(PRESETS)}")
    cfg = PRESETS[name]
    return cfg.with_(**changes) if changes else cfg
