"""The six models hastune shipped before it read Hugging Face configs (issue 12): the
shapes their calibrated profiles in profiles/ were built from.

Figures are from each model's published config (Hugging Face `config.json`). They keep the
counting the profiles were fitted with (no biases, no final norm), so the profiles stay
byte-identical; `hastune.models.read_config` counts those for configs it reads.
"""

from __future__ import annotations

import math

from hastune.models.spec import EncoderArch, LLMArch, ModelArch

CLIP_L336 = EncoderArch(
    name="CLIP ViT-L/14-336 + mlp2x_gelu projector", scheme="tiles",
    # vLLM runs the 23 layers up to LLaVA's feature layer (-2), not the 24th
    layers=23, hidden=1024, heads=16, head_dim=64, ffn=4096, gated=False, seq=577,
    stem=((576 / 577, 3 * 14 * 14, 1024),),
    projector=((576 / 577, 1024, 7168), (576 / 577, 7168, 7168)),
    note="AnyRes: up to 4 tiles + a base image, 577 tokens each, attention within a tile",
)

QWEN25_VL_VIT = EncoderArch(
    name="Qwen2.5-VL ViT (window attention, 4 full layers) + 2x2 patch merger",
    scheme="qwen-window", layers=32, hidden=1280, heads=16, head_dim=80, ffn=3456, gated=True,
    window=64, full_layers=4,
    stem=((1.0, 3 * 2 * 14 * 14, 1280),),          # Conv3d patch embedding as one GEMM
    projector=((0.25, 4 * 1280, 5120), (0.25, 5120, 5120)),
    note="14 px patches, 2-frame temporal patches; window attention over 8x8 patches, full "
         "attention within a frame group on layers 7, 15, 23, 31; merger folds 2x2 patches",
)

WHISPER_L3 = EncoderArch(
    name="Whisper-large-v3 encoder + Ultravox SwiGLU projector (stack 8)", scheme="whisper",
    layers=32, hidden=1280, heads=20, head_dim=64, ffn=5120, gated=False, seq=1500,
    # conv1 over 3,000 mel frames (2 per output frame, 128 mels × 3 taps), conv2 stride 2
    stem=((2.0, 128 * 3, 1280), (1.0, 1280 * 3, 1280)),
    projector=((1 / 8, 1280 * 8, 4096), (1 / 8, 2048, 5376)),
    note="one 1,500-frame sequence per 30 s window; frames stacked by 8 into the projector",
)

YI_34B = LLMArch(layers=60, hidden=7168, heads=56, kv_heads=8, head_dim=128, ffn=20480,
                 vocab=64000)
QWEN25_32B = LLMArch(layers=64, hidden=5120, heads=40, kv_heads=8, head_dim=128, ffn=27648,
                     vocab=152064)
GEMMA3_27B = LLMArch(layers=62, hidden=5376, heads=32, kv_heads=16, head_dim=128, ffn=21504,
                     vocab=262208, tied_embeddings=True, sliding_window=1024,
                     sliding_layers=52)   # 5 local : 1 global
LLAMA_30B = LLMArch(layers=60, hidden=6656, heads=52, kv_heads=52, head_dim=128, ffn=17920,
                    vocab=32000)
CODELLAMA_34B = LLMArch(layers=48, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=22016,
                        vocab=32000)
QWEN2_72B = LLMArch(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=29568,
                    vocab=152064)


def _qwen_payloads() -> tuple[tuple[float, float], ...]:
    out = []
    for side in (224, 448, 672, 896, 1344):           # images: one frame group
        per = (math.ceil(side / 28) * 2) ** 2
        out.append((float(per), 1.0))
    for side, frames in ((336, 8), (448, 8), (448, 16), (448, 32)):   # videos
        per = (math.ceil(side / 28) * 2) ** 2
        groups = math.ceil(frames / 2)
        out.append((float(per * groups), float(groups)))
    return tuple(out)


MODELS: dict[str, ModelArch] = {
    "llava-v1.6-34b": ModelArch(
        "llava-v1.6-34b", YI_34B, CLIP_L336, note="Yi-34B (Nous-Hermes-2) LLM",
        payloads=tuple((577.0 * t, float(t)) for t in (1, 2, 3, 4, 5))),
    "qwen2.5-vl-32b": ModelArch(
        "qwen2.5-vl-32b", QWEN25_32B, QWEN25_VL_VIT, note="Qwen2.5-32B LLM",
        payloads=_qwen_payloads()),
    "ultravox-v0.6-27b": ModelArch(
        "ultravox-v0.6-27b", GEMMA3_27B, WHISPER_L3,
        note="Gemma-3-27B LLM (5 sliding-window layers per global one)",
        payloads=tuple((1500.0 * w, float(w)) for w in (1, 2, 3, 4))),
    "llama-30b": ModelArch("llama-30b", LLAMA_30B, note="LLaMA-1 33B, multi-head attention"),
    "codellama2-34b": ModelArch("codellama2-34b", CODELLAMA_34B, note="CodeLlama-34B, GQA"),
    "qwen2-72b": ModelArch("qwen2-72b", QWEN2_72B, note="Qwen2-72B, GQA"),
}
