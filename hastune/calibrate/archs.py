"""Model architectures: the shapes the latency model is composed from.

The dataclasses live in hastune.models.spec (the core layer, so recipes and the Hugging Face
config reader can build them) and the six shipped models in hastune.models.shipped; this module
keeps the names the calibration code has always imported. `hastune.models.load_model` reads
any supported config.json into the same `ModelArch`.
"""

from __future__ import annotations

from hastune.models import shipped
from hastune.models.shipped import MODELS
from hastune.models.spec import EncoderArch, LLMArch, ModelArch, PayloadRule

CLIP_L336, QWEN25_VL_VIT, WHISPER_L3 = shipped.CLIP_L336, shipped.QWEN25_VL_VIT, shipped.WHISPER_L3
YI_34B, QWEN25_32B, GEMMA3_27B = shipped.YI_34B, shipped.QWEN25_32B, shipped.GEMMA3_27B
LLAMA_30B, CODELLAMA_34B, QWEN2_72B = shipped.LLAMA_30B, shipped.CODELLAMA_34B, shipped.QWEN2_72B

__all__ = ["CLIP_L336", "CODELLAMA_34B", "GEMMA3_27B", "LLAMA_30B", "MODELS", "QWEN2_72B",
           "QWEN25_32B", "QWEN25_VL_VIT", "WHISPER_L3", "YI_34B", "EncoderArch", "LLMArch",
           "ModelArch", "PayloadRule"]
