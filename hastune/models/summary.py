"""What `hastune model inspect` prints: a model's size, memory and parallelism, as one mapping
(the --json output; the table is drawn from it)."""

from __future__ import annotations

from hastune.models.spec import PRECISIONS, ModelArch
from hastune.models.tokens import audio_tokens, image_tokens

TP_CANDIDATES = (1, 2, 4, 8, 16)
EP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


def family_of(m: ModelArch) -> str:
    if m.family:
        return m.family
    a = m.llm
    kind = "MoE" if a.moe else "dense"
    return f"shipped ({kind}{', sliding window' if a.sliding_layers else ''})" + (
        " + encoder" if m.encoder else "")


def _encoder(m: ModelArch, image: tuple[int, int], seconds: float) -> dict | None:
    e = m.encoder
    if e is None:
        return None
    out: dict = {"name": e.name, "params": int(e.params),
                 "weight_bytes": {"bf16": e.weight_bytes()}, "layers": e.layers,
                 "hidden": e.hidden, "heads": e.heads, "scheme": e.scheme, "note": e.note}
    r = e.payload
    if r is None:
        out["payload"] = None            # shipped encoders: the workload's schemes decide
    elif r.kind == "audio":
        t = audio_tokens(r, seconds)
        out["payload"] = {"kind": "audio", "seconds": seconds, "encoder_tokens": t.encoder_tokens,
                          "windows": t.groups, "llm_tokens": t.llm_tokens,
                          "llm_tokens_per_second": r.llm_per_second}
    else:
        w, h = image
        t = image_tokens(r, w, h)
        out["payload"] = {"kind": r.kind, "image": f"{w}x{h}", "encoder_tokens": t.encoder_tokens,
                          "groups": t.groups, "llm_tokens": t.llm_tokens}
    return out


def summary(m: ModelArch, image: tuple[int, int] = (1024, 768), seconds: float = 30.0) -> dict:
    """Sizes in parameters and bytes; bytes per GPU where a TP degree is given."""
    a = m.llm
    tps = [tp for tp in TP_CANDIDATES if a.supports_tp(tp)]
    out: dict = {
        "name": m.name, "family": family_of(m), "source": m.source or "shipped",
        "params": int(m.params), "active_params": int(m.active_params),
        "active_params_read": int(m.active_params_read),
        "llm_params": int(a.params), "llm_active_params": int(a.active_params),
        "checkpoint_precision": a.checkpoint_precision,
        "weight_bytes": {p: a.weight_bytes(1, p) + (m.encoder.weight_bytes() if m.encoder
                                                   else 0.0) for p in PRECISIONS},
        "llm_weight_bytes_per_gpu": {p: {str(tp): a.weight_bytes(tp, p) for tp in tps}
                                     for p in PRECISIONS},
        "kv_bytes_per_token": {p: {str(tp): a.kv_bytes_per_token(tp, p) for tp in tps}
                               for p in PRECISIONS},
        "layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads,
        "head_dim": a.head_dim, "vocab": a.vocab,
        "kv_heads_per_gpu": {str(tp): (1 if a.mla else a.kv_heads_per_gpu(tp)) for tp in tps},
        "tp_degrees": tps,
        "sliding_window": a.sliding_window, "sliding_layers": a.sliding_layers,
        "moe": None, "mla": None, "note": m.note,
    }
    if a.moe:
        eps = [ep for ep in EP_CANDIDATES if a.supports_ep(ep)]
        out["moe"] = {"experts": a.experts, "experts_per_token": a.experts_per_token,
                      "moe_ffn": a.moe_ffn, "shared_ffn": a.shared_ffn,
                      "moe_layers": a.moe_layers, "dense_layers": a.dense_layers,
                      "ep_degrees": eps}
        out["ep_degrees"] = eps
    if a.mla:
        out["mla"] = {"q_lora_rank": a.q_lora_rank, "kv_lora_rank": a.kv_lora_rank,
                      "qk_rope_head_dim": a.qk_rope_head_dim,
                      "qk_nope_head_dim": a.qk_nope_head_dim, "v_head_dim": a.v_head_dim,
                      "kv_cache": "compressed latent (kv_lora_rank + qk_rope_head_dim per "
                                  "layer), held whole on every GPU of the TP group"}
    out["encoder"] = _encoder(m, image, seconds)
    return out
