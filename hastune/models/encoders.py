"""The encoder of a composite multimodal config: CLIP ViT (LLaVA / LLaVA-NeXT), SigLIP (Gemma
3), InternViT (InternVL), the Qwen2.5-VL window-attention ViT, Whisper (Ultravox, Qwen2-Audio);
each with its projector into the LLM and the rule that turns a payload into tokens."""

from __future__ import annotations

from hastune.models.cfg import MAX_LAYERS, Cfg
from hastune.models.spec import EncoderArch, PayloadRule

NOT_GATED = {"quick_gelu", "gelu", "gelu_pytorch_tanh", "gelu_new"}


def _act(v: Cfg, default: str) -> bool:
    act = v.str("hidden_act", default)
    if act in NOT_GATED:
        return False
    if act in ("silu", "swish"):
        return True
    raise v.error("hidden_act", f"activation {act!r} is not modelled",
                  f"use one of {', '.join(sorted(NOT_GATED | {'silu'}))}")


def _side(v: Cfg, name: str, *default: int) -> int:
    """An int, or an [h, w] list of two equal ints (transformers' newer vision configs);
    required unless a default is given."""
    raw = v.raw(name, *default)
    if isinstance(raw, list):
        sides = v.int_list(name, minimum=1)
        if len(sides) != 2 or sides[0] != sides[1]:
            raise v.error(name, f"{raw!r}: only square sizes are modelled", "use one size")
        return sides[0]
    return v.int(name, *default)


def _tile(v: Cfg, size: int, patch: int) -> tuple[int, int]:
    """(image side, patch side), refused where not one patch fits in the image."""
    if size < patch:
        raise v.error("image_size", f"{size} px is smaller than one patch ({patch} px)",
                      "give the tower's image side in pixels (e.g. 336 for CLIP ViT-L/14)")
    return size, patch


def _feature_layers(c: Cfg, key: str, layers: int, default: int) -> int:
    """Layers an engine runs up to the feature layer (vLLM drops the ones after it)."""
    if isinstance(c.raw(key, default), list):
        raise c.error(key, "several feature layers are not modelled", "use one layer index")
    sel = c.int(key, default, minimum=-layers)
    if sel == 0 or sel > layers:
        raise c.error(key, f"{sel} is not a layer of the encoder's {layers}",
                      f"use a layer in -{layers}..-1 or 1..{layers}")
    return layers + sel + 1 if sel < 0 else sel


def clip(c: Cfg, text_hidden: int, pre: Cfg | None, anyres: bool) -> EncoderArch:
    """LLaVA(-NeXT): CLIP ViT + 2-layer GELU MLP projector."""
    v = c.sub("vision_config")
    mt = v.str("model_type", "clip_vision_model")
    if mt not in ("clip_vision_model", "siglip_vision_model"):
        raise v.error("model_type", f"vision tower {mt!r} is not modelled",
                      "use clip_vision_model or siglip_vision_model")
    H, layers = v.int("hidden_size"), v.int("num_hidden_layers", maximum=MAX_LAYERS)
    size, patch = _tile(v, _side(v, "image_size"), _side(v, "patch_size"))
    grid = (size // patch) ** 2
    cls = 1 if mt == "clip_vision_model" else 0
    run = _feature_layers(c, "vision_feature_layer", layers, -2)
    strategy = c.choice("vision_feature_select_strategy", {"default": 0, "full": 1},
                        "feature strategy", "default")
    seq = grid + cls
    llm_tile = grid + (cls if strategy else 0)
    m = llm_tile / seq
    rule = PayloadRule(kind="fixed", image_size=size, patch=patch, llm_per_tile=llm_tile,
                       enc_per_tile=seq)
    if anyres:
        pins = c.raw("image_grid_pinpoints", None)
        if pins is None and pre is not None:
            pins = pre.raw("image_grid_pinpoints", None)
        if pins is None:
            raise c.error("image_grid_pinpoints", "missing (AnyRes needs the tile grids)",
                          "add image_grid_pinpoints, e.g. [[336, 672], [672, 336], ...]")
        if not isinstance(pins, list) or not pins or any(
                not isinstance(p, list) or len(p) != 2 or any(
                    isinstance(x, bool) or not isinstance(x, int) or x < size or x % size
                    for x in p) for p in pins):
            raise c.error("image_grid_pinpoints", "not a list of [height, width] pixel pairs, "
                          f"each a multiple of the tile side {size}", "correct the list")
        rule = PayloadRule(kind="anyres", image_size=size, patch=patch, llm_per_tile=llm_tile,
                           enc_per_tile=seq, pinpoints=tuple((p[0], p[1]) for p in pins))
    return EncoderArch(
        name=f"{mt} ({layers} layers, {size} px) + MLP projector", scheme="tiles",
        layers=run, hidden=H, heads=v.int("num_attention_heads"),
        head_dim=H // v.int("num_attention_heads"), ffn=v.int("intermediate_size"),
        gated=_act(v, "quick_gelu"), seq=seq, bias=True,
        stem=((grid / seq, 3 * patch * patch, H),),
        projector=((m, H, text_hidden), (m, text_hidden, text_hidden)),
        extra_params=seq * H + cls * H + 2 * H + (text_hidden if anyres else 0),
        payload=rule,
        note=(f"AnyRes: a base tile plus a grid among {len(rule.pinpoints)} pinpoints, "
              f"{seq} tokens per tile, attention within a tile" if anyres else
              f"one {size} px tile of {seq} tokens per image"))


def siglip_gemma3(c: Cfg, text_hidden: int) -> EncoderArch:
    """Gemma 3: SigLIP at 896 px, 4×4 average pool to mm_tokens_per_image, RMSNorm + linear."""
    v = c.sub("vision_config")
    H, layers = v.int("hidden_size"), v.int("num_hidden_layers", maximum=MAX_LAYERS)
    size, patch = _tile(v, _side(v, "image_size", 896), _side(v, "patch_size", 14))
    grid = (size // patch) ** 2
    tokens = c.int("mm_tokens_per_image", 256)
    return EncoderArch(
        name=f"SigLIP ({layers} layers, {size} px) + pooled linear projector", scheme="tiles",
        layers=layers, hidden=H, heads=v.int("num_attention_heads"),
        head_dim=H // v.int("num_attention_heads"), ffn=v.int("intermediate_size"),
        gated=_act(v, "gelu_pytorch_tanh"), seq=grid, bias=True,
        stem=((1.0, 3 * patch * patch, H),),
        projector=((tokens / grid, H, text_hidden),),
        extra_params=grid * H + 2 * H + H - text_hidden,   # no projector bias
        payload=PayloadRule(kind="fixed", image_size=size, patch=patch, llm_per_tile=tokens,
                            enc_per_tile=grid),
        note=f"one {size} px image of {grid} patches, pooled to {tokens} tokens "
             "(pan-and-scan not modelled)")


def internvit(c: Cfg, text_hidden: int, pre: Cfg | None, hf_native: bool) -> EncoderArch:
    """InternVL: InternViT over 448 px tiles, pixel shuffle, LayerNorm + 2-layer MLP."""
    v = c.sub("vision_config")
    H, layers = v.int("hidden_size"), v.int("num_hidden_layers", maximum=MAX_LAYERS)
    size = _side(v, "image_size", 448) if not c.has("force_image_size") else c.int(
        "force_image_size")
    patch = _side(v, "patch_size", 14)
    ratio = c.raw("downsample_ratio", 0.5)
    if ratio not in (0.5, 0.25):
        raise c.error("downsample_ratio", f"{ratio!r} is not modelled", "use 0.5")
    fold = round(1 / ratio) ** 2
    grid = (size // patch) ** 2
    run = _feature_layers(c, "vision_feature_layer" if hf_native else "select_layer",
                          layers, -1)
    src = pre if (hf_native and pre is not None) else c
    max_tiles = src.int("max_patches" if hf_native else "max_dynamic_patch", 12)
    min_tiles = src.int("min_patches" if hf_native else "min_dynamic_patch", 1)
    thumb = src.bool("use_thumbnail", True) if not hf_native else True
    dynamic = src.bool("crop_to_patches" if hf_native else "dynamic_image_size", True)
    per_tile = grid // fold
    rule = PayloadRule(kind="dynamic-tiles" if dynamic else "fixed", image_size=size,
                       patch=patch, llm_per_tile=per_tile, enc_per_tile=grid + 1,
                       max_tiles=max_tiles if dynamic else 1, min_tiles=min_tiles,
                       thumbnail=thumb and dynamic)
    m = per_tile / (grid + 1)
    return EncoderArch(
        name=f"InternViT ({layers} layers, {size} px tiles) + pixel-shuffle MLP projector",
        scheme="tiles", layers=run, hidden=H, heads=v.int("num_attention_heads"),
        head_dim=H // v.int("num_attention_heads"), ffn=v.int("intermediate_size"),
        gated=_act(v, "gelu"), seq=grid + 1, bias=True,
        stem=((grid / (grid + 1), 3 * patch * patch, H),),
        projector=((m, fold * H, text_hidden), (m, text_hidden, text_hidden)),
        extra_params=(grid + 2) * H + layers * 2 * H + 2 * fold * H,   # layer scales, LN
        payload=rule,
        note=f"{size} px tiles ({'1..' + str(max_tiles) + ' per image' if dynamic else 'one'}"
             f"{' + thumbnail' if rule.thumbnail else ''}), {grid + 1} tokens each, "
             f"{per_tile} LLM tokens per tile after pixel shuffle")


def qwen25_vit(c: Cfg, pre: Cfg | None) -> EncoderArch:
    """Qwen2.5-VL: a ViT with window attention and a 2×2 patch merger, dynamic resolution."""
    v = c.sub("vision_config")
    H, layers = v.int("hidden_size"), v.int("depth", maximum=MAX_LAYERS)
    patch, merge = v.int("patch_size", 14), v.int("spatial_merge_size", 2)
    temporal = v.int("temporal_patch_size", 2)
    win_px = v.int("window_size", 112)
    window = (win_px // patch) ** 2
    full = v.int_list("fullatt_block_indexes", [7, 15, 23, 31])
    out = v.int("out_hidden_size")
    mn, mx = 3136, 12845056
    if pre is not None:
        size = pre.sub("size", None)
        mn = pre.int("min_pixels", None) or (size.int("shortest_edge", mn) if size else mn)
        mx = pre.int("max_pixels", None) or (size.int("longest_edge", mx) if size else mx)
    fold = merge * merge
    return EncoderArch(
        name=f"Qwen2.5-VL ViT ({layers} layers, window attention, {len(full)} full layers) "
             f"+ {merge}x{merge} patch merger", scheme="qwen-window",
        layers=layers, hidden=H, heads=v.int("num_heads"), head_dim=H // v.int("num_heads"),
        ffn=v.int("intermediate_size"), gated=_act(v, "silu"), window=window,
        full_layers=len(full), bias=True,
        stem=((1.0, 3 * temporal * patch * patch, H),),
        projector=((1 / fold, fold * H, fold * H), (1 / fold, fold * H, out)),
        extra_params=0,   # the merger's RMSNorm (H) offsets the stem bias `bias` counts
        payload=PayloadRule(kind="qwen-dynamic", patch=patch, merge=merge,
                            temporal_patch=temporal, min_pixels=mn, max_pixels=mx),
        note=f"{patch} px patches, {temporal}-frame temporal patches; window attention over "
             f"{win_px // patch}x{win_px // patch} patches, full attention within a frame "
             f"group on layers {', '.join(map(str, full))}; images resized within "
             f"{mn}..{mx} pixels")


def whisper(c: Cfg, text_hidden: int, kind: str) -> EncoderArch:
    """Whisper's encoder (Ultravox: stack 8 + SwiGLU projector; Qwen2-Audio: pool 2 + linear)."""
    a = c.sub("audio_config")
    d, layers = a.int("d_model"), a.int("encoder_layers", maximum=MAX_LAYERS)
    mels, frames = a.int("num_mel_bins", 128), a.int("max_source_positions", 1500)
    if kind == "ultravox":
        if c.str("projector_act", "swiglu") != "swiglu":
            raise c.error("projector_act", "only the SwiGLU projector is modelled",
                          "use swiglu")
        stack, mid = c.int("stack_factor", 8), c.int("hidden_size", 4096)
        projector = ((1 / stack, d * stack, mid), (1 / stack, mid // 2, text_hidden))
        extra = d * stack + mid // 2 - mid - text_hidden      # norms; no projector biases
        per_window, what = frames / stack, f"frames stacked by {stack} into the projector"
    else:
        stack = 2
        projector = ((1 / stack, d, text_hidden),)
        extra, per_window, what = 0, frames / stack, "average-pooled by 2 into the projector"
    return EncoderArch(
        name=f"Whisper encoder ({layers} layers) + {kind} projector", scheme="whisper",
        layers=layers, hidden=d, heads=a.int("encoder_attention_heads"),
        head_dim=d // a.int("encoder_attention_heads"), ffn=a.int("encoder_ffn_dim"),
        gated=False, seq=frames, bias=True,
        stem=((2.0, mels * 3, d), (1.0, d * 3, d)),
        projector=projector,
        extra_params=frames * d + 2 * d - layers * d + extra,   # positions, final LN; no k bias
        payload=PayloadRule(kind="audio", window_frames=frames,
                            llm_per_second=per_window / 30.0),
        note=f"one {frames}-frame sequence per 30 s window; {what}")
