"""Tokens per payload: how many encoder tokens (in how many attention groups) and how many LLM
tokens one image of W×H pixels or s seconds of audio becomes, by each model's processor rule
(hastune.models.spec.PayloadRule)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hastune.models.spec import PayloadRule


@dataclass(frozen=True)
class PayloadTokens:
    encoder_tokens: int             # through the encoder's layers
    groups: int                     # attention sequences (tiles, frame groups, 30 s windows)
    llm_tokens: int                 # embeddings the LLM prefills


def _best_resolution(h: int, w: int, pinpoints) -> tuple[int, int]:
    """LLaVA-NeXT's select_best_resolution: the most effective resolution, then the least
    waste; `pinpoints` are (height, width)."""
    best, best_eff, best_waste = pinpoints[0], -1, math.inf
    for ph, pw in pinpoints:
        scale = min(pw / w, ph / h)
        eff = min(int(w * scale) * int(h * scale), w * h)
        waste = pw * ph - eff
        if eff > best_eff or (eff == best_eff and waste < best_waste):
            best, best_eff, best_waste = (ph, pw), eff, waste
    return best


def _anyres(r: PayloadRule, w: int, h: int) -> PayloadTokens:
    bh, bw = _best_resolution(h, w, r.pinpoints)
    rows, cols = bh // r.image_size, bw // r.image_size
    side = r.image_size // r.patch                  # 24 patches per tile side
    cur_h, cur_w = side * rows, side * cols
    if w / h > cur_w / cur_h:                       # unpad: drop the letterbox rows
        new_h = int(round(h * (cur_w / w), 7))
        cur_h -= 2 * ((cur_h - new_h) // 2)
    else:
        new_w = int(round(w * (cur_h / h), 7))
        cur_w -= 2 * ((cur_w - new_w) // 2)
    llm = cur_h * cur_w + (cur_h if r.newline else 0) + r.llm_per_tile
    tiles = rows * cols + 1
    return PayloadTokens(tiles * r.enc_per_tile, tiles, llm)


def _tile_grid(w: int, h: int, r: PayloadRule) -> int:
    """InternVL's dynamic_preprocess: the tile count of the grid closest in aspect ratio."""
    aspect = w / h
    grids = sorted({(i, j) for n in range(r.min_tiles, r.max_tiles + 1)
                    for i in range(1, n + 1) for j in range(1, n + 1)
                    if r.min_tiles <= i * j <= r.max_tiles}, key=lambda g: g[0] * g[1])
    best, best_diff = (1, 1), math.inf
    area = w * h
    for i, j in grids:
        diff = abs(aspect - i / j)
        if diff < best_diff:
            best, best_diff = (i, j), diff
        elif diff == best_diff and area > 0.5 * r.image_size ** 2 * i * j:
            best = (i, j)
    n = best[0] * best[1]
    return n + (1 if r.thumbnail and n > 1 else 0)


def _qwen_resize(h: int, w: int, r: PayloadRule) -> tuple[int, int]:
    """Qwen2-VL's smart_resize: sides multiples of patch × merge, pixels within bounds."""
    f = r.patch * r.merge
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > r.max_pixels:
        beta = math.sqrt(h * w / r.max_pixels)
        hb, wb = max(f, math.floor(h / beta / f) * f), max(f, math.floor(w / beta / f) * f)
    elif hb * wb < r.min_pixels:
        beta = math.sqrt(r.min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / f) * f, math.ceil(w * beta / f) * f
    return hb, wb


def image_tokens(r: PayloadRule, width: int, height: int) -> PayloadTokens:
    if width < 1 or height < 1:
        raise ValueError(f"image {width}x{height}: sides must be ≥ 1 pixel")
    if r.kind == "anyres":
        return _anyres(r, width, height)
    if r.kind == "fixed":
        return PayloadTokens(r.enc_per_tile, 1, r.llm_per_tile)
    if r.kind == "dynamic-tiles":
        n = _tile_grid(width, height, r)
        return PayloadTokens(n * r.enc_per_tile, n, n * r.llm_per_tile)
    if r.kind == "qwen-dynamic":
        hb, wb = _qwen_resize(height, width, r)
        patches = (hb // r.patch) * (wb // r.patch)
        return PayloadTokens(patches, 1, patches // (r.merge * r.merge))
    raise ValueError(f"{r.kind} payloads are not images")


def audio_tokens(r: PayloadRule, seconds: float) -> PayloadTokens:
    if r.kind != "audio":
        raise ValueError(f"{r.kind} payloads are not audio")
    if not seconds > 0:
        raise ValueError(f"audio of {seconds} s: use a positive length")
    windows = max(1, math.ceil(seconds / 30.0))
    return PayloadTokens(windows * r.window_frames, windows,
                         math.ceil(seconds * r.llm_per_second))


def fit_payloads(r: PayloadRule) -> tuple[tuple[float, float], ...]:
    """An encode fit grid (encoder tokens, attention groups per request) spanning what the
    rule produces, as the shipped models' grids do."""
    if r.kind == "anyres":
        most = max((h // r.image_size) * (w // r.image_size) for h, w in r.pinpoints) + 1
        return tuple((float(r.enc_per_tile * t), float(t)) for t in range(1, most + 1))
    if r.kind == "fixed":
        return tuple((float(r.enc_per_tile * t), float(t)) for t in (1, 2, 3, 4))
    if r.kind == "dynamic-tiles":
        top = r.max_tiles + (1 if r.thumbnail else 0)
        counts = sorted({1, 2, 3, 5, 7, top} & set(range(1, top + 1)))
        return tuple((float(r.enc_per_tile * t), float(t)) for t in counts)
    if r.kind == "qwen-dynamic":
        f = r.patch * r.merge
        out = []
        for side in (224, 448, 672, 896, 1344):
            out.append((float((math.ceil(side / f) * r.merge) ** 2), 1.0))
        for side, frames in ((336, 8), (448, 8), (448, 16), (448, 32)):
            per = (math.ceil(side / f) * r.merge) ** 2
            groups = math.ceil(frames / r.temporal_patch)
            out.append((float(per * groups), float(groups)))
        return tuple(out)
    return tuple((float(r.window_frames * w), float(w)) for w in (1, 2, 3, 4))
