"""`hastune model inspect PATH`: what hastune reads from a model's config.json — family,
parameters, weight and KV bytes, heads, the TP (and EP) degrees it splits over, the encoder and
its tokens per payload."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from hastune.cli.app import app
from hastune.cli.common import dumps
from hastune.errors import InputError

model_app = typer.Typer(help="Models: `hastune model inspect PATH` reads a Hugging Face "
                        "config.json (or a folder holding one, or a shipped model's name) "
                        "the way the latency model does.", no_args_is_help=True)
app.add_typer(model_app, name="model")


MAX_SIDE = 65_536      # pixels on a side of --image
MAX_AUDIO_S = 86_400   # seconds of --audio-seconds (a day)


def _image(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(text) > 40:  # int() of thousands of digits is slow, and no side is that long
        parts = []
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        raise InputError(None, "--image", f"{text!r} is not WIDTHxHEIGHT",
                         "e.g. --image 1024x768") from None
    if w < 1 or h < 1:
        raise InputError(None, "--image", f"{text!r} has a side below 1 pixel",
                         "use positive sides, e.g. 1024x768")
    if max(w, h) > MAX_SIDE:
        raise InputError(None, "--image", f"{text!r} has a side over {MAX_SIDE:,} pixels",
                         f"use sides of 1..{MAX_SIDE:,} pixels, e.g. 1024x768")
    return w, h


def _seconds(value: float) -> float:
    if not 0 < value <= MAX_AUDIO_S:  # also refuses nan and inf
        raise InputError(None, "--audio-seconds", f"{value:g} is not in (0, {MAX_AUDIO_S:,}]",
                         f"give a finite number of seconds > 0 and ≤ {MAX_AUDIO_S:,} "
                         "(a day), e.g. 30")
    return value


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def _b(x: float) -> str:
    return f"{x / 1e9:.2f}B" if x >= 1e8 else f"{x / 1e6:.1f}M"


def _print(s: dict) -> None:
    con = Console(highlight=False)
    con.print(f"[bold]{s['name']}[/]  {s['family']}  ({s['source']})")
    con.print(f"parameters: {_b(s['params'])} total, {_b(s['active_params'])} active per token"
              f" ({_b(s['active_params_read'])} read: less the input embedding table); "
              f"checkpoint {s['checkpoint_precision']}")
    con.print("weights: " + ", ".join(f"{p} {_gb(v)}" for p, v in s["weight_bytes"].items()))
    con.print(f"LLM: {s['layers']} layers, hidden {s['hidden']}, {s['heads']} heads, "
              f"{s['kv_heads']} KV heads, head_dim {s['head_dim']}, vocab {s['vocab']}"
              + (f"; {s['sliding_layers']} sliding-window layers ({s['sliding_window']})"
                 if s["sliding_layers"] else ""))
    if s["moe"]:
        m = s["moe"]
        con.print(f"MoE: {m['experts']} experts, {m['experts_per_token']} per token, "
                  f"expert FFN {m['moe_ffn']}, shared FFN {m['shared_ffn']}, "
                  f"{m['moe_layers']} MoE + {m['dense_layers']} dense layers; "
                  f"EP degrees {m['ep_degrees']}")
    if s["mla"]:
        m = s["mla"]
        con.print(f"MLA: q_lora_rank {m['q_lora_rank']}, kv_lora_rank {m['kv_lora_rank']}, "
                  f"rope {m['qk_rope_head_dim']}, nope {m['qk_nope_head_dim']}, "
                  f"v {m['v_head_dim']}; KV cache: {m['kv_cache']}")
    tab = Table(title="per GPU of a TP group")
    for col in ("tp", "KV heads", "weights bf16", "weights fp8", "KV/token bf16",
                "KV/token fp8"):
        tab.add_column(col, justify="right")
    for tp in s["tp_degrees"]:
        t = str(tp)
        w, kv = s["llm_weight_bytes_per_gpu"], s["kv_bytes_per_token"]
        tab.add_row(t, str(s["kv_heads_per_gpu"][t]), _gb(w["bf16"][t]), _gb(w["fp8"][t]),
                    f"{kv['bf16'][t] / 1024:.1f} KiB", f"{kv['fp8'][t] / 1024:.1f} KiB")
    con.print(tab)
    e = s["encoder"]
    if e:
        con.print(f"encoder: {e['name']}; {_b(e['params'])} parameters "
                  f"({_gb(e['weight_bytes']['bf16'])} bf16), {e['layers']} layers")
        p = e["payload"]
        if p and p["kind"] == "audio":
            con.print(f"  audio {p['seconds']:g} s: {p['encoder_tokens']} encoder tokens in "
                      f"{p['windows']} window(s), {p['llm_tokens']} LLM tokens "
                      f"({p['llm_tokens_per_second']:g} per second)")
        elif p:
            con.print(f"  image {p['image']}: {p['encoder_tokens']} encoder tokens in "
                      f"{p['groups']} group(s), {p['llm_tokens']} LLM tokens")
        con.print(f"  {e['note']}")
    con.print(f"note: {s['note']}")


@model_app.command("inspect")
def inspect(
    path: str = typer.Argument(..., help="config.json, a folder holding one, or a shipped "
                               "model's name (e.g. llava-v1.6-34b)"),
    image: str = typer.Option("1024x768", "--image", help="WIDTHxHEIGHT of the image whose "
                              "tokens are counted (vision encoders)"),
    seconds: float = typer.Option(30.0, "--audio-seconds", help="seconds of audio whose "
                                  f"tokens are counted (Whisper), > 0 and ≤ {MAX_AUDIO_S:,}"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Family, total and active parameters, weight bytes (bf16, fp8), KV bytes per token per
    TP degree, heads, TP and EP degrees, the encoder and its tokens per payload."""
    from hastune.models import load_model
    from hastune.models.summary import summary

    size, seconds = _image(image), _seconds(seconds)
    try:
        local = Path(path).exists()  # a folder here wins over a shipped model of its name
    except OSError:  # a name too long to be a path: load_model says so
        local = False
    s = summary(load_model(Path(path) if local else path), size, seconds)
    if as_json:
        print(dumps({**s, "exit_code": 0}))
    else:
        _print(s)
