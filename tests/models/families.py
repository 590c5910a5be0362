"""Abridged configs of the families beyond examples/models/ (only the keys hastune reads, with
the values of each model's published config.json on the Hugging Face Hub), and the published
parameter counts (the Hub's safetensors figure or the model card)."""

from __future__ import annotations

WHISPER_L3 = {"model_type": "whisper", "d_model": 1280, "encoder_layers": 32,
              "encoder_attention_heads": 20, "encoder_ffn_dim": 5120, "num_mel_bins": 128,
              "max_source_positions": 1500}
LLAMA31_8B_TEXT = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                   "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "vocab_size": 128256}

CONFIGS: dict[str, dict] = {
    # google/gemma-3-27b-it: SigLIP-400M vision tower, 5 local : 1 global layers
    "gemma-3-27b-it": {
        "model_type": "gemma3", "mm_tokens_per_image": 256,
        "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
                        "intermediate_size": 21504, "num_hidden_layers": 62,
                        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128,
                        "sliding_window": 1024, "sliding_window_pattern": 6,
                        "vocab_size": 262208, "hidden_activation": "gelu_pytorch_tanh"},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152,
                          "intermediate_size": 4304, "num_hidden_layers": 27,
                          "num_attention_heads": 16, "image_size": 896, "patch_size": 14}},
    # Qwen/Qwen2-Audio-7B: Whisper-large-v3-like encoder, Qwen-7B LLM
    "qwen2-audio-7b": {
        "model_type": "qwen2_audio",
        "audio_config": {**WHISPER_L3, "model_type": "qwen2_audio_encoder"},
        "text_config": {"model_type": "qwen2", "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 32, "num_attention_heads": 32,
                        "num_key_value_heads": 32, "vocab_size": 156032}},
    # fixie-ai/ultravox-v0_5-llama-3_1-8b: Whisper-large-v3-turbo encoder, stack 8, SwiGLU
    "ultravox-v0.5-llama-3.1-8b": {
        "model_type": "ultravox", "stack_factor": 8, "hidden_size": 4096,
        "projector_act": "swiglu", "audio_config": WHISPER_L3, "text_config": LLAMA31_8B_TEXT},
    # OpenGVLab/InternVL2_5-8B: InternViT-300M-448px-V2.5 + InternLM2.5-7B-chat
    "internvl2.5-8b": {
        "model_type": "internvl_chat", "downsample_ratio": 0.5, "force_image_size": 448,
        "max_dynamic_patch": 12, "min_dynamic_patch": 1, "use_thumbnail": True,
        "dynamic_image_size": True, "select_layer": -1,
        "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024,
                          "intermediate_size": 4096, "num_hidden_layers": 24,
                          "num_attention_heads": 16, "image_size": 448, "patch_size": 14,
                          "hidden_act": "gelu"},
        "llm_config": {"model_type": "internlm2", "hidden_size": 4096,
                       "intermediate_size": 14336, "num_hidden_layers": 32,
                       "num_attention_heads": 32, "num_key_value_heads": 8,
                       "vocab_size": 92553, "bias": False}},
    # Qwen/Qwen1.5-MoE-A2.7B (qwen2_moe): 60 experts, 4 per token, a gated shared expert
    "qwen1.5-moe-a2.7b": {
        "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
        "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
        "decoder_sparse_step": 1},
    # deepseek-ai/DeepSeek-V2-Lite: MLA without q compression, 64 experts + 2 shared
    "deepseek-v2-lite": {
        "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
        "vocab_size": 102400, "q_lora_rank": None, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "moe_layer_freq": 1},
    # microsoft/Phi-3-mini-4k-instruct
    "phi-3-mini-4k": {
        "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "vocab_size": 32064, "sliding_window": 2047, "max_position_embeddings": 4096},
    # Qwen/Qwen3-8B: q/k-norm, no biases
    "qwen3-8b": {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "vocab_size": 151936, "tie_word_embeddings": False},
}

# (total, active) parameters as published
PUBLISHED: dict[str, tuple[float, float]] = {
    "gemma-3-27b-it": (27.4e9, 27.4e9),
    "qwen2-audio-7b": (8.4e9, 8.4e9),
    "ultravox-v0.5-llama-3.1-8b": (8.7e9, 8.7e9),
    "internvl2.5-8b": (8.08e9, 8.08e9),
    "qwen1.5-moe-a2.7b": (14.3e9, 2.7e9),
    "deepseek-v2-lite": (15.7e9, 2.4e9),
    "phi-3-mini-4k": (3.82e9, 3.82e9),
    "qwen3-8b": (8.19e9, 8.19e9),
}
