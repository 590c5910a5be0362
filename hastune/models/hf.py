"""Read a Hugging Face `config.json` (or a folder holding one, and `preprocessor_config.json`
where the encoder's payload rule needs it) into the latency model's `ModelArch`.

    load_model("llava-v1.6-34b")                  # a shipped model (hastune.models.shipped)
    load_model("examples/models/qwen3-30b-a3b")   # a folder with config.json
    load_model("models/x/config.json", base=recipe_dir)

Anything unsupported — an unknown model_type, a quantization other than fp8, a missing or
mistyped key, a NaN — is one InputError naming the file and the key (docs/models.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from hastune.errors import InputError
from hastune.models import encoders
from hastune.models.cfg import Cfg, non_finite
from hastune.models.decoders import DECODERS, MAX_PARAMS, MOE, checkpoint_precision, read_llm
from hastune.models.spec import ModelArch
from hastune.models.tokens import fit_payloads

# composite model_type → (the text config's key, its default model_type)
COMPOSITE = {"llava": ("text_config", "llama"), "llava_next": ("text_config", "llama"),
             "qwen2_5_vl": ("text_config", "qwen2_5_vl_text"), "gemma3": ("text_config",
                                                                          "gemma3_text"),
             "internvl_chat": ("llm_config", None), "internvl": ("text_config", "qwen2"),
             "ultravox": ("text_config", "llama"), "qwen2_audio": ("text_config", "qwen2"),
             "kimi_k25": ("text_config", "deepseek_v3"),
             "qwen3_5": ("text_config", "qwen3_5_text"),
             "qwen3_5_moe": ("text_config", "qwen3_5_moe_text")}
# composites whose encoder is not modelled: their LLM alone, for text requests
TEXT_ONLY = {"kimi_k25": "MoonViT vision encoder", "qwen3_5": "Qwen3.5 vision encoder",
             "qwen3_5_moe": "Qwen3.5 vision encoder"}
SUPPORTED = sorted({*DECODERS, *COMPOSITE} - {"qwen2_5_vl_text", "qwen2_vl_text"})


# config.json and preprocessor_config.json: published ones are a few KB, nested 3 deep
MAX_JSON_BYTES = 10 * 2**20
MAX_JSON_DEPTH = 64
_TOO_DEEP = f"nests objects or lists more than {MAX_JSON_DEPTH} deep: not a model config"


def _depth(data: object) -> int:
    """How deep lists and objects nest in a parsed JSON value (iteratively: no recursion)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        obj, d = stack.pop()
        if isinstance(obj, (dict, list)):
            deepest = max(deepest, d)
            if d <= MAX_JSON_DEPTH:
                stack.extend((v, d + 1) for v in (obj.values() if isinstance(obj, dict)
                                                  else obj))
    return deepest


def _parse_json(path: Path, raw: bytes) -> object:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, None, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                         f"offset {exc.start}): not a config.json", "give the model's "
                         "config.json as published (JSON text)") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(path, None, _TOO_DEEP, "give the model's config.json as "
                         "published") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of over 4,300 digits
        raise InputError(path, None, f"is not JSON ({exc})",
                         "give the model's config.json as published") from None


def _read_json(path: Path) -> dict:
    """A config file: a regular file of at most MAX_JSON_BYTES, UTF-8 JSON, an object nested
    at most MAX_JSON_DEPTH deep, with finite numbers; an InputError naming it otherwise."""
    from hastune.yamlio import check_file

    check_file(path, "model config", MAX_JSON_BYTES)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)  # the file may have grown since stat()
    except OSError as exc:
        raise InputError(path, None, f"cannot be read ({exc.strerror or exc})",
                         "give a readable config.json or a folder holding one") from None
    if len(raw) > MAX_JSON_BYTES:
        raise InputError(path, None, f"is over the {MAX_JSON_BYTES // 2**20} MiB limit",
                         "give the model's config.json as published (a few KB)")
    data = _parse_json(path, raw)
    if not isinstance(data, dict):
        raise InputError(path, None, "is not a JSON object", "give the model's config.json")
    if _depth(data) > MAX_JSON_DEPTH:
        raise InputError(path, None, _TOO_DEEP, "give the model's config.json as published")
    bad = next(non_finite(data), None)
    if bad is not None:
        raise InputError(path, bad, "is not a finite number (NaN or Infinity)",
                         "use the published value")
    return data


def config_files(path: Path) -> tuple[Path, Path | None]:
    """(config.json, preprocessor_config.json or None) for a file or a folder."""
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            if cfg.exists():  # a directory, FIFO or device by that name
                from hastune.yamlio import check_file

                check_file(cfg, "model config")
            raise InputError(path, None, "holds no config.json",
                             "give a folder with the model's config.json, or the file")
    elif path.is_file():
        cfg = path
    elif path.exists() or path.is_symlink():  # a device, FIFO, socket or a broken link
        from hastune.yamlio import check_file

        check_file(path, "model config")
        cfg = path
    else:
        raise InputError(path, None, "does not exist", "give a shipped model name, a "
                         "config.json or a folder holding one")
    pre = cfg.parent / "preprocessor_config.json"
    return cfg, (pre if pre.is_file() else None)


def _model_type(c: Cfg, allowed, default: str | None = None) -> str:
    mt = c.str("model_type", default)
    if mt not in allowed:
        raise c.error("model_type", f"model_type {mt!r} is not supported",
                      f"use a config of one of {', '.join(sorted(allowed))} "
                      "(docs/models.md lists the families)")
    return mt


def _family(mt: str, llm, encoder) -> str:
    kind = "MoE" if llm.moe else "dense"
    parts = [kind] + (["MLA"] if llm.mla else []) + (["DSA"] if llm.dsa else []) + (
        ["Gated DeltaNet"] if llm.linear_layers else []) + (
        ["sliding window"] if llm.sliding_layers else [])
    text = f"{mt} ({', '.join(parts)})"
    return text + (" + encoder" if encoder is not None else "")


def _composite(c: Cfg, mt: str, pre: Cfg | None):
    key, text_default = COMPOSITE[mt]
    if mt == "qwen2_5_vl" and not c.has(key):   # as published: the LLM's keys at the top
        t, tmt = c, "qwen2_5_vl_text"
    else:
        t = c.sub(key)
        tmt = _model_type(t, {k: 0 for k in DECODERS}, text_default)
    precision = checkpoint_precision(c) if c.has("quantization_config") else None
    tie = c.raw("tie_word_embeddings", None)
    if tie is not None:
        tie = c.bool("tie_word_embeddings", False)
    llm = read_llm(t, tmt, tie_default=tie, precision=precision)
    th = llm.hidden
    if mt in ("llava", "llava_next"):
        enc = encoders.clip(c, th, pre, anyres=mt == "llava_next")
    elif mt == "qwen2_5_vl":
        enc = encoders.qwen25_vit(c, pre)
    elif mt == "gemma3":
        enc = encoders.siglip_gemma3(c, th)
    elif mt in ("internvl_chat", "internvl"):
        enc = encoders.internvit(c, th, pre, hf_native=mt == "internvl")
    elif mt in TEXT_ONLY:
        enc = None
    else:
        enc = encoders.whisper(c, th, mt)
    return llm, tmt, enc


def read_config(path: str | Path, name: str | None = None) -> ModelArch:
    """The ModelArch of a config.json (or a folder holding one)."""
    cfg_path, pre_path = config_files(Path(path))
    c = Cfg(_read_json(cfg_path), cfg_path)
    pre = Cfg(_read_json(pre_path), pre_path) if pre_path is not None else None
    mt = _model_type(c, {k: 0 for k in SUPPORTED})
    if mt in COMPOSITE:
        llm, tmt, enc = _composite(c, mt, pre)
    else:
        llm, tmt, enc = read_llm(c, mt), mt, None
    label = name or (cfg_path.parent.name if cfg_path.name == "config.json" else cfg_path.stem)
    note = f"read from {cfg_path.name} ({mt}" + (f", LLM {tmt}" if tmt != mt else "") + ")"
    if llm.mtp_layers:
        note += f"; {llm.mtp_layers} multi-token-prediction layer(s) not counted"
    if mt in TEXT_ONLY:
        note += f"; its {TEXT_ONLY[mt]} is not modelled: the LLM alone, text requests only"
    arch = ModelArch(label, llm, enc, note=note,
                     payloads=fit_payloads(enc.payload) if enc and enc.payload else (),
                     family=_family(mt, llm, enc), source=str(cfg_path))
    if not arch.params <= MAX_PARAMS:  # the LLM's own are checked as it is read
        raise InputError(cfg_path, None, f"describes {arch.params:.3g} parameters, over the "
                         f"{MAX_PARAMS:.0e} limit", "check the encoder's sizes against the "
                         "published config")
    return arch


def _short(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[:n] + f"... ({len(s)} characters)"


def load_model(ref: str | Path, base: Path | None = None) -> ModelArch:
    """A shipped model by name, else a config path (relative paths against `base`)."""
    from hastune.models.shipped import MODELS

    if isinstance(ref, str) and ref in MODELS:
        return MODELS[ref]
    p = Path(ref)
    if base is not None and not p.is_absolute():
        p = base / p
    names = f"use one of {', '.join(sorted(MODELS))}, a config.json, or a folder holding one"
    try:
        there = p.exists() or p.is_symlink()  # a broken or looping link: read_config says which
    except OSError as exc:  # a name too long for the file system, say
        raise InputError(None, "model", f"{_short(str(ref))!r} is not a path this system can "
                         f"open ({exc.strerror or exc})", names) from None
    if there:
        return read_config(p)
    if "/" in str(ref) or p.suffix in (".json", ".yaml", ".yml"):  # meant as a path
        raise InputError(p, None, "no such model config file or folder", names)
    raise InputError(None, "model", f"{_short(str(ref))!r} is neither a shipped model nor a "
                     "config path", names)


__all__ = ["MOE", "SUPPORTED", "config_files", "load_model", "read_config"]
