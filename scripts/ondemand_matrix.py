"""Profiles on demand over the issue-12 matrix: each config of examples/models/ x {h100-80gb,
h200-141gb} x {bf16, fp8}: build the profile (or record the InputError saying why it cannot be
built), then `hastune tune RECIPE --trials 3` on a recipe naming the config (nodg/padg/fudg for
text models, epd for multimodal ones; short probes). Needs the kernels extra.

Run: python scripts/ondemand_matrix.py OUT.json [--no-tune] [--trials 3] [--models a,b]
Prints one line per case and a markdown table at the end. Uses a fresh $HASTUNE_CACHE.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "examples" / "models"
GPUS = ("h100-80gb", "h200-141gb")
PRECISIONS = {"bf16": {"weights": "bf16", "kv_cache": "bf16"},
              "fp8": {"weights": "fp8", "kv_cache": "fp8"}}
QUICK = {"min_span": 5.0, "min_requests": 300, "extend": 2.0}
IMAGE = {"qwen2.5-vl-7b": {"scheme": "patch-14-merge-2", "resolution": [1024, 768]},
         "llava-v1.6-34b": {"scheme": "anyres-336", "resolution": [672, 672]}}


def recipe(model: str, gpu: str, precision: dict, min_tp: int = 1, gpus: int = 8) -> dict:
    """A recipe naming examples/models/<model> (absolute path) with short probes. fudg's
    shipped space stops at TP 4 a side: a model needing TP 8 is tuned over nodg and padg."""
    wl: dict = {"requests": 300, "prompt_tokens": {"dist": "lognormal", "mean": 512, "cv": 0.8,
                                                   "min": 4, "max": 4096},
                "output_tokens": {"dist": "lognormal", "mean": 128, "cv": 0.6, "min": 4,
                                  "max": 1024}}
    arch: str | list[str] = ["nodg", "padg", "fudg"] if min_tp <= 4 else ["nodg", "padg"]
    if model in IMAGE:
        wl.update({"mix": {"image": 0.8, "text": 0.2}, "modalities": {"image": IMAGE[model]},
                   "prompt_tokens": {"dist": "lognormal", "mean": 64, "cv": 0.5, "min": 4,
                                     "max": 1024}})
        arch = "epd"
    return {"kind": "recipe", "name": f"{model}-{gpu}", "model": str(MODELS / model),
            "precision": precision,
            "cluster": {"gpu": gpu, "gpus": gpus, "gpus_per_node": 8,
                        "intra_node": "nvlink-h100", "inter_node": "ib-400g"},
            "workload": wl, "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "percentile": 90},
            "architecture": arch, "evaluator": dict(QUICK), "seed": 0}


def build(model: str, gpu: str, prec: str) -> dict:
    from hastune.calibrate import ondemand
    from hastune.errors import InputError
    from hastune.model_ref import Precision
    from hastune.models import load_model

    t0 = time.perf_counter()
    try:
        got = ondemand.ensure(ondemand.Request(load_model(MODELS / model), gpu,
                                               Precision(**PRECISIONS[prec])))
    except InputError as exc:
        return {"built": False, "error": exc.message, "wall_s": time.perf_counter() - t0}
    p = got.profile
    return {"built": True, "wall_s": time.perf_counter() - t0, "tp": p.tp,
            "tp_degrees": p.tp_degrees, "kv_tokens": p.memory.kv_capacity_tokens(),
            "decode_fixed_ms": p.decode.fixed_s * 1e3, "path": str(got.path)}


def tune(model: str, gpu: str, prec: str, trials: int, tmp: Path, min_tp: int) -> dict:
    d = tmp / f"{model}-{gpu}-{prec}"
    d.mkdir()
    (d / "r.yaml").write_text(yaml.safe_dump(recipe(model, gpu, PRECISIONS[prec], min_tp)))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hastune", "tune", str(d / "r.yaml"), "--trials",
                        str(trials), "--json", "--no-plots", "--out", str(d / "out")],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 3):
        return {"rc": r.returncode, "wall_s": wall, "stderr": r.stderr[-400:]}
    s = json.loads(r.stdout)
    best = s.get("best_config") or {}
    return {"rc": r.returncode, "wall_s": wall, "goodput_rps": s["goodput_rps"],
            "best": {k: best.get(k) for k in ("architecture", "tp", "replicas", "instances",
                                              "n_E", "n_P", "n_D", "prefill_instances",
                                              "decode_instances") if best.get(k) is not None},
            "evaluations": s.get("evaluations"),
            "profile_source": (s.get("profile_source") or {}).get("kind")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--models", default="")
    a = ap.parse_args()
    models = a.models.split(",") if a.models else sorted(p.name for p in MODELS.iterdir()
                                                         if (p / "config.json").is_file())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HASTUNE_CACHE"] = str(Path(tmp) / "cache")
        for model in models:
            for gpu in GPUS:
                for prec in PRECISIONS:
                    row = {"model": model, "gpu": gpu, "precision": prec,
                           **build(model, gpu, prec)}
                    if row["built"] and not a.no_tune:
                        row["tune"] = tune(model, gpu, prec, a.trials, Path(tmp), row["tp"])
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps(rows, indent=1))
    print("\n| model | GPU | precision | build | tp | KV tokens/GPU | tune goodput (req/s) | best "
          "| tune wall (s) |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = r.get("tune") or {}
        if not r["built"]:
            print(f"| {r['model']} | {r['gpu']} | {r['precision']} | refused: "
                  f"{r['error'].split(': ', 2)[-1][:140]} | | | | | |")
            continue
        print(f"| {r['model']} | {r['gpu']} | {r['precision']} | {r['wall_s']:.1f} s | "
              f"{','.join(map(str, r['tp_degrees']))} | {r['kv_tokens']:,} | "
              f"{round(t['goodput_rps'], 1) if 'goodput_rps' in t else '-'} | "
              f"{t.get('best', t.get('stderr', ''))} | {t.get('wall_s', 0):.0f} |")


if __name__ == "__main__":
    main()
