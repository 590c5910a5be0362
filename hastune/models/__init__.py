"""Models: the latency model's description of an LLM (dense or MoE, GQA or MLA) and its
encoder, read from a Hugging Face config.json or taken from the shipped six.

Core layer: imports nothing of hastune but errors (tests/test_layering.py).
"""

from __future__ import annotations

from hastune.models.hf import SUPPORTED, load_model, read_config
from hastune.models.spec import EncoderArch, LLMArch, ModelArch, PayloadRule

__all__ = ["SUPPORTED", "EncoderArch", "LLMArch", "ModelArch", "PayloadRule", "load_model",
           "read_config"]
