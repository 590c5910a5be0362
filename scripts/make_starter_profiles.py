"""Write the starter profiles in profiles/ from model shapes and nominal GPU specs.

These are first-principles estimates (FLOPs / peak × efficiency, bytes / bandwidth), NOT fitted
on measurements; calibrated profiles replace them (see docs/profiles.md when it lands).
Run: python scripts/make_starter_profiles.py
"""

from __future__ import annotations

from pathlib import Path

import yaml

GPUS = {
    # name: (peak bf16 dense FLOP/s, HBM bytes/s, memory bytes)
    "a100-80gb": (312e12, 2.039e12, 80 * 1024**3),
}

# LLM: params, layers, hidden, kv heads, head dim; encoder: params, seq-attention FLOP factor
MODELS = {
    "llava-v1.6-34b": dict(
        llm_params=34.4e9, layers=60, hidden=7168, kv_heads=8, head_dim=128,
        enc_params=0.304e9 + 0.058e9, enc_sq=0.0,  # CLIP attention is tile-local: in per-token
        enc_note="CLIP ViT-L/14-336 + 2-layer MLP projector; AnyRes tiles",
    ),
    "qwen2.5-vl-32b": dict(
        llm_params=32.5e9, layers=64, hidden=5120, kv_heads=8, head_dim=128,
        enc_params=0.675e9, enc_sq=4 * 4 * 1280,  # 4 full-attention layers over all patches
        enc_note="dynamic-resolution ViT (window attention, 4 full layers), 2x2 patch merger",
    ),
    "ultravox-v0.6-27b": dict(
        llm_params=27.4e9, layers=62, hidden=5376, kv_heads=16, head_dim=128,
        enc_params=0.635e9 + 0.1e9, enc_sq=32 * 4 * 1280,  # Whisper full attention per window
        enc_note="Whisper-large-v3 encoder + stacking projector (stack 8)",
    ),
}

MFU_PREFILL, MFU_ENCODE, MBU_DECODE = 0.6, 0.4, 0.8
# Encode SM saturation share per batch size, chosen so a 20% latency budget reproduces the
# EAServe seed's table (1→20%, 2→30%, 4→40%, 6→60%, 8→75%), with rel(f) = (f_sat/f)^0.53 below
# saturation (the seed's 500 ms at 10% vs 280 ms at 30%).
F_SAT = {1: 0.28, 2: 0.42, 4: 0.56, 6: 0.85, 8: 1.0}
SHAPE = 0.53
SHARES = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]


def sm_curve(f_sat: float) -> list[list[float]]:
    return [[s, round(max(1.0, (f_sat / s) ** SHAPE), 4)] for s in SHARES]


def profile(model: str, gpu: str) -> dict:
    m = MODELS[model]
    peak, bw, mem = GPUS[gpu]
    kv = 2 * m["layers"] * m["kv_heads"] * m["head_dim"] * 2
    weights = m["llm_params"] * 2
    return {
        "kind": "profile",
        "name": f"{model}@{gpu}",
        "model": model,
        "gpu": gpu,
        "source": "STARTER: first-principles estimate from model shape and nominal GPU specs; "
                  "not fitted on measurements. Replace with a calibrated profile.",
        "method": f"prefill = 2·params/(peak·{MFU_PREFILL}) per token + causal attention; "
                  f"decode step = weights/(HBM·{MBU_DECODE}) + KV read; "
                  f"encode = 2·encoder params/(peak·{MFU_ENCODE}) per token; "
                  f"SM curves from the EAServe seed. Encoder: {m['enc_note']}",
        "memory": {
            "gpu_bytes": float(mem),
            "weight_bytes": weights,
            "encoder_weight_bytes": m["enc_params"] * 2,
            "kv_bytes_per_token": float(kv),
            "activation_bytes": 2e9,
            "utilisation": 0.9,
        },
        "embedding_bytes_per_token": float(m["hidden"] * 2),
        "encode": {
            "fixed_s": 0.003,
            "per_item_s": 0.001,
            "per_token_s": float(f"{2 * m['enc_params'] / (peak * MFU_ENCODE):.4g}"),
            "per_token_sq_s": float(f"{m['enc_sq'] / (peak * MFU_ENCODE):.4g}"),
            "sm_curve": {b: sm_curve(f) for b, f in F_SAT.items()},
        },
        "prefill": {
            "fixed_s": 0.015,
            "per_token_s": float(f"{2 * m['llm_params'] / (peak * MFU_PREFILL):.4g}"),
            "per_token_sq_s": float(f"{2 * m['layers'] * m['hidden'] / (peak * 0.5):.4g}"),
            "max_batch_tokens": 8192,
        },
        "decode": {
            "fixed_s": float(f"{weights / (bw * MBU_DECODE) + 0.003:.4g}"),
            "per_seq_s": float(f"{2 * m['llm_params'] / (peak * 0.6) * 0.25:.4g}"),
            "per_context_token_s": float(f"{kv / (bw * 0.7):.4g}"),
            "max_batch": 256,
        },
    }


def main() -> None:
    root = Path(__file__).resolve().parent.parent / "profiles"
    for gpu in GPUS:
        for model in MODELS:
            out = root / gpu / f"{model}.yaml"
            out.parent.mkdir(parents=True, exist_ok=True)
            header = ("# STARTER PROFILE — estimated from model shape and nominal GPU specs, not "
                      "measured.\n# It will be replaced by a calibrated profile. Regenerate: "
                      "python scripts/make_starter_profiles.py\n")
            out.write_text(header + yaml.safe_dump(profile(model, gpu), sort_keys=False,
                                                    allow_unicode=True, default_flow_style=None))
            print("wrote", out)


if __name__ == "__main__":
    main()
