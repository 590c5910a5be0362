"""The LLM of a Hugging Face config: dense decoders (Llama, Mistral, Qwen2/3, Gemma 1/2/3,
Phi-3, Qwen3.5) and MoE decoders (Mixtral, Qwen2-MoE, Qwen3-MoE, Qwen3.5-MoE, DeepSeek-V2/V3
with MLA, DeepSeek-V3.2 and GLM-5 with MLA and DSA, MiniMax-M2, gpt-oss). Qwen3.5's layers are
Gated DeltaNet (linear attention) but for every full_attention_interval-th."""

from __future__ import annotations

from hastune.models.cfg import MAX_LAYERS, Cfg
from hastune.models.spec import LLMArch

# model_type → (family, default tie_word_embeddings), as transformers' configuration classes
DENSE = {"llama": False, "mistral": False, "qwen2": False, "qwen3": False, "phi3": False,
         "gemma": True, "gemma2": True, "gemma3_text": True, "qwen2_5_vl_text": False,
         "qwen2_vl_text": False, "internlm2": False, "qwen3_5_text": False}
MOE = {"mixtral": False, "qwen2_moe": False, "qwen3_moe": False, "deepseek_v2": False,
       "deepseek_v3": False, "kimi_k2": False, "minimax_m2": False, "gpt_oss": False,
       "deepseek_v32": False, "glm_moe_dsa": False, "qwen3_5_moe_text": False}
# Kimi K2: DeepSeek-V3's architecture; DeepSeek-V3.2 and GLM-5: it with DSA
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
DSA_TYPES = ("deepseek_v32", "glm_moe_dsa")
GDN_TYPES = ("qwen3_5_text", "qwen3_5_moe_text")   # Gated DeltaNet beside full attention
# mamba_ssm_dtype → bytes of the recurrent state (SGLang's mamba2_state_dtype: float32 unless
# the config names another)
STATE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DECODERS = {**DENSE, **MOE}

# the most parameters a model may have (the largest published ones have about 2 × 10^12)
MAX_PARAMS = 1e14
# activations of a gated MLP (SwiGLU / GeGLU); anything else is refused by name
GATED_ACTS = {"silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_tanh"}
# quantization_config.quant_method values whose weights are fp8
FP8_METHODS = {"fp8", "fbgemm_fp8"}
# gpt-oss as published: MXFP4 experts (4-bit values, a shared 8-bit exponent per 32), the
# attention, router, embeddings and LM head in bf16; timed and sized as the precision a
# recipe names (bf16 unless it names one), the checkpoint's format kept for the record
OWN_FORMATS = {"mxfp4": "mxfp4"}


def checkpoint_precision(c: Cfg) -> str:
    """bf16; fp8 for an fp8 quantization_config; nvfp4 for ModelOpt's NVFP4; mxfp4 for
    gpt-oss's own format (OWN_FORMATS), int4 for compressed-tensors' weight-only int4 groups
    (both on the routed experts: hastune.models.spec.EXPERTS_ONLY); anything else is
    refused."""
    q = c.sub("quantization_config", None)
    if q is None:
        return "bf16"
    method = q.str("quant_method")
    if method in FP8_METHODS:
        return "fp8"
    if method in OWN_FORMATS:
        return OWN_FORMATS[method]
    algo = str(q.raw("quant_algo", "")).upper()
    if method == "modelopt" and algo in ("FP8", "NVFP4"):
        return algo.lower()
    if method == "compressed-tensors":  # weight-only int4 groups (Kimi K2.5's experts)
        groups = q.raw("config_groups", None)
        w = [g.get("weights") or {} for g in groups.values()] \
            if isinstance(groups, dict) and all(isinstance(g, dict) for g in groups.values()) \
            else []
        if w and all(x.get("num_bits") == 4 and x.get("type") == "int" for x in w):
            return "int4"
    raise q.error("quant_method", f"quantization {method!r} is not modelled (fp8, NVFP4 "
                  "only)",
                  "use the bf16 or fp8 checkpoint's config.json, or remove "
                  "quantization_config to model the bf16 weights")


def _activation(c: Cfg, model_type: str) -> bool:
    name = "hidden_activation" if model_type.startswith("gemma") and c.has(
        "hidden_activation") else "hidden_act"
    act = c.str(name, "silu")
    if act not in GATED_ACTS:
        raise c.error(name, f"activation {act!r} is not modelled",
                      f"use one of {', '.join(sorted(GATED_ACTS))} (a gated MLP)")
    return True


def _sliding(c: Cfg, model_type: str, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """(window, ids of the sliding layers)."""
    window = c.int("sliding_window", None)
    types = c.raw("layer_types", None)
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or any(
                t not in ("sliding_attention", "full_attention") for t in types):
            raise c.error("layer_types", "not a list of num_hidden_layers entries, each "
                          "sliding_attention or full_attention", "correct the list")
        ids = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
        if ids and window is None:
            raise c.error("sliding_window", "missing (layer_types has sliding layers)",
                          "add sliding_window")
        return (window if ids else None), ids
    if window is None:
        return None, ()
    if model_type == "gemma2":                         # even layers slide
        return window, tuple(range(0, layers, 2))
    if model_type == "gemma3_text":                    # 5 local : 1 global by default
        pattern = c.int("sliding_window_pattern", 6)
        return window, tuple(i for i in range(layers) if (i + 1) % pattern)
    if model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen2_5_vl_text"):
        if not c.bool("use_sliding_window", False):
            return None, ()
        first = c.int("max_window_layers", layers, minimum=0)
        return window, tuple(range(first, layers))
    if model_type in ("mistral", "mixtral", "phi3"):
        if window >= c.int("max_position_embeddings", window + 1):
            return None, ()                             # a window past the context: none
        return window, tuple(range(layers))
    return None, ()


def _moe(c: Cfg, model_type: str, layers: int, hidden: int) -> dict:
    if model_type in ("mixtral", "minimax_m2", "gpt_oss"):  # every layer MoE, no dense FFN
        ffn = c.int("intermediate_size")
        shared = c.int("shared_intermediate_size", 0, minimum=0) \
            if model_type == "minimax_m2" else 0
        return {"experts": c.int("num_local_experts"), "experts_per_token":
                c.int("num_experts_per_tok"), "moe_ffn": ffn, "shared_ffn": shared}
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_5_moe_text"):
        step = c.int("decoder_sparse_step", 1)
        only = set(c.int_list("mlp_only_layers", []))
        sparse = sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)
        shared = c.int("shared_expert_intermediate_size", 0, minimum=0) \
            if model_type != "qwen3_moe" else 0
        return {"experts": c.int("num_experts"), "experts_per_token": c.int("num_experts_per_tok"),
                "moe_ffn": c.int("moe_intermediate_size"), "shared_ffn": shared,
                "shared_gate": shared > 0, "dense_layers": layers - sparse}
    # deepseek_v2 / v3, kimi_k2
    first = c.int("first_k_dense_replace", 0, minimum=0)
    freq = c.int("moe_layer_freq", 1)
    sparse = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    moe_ffn = c.int("moe_intermediate_size")
    return {"experts": c.int("n_routed_experts"), "experts_per_token": c.int("num_experts_per_tok"),
            "moe_ffn": moe_ffn, "shared_ffn": c.int("n_shared_experts", 0, minimum=0) * moe_ffn,
            "dense_layers": layers - sparse}


def _gdn(c: Cfg, layers: int) -> dict:
    """Qwen3.5's Gated DeltaNet layers: layer_types (linear_attention / full_attention), or
    every full_attention_interval-th layer full."""
    types = c.raw("layer_types", None)
    if types is None:
        every = c.int("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention"
                 for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or any(
            t not in ("linear_attention", "full_attention") for t in types):
        raise c.error("layer_types", "not a list of num_hidden_layers entries, each "
                      "linear_attention or full_attention", "correct the list")
    dtype = c.str("mamba_ssm_dtype", "float32")
    return {"linear_layer_ids": tuple(i for i, t in enumerate(types)
                                      if t == "linear_attention"),
            "linear_k_heads": c.int("linear_num_key_heads"),
            "linear_v_heads": c.int("linear_num_value_heads"),
            "linear_k_dim": c.int("linear_key_head_dim"),
            "linear_v_dim": c.int("linear_value_head_dim"),
            "linear_conv": c.int("linear_conv_kernel_dim"),
            "state_bytes": STATE_BYTES.get(dtype, 4),
            "output_gate": c.bool("attn_output_gate", True)}


def _mla(c: Cfg) -> dict:
    rope, nope = c.int("qk_rope_head_dim"), c.int("qk_nope_head_dim")
    # q_lora_rank null (or absent): q projected directly (DeepSeek-V2-Lite); 0 is no rank
    return {"q_lora_rank": c.int("q_lora_rank", None) or 0, "kv_lora_rank":
            c.int("kv_lora_rank"), "qk_rope_head_dim": rope, "qk_nope_head_dim": nope,
            "v_head_dim": c.int("v_head_dim"), "head_dim": rope + nope,
            "mtp_layers": c.int("num_nextn_predict_layers", 0, minimum=0)}


def read_llm(c: Cfg, model_type: str, tie_default: bool | None = None,
             precision: str | None = None) -> LLMArch:
    """The LLM of one text config (`model_type` already checked against DECODERS)."""
    layers, hidden = c.int("num_hidden_layers", maximum=MAX_LAYERS), c.int("hidden_size")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise c.error("num_key_value_heads", f"{heads} attention heads do not split into "
                      f"{kv_heads} KV groups", "use a divisor of num_attention_heads")
    head_dim = c.int("head_dim", None) or hidden // heads
    if not c.has("head_dim") and hidden % heads:
        raise c.error("head_dim", f"missing, and hidden_size {hidden} is not a multiple of "
                      f"num_attention_heads {heads}", "add head_dim")
    window, ids = _sliding(c, model_type, layers) if model_type not in GDN_TYPES else (None, ())
    fields: dict = {
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads,
        "head_dim": head_dim,  # Qwen3.5-MoE has no dense layer, nor their width
        "ffn": c.int("intermediate_size", 0, minimum=0) if model_type == "qwen3_5_moe_text"
        else c.int("intermediate_size"),
        "vocab": c.int("vocab_size"), "gated": _activation(c, model_type),
        "tied_embeddings": c.bool("tie_word_embeddings", DECODERS[model_type]
                                  if tie_default is None else tie_default),
        "sliding_window": window, "sliding_layers": len(ids), "sliding_layer_ids": ids,
        "final_norm": True,
        "checkpoint_precision": precision or checkpoint_precision(c),
    }
    if model_type in ("qwen2", "qwen2_moe", "qwen2_5_vl_text", "qwen2_vl_text"):
        fields["qkv_bias"] = True
    elif model_type in ("llama", "mistral", "qwen3", "qwen3_moe", "internlm2", "gpt_oss",
                        *GDN_TYPES):
        fields["qkv_bias"] = c.bool("attention_bias", False) if model_type != "internlm2" \
            else c.bool("bias", False)
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text", *GDN_TYPES) or (
            model_type == "minimax_m2" and c.bool("use_qk_norm", False)):
        fields["qk_norm"] = True
    if model_type in ("gemma2", "gemma3_text"):
        fields["norms_per_layer"] = 4
    if model_type in MOE:
        fields.update(_moe(c, model_type, layers, hidden))
    if model_type in MLA_TYPES:
        fields.update(_mla(c))
    if model_type in GDN_TYPES:
        fields.update(_gdn(c, layers))
    if model_type in DSA_TYPES:
        fields.update(index_topk=c.int("index_topk"), index_heads=c.int("index_n_heads"),
                      index_head_dim=c.int("index_head_dim"))
    llm = LLMArch(**fields)
    if not llm.params <= MAX_PARAMS:
        raise c.error("num_hidden_layers", f"{layers:,} layers of hidden size {hidden:,} make "
                      f"{llm.params:.3g} parameters, over the {MAX_PARAMS:.0e} limit",
                      "check num_hidden_layers, hidden_size, intermediate_size and "
                      "vocab_size against the published config")
    return llm
