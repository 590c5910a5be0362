"""Which models the pinned engines serve, and which they can disaggregate the encoder of: read
from each engine's wheel (hastune/export/engine_models.json says which files, with the wheel's
sha256), so that an export is refused where the engine would refuse the model at start.

- vLLM 0.33.0: an architecture its registry lists for generation (its own models and its
  Transformers backend's); an encode-only instance (E/P/D) needs a multimodal one.
- SGLang 0.5.23: an architecture with a model class (a module's EntryClass); any other falls
  back to its TransformersForCausalLM, which serves text only — refused for a multimodal
  model; `--encoder-only` / `--language-only` (E/P/D) only for the architectures its
  pd_disaggregation hook lists.
- Dynamo runs either as its backend.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from hastune.archs.deploy import Topology

FILE = Path(__file__).with_name("engine_models.json")


@cache
def tables() -> dict:
    return json.loads(FILE.read_text())


def model_blocking(engine: str, architecture: str | None, topology: Topology,
                   multimodal: bool) -> list[str]:
    """Why `engine` ("vllm" or "sglang") would refuse a model of HF `architecture` in a
    deployment of `topology` (empty: it would not; an unknown architecture: nothing said)."""
    if architecture is None or engine not in ("vllm", "sglang"):
        return []
    t = tables()[engine]
    name = f"{'vLLM' if engine == 'vllm' else 'SGLang'} {t['version']}"
    if engine == "vllm":
        if architecture not in t["generate"]:
            return [f"{name}'s model registry has no {architecture} "
                    "(vllm/model_executor/models/registry.py): it would not load the model"]
        if topology.moves_embeddings and architecture not in t["multimodal"]:
            return [f"{name} runs an encode-only instance only for a multimodal model; "
                    f"{architecture} is not one in its registry"]
        return []
    if architecture not in t["generate"] and multimodal:
        return [f"{name} has no model class for {architecture}: its Transformers fallback "
                "serves text only, not the workload's media"]
    if topology.moves_embeddings and architecture not in t["epd"]:
        return [f"{name} refuses --encoder-only / --language-only for {architecture} ("
                "sglang/srt/arg_groups/pd_disaggregation_hook.py: 'is not supported for "
                f"encoder disaggregation'; it accepts {len(t['epd'])} architectures, "
                "Qwen2/2.5/3-VL, Qwen3.5, Kimi-VL, Qwen2-Audio among them)"]
    return []
