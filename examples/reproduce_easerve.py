"""Reproduce EAServe's comparison: P90 goodput of EPD (EAServe) against the static E/P/D split
(Dynamo-like, `epd-static`) and vLLM-like replicas with the encoder inline (`nodg`), on the
three shipped A100 recipes (image: LLaVA-v1.6-34B, video: Qwen2.5-VL-32B, audio:
Ultravox-v0.6-27B; 8× A100-80GB), each system at its best configuration.

Run (one core, about half an hour; cached in docs/reproduction/easerve.json):

    OMP_NUM_THREADS=1 python examples/reproduce_easerve.py

Spaces: epd and epd-static as shipped (search_spaces/), nodg with tp ∈ {1, 2, 4, 8},
pp ∈ {1, 2}, chunking off (vLLM) or 512 tokens; also the best nodg of single-GPU replicas
(epd's workers are single GPUs). Writes easerve.json, easerve.md, easerve.png.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from repro_common import best_per_group, load_results, md_table, ratio, save_results  # noqa: E402

from hastune.evaluators.sim import Evaluation  # noqa: E402
from hastune.recipe import load_recipe  # noqa: E402
from hastune.space import SearchSpace, space_for  # noqa: E402

RECIPES = {"image": "image-llava-8xa100.yaml", "video": "video-qwen-8xa100.yaml",
           "audio": "audio-ultravox-8xa100.yaml"}
SYSTEMS = {"epd": "EPD (EAServe)", "epd-static": "static E/P/D (Dynamo-like)",
           "nodg": "vLLM-like (nodg)", "nodg_tp1": "vLLM-like, tp 1"}
GROUPS = {"epd": lambda c: c.architecture == "epd",
          "epd-static": lambda c: c.architecture == "epd-static",
          "nodg": lambda c: c.architecture == "nodg",
          # epd's workers are single GPUs: the same for vLLM, for a like-for-like view
          "nodg_tp1": lambda c: c.architecture == "nodg" and c.tp == 1 and c.pp == 1}


def run_case(modality: str, requests: int, verbose: bool) -> dict:
    rec = load_recipe(ROOT / "examples" / RECIPES[modality])
    ev = Evaluation(rec, requests=requests)
    tps = [t for t in (1, 2, 4, 8) if t in ev.profile.tp_degrees]
    nodg = SearchSpace.model_validate({"architecture": "nodg", "budget": "exact", "params": {
        "tp": tps, "pp": [1, 2], "replicas": {"low": 1}, "chunk_tokens": [None, 512]}})
    cache: dict[str, float] = {}
    out: dict = {}
    log = print if verbose else None
    for space in (space_for("epd"), space_for("epd-static"), nodg):
        groups = {k: g for k, g in GROUPS.items() if k.split("_")[0] == space.architecture}
        out.update(best_per_group(ev, space, groups, cache, log))
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mods = [m for m in RECIPES if m in results]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    w = 0.2
    colors = {"epd": "tab:green", "epd-static": "tab:orange", "nodg": "tab:blue",
              "nodg_tp1": "lightsteelblue"}
    for j, k in enumerate(SYSTEMS):
        vals = [results[m][k]["goodput"] / results[m]["epd"]["goodput"] for m in mods]
        ax.bar([i + (j - 1.5) * w for i in range(len(mods))], vals, w, color=colors[k],
               label=SYSTEMS[k])
    ax.set_xticks(range(len(mods)), [f"{m}\n(EPD {results[m]['epd']['goodput']:.1f} req/s)"
                                     for m in mods])
    ax.set_ylabel("P90 goodput / EPD's")
    ax.set_title("8× A100-80GB, best configuration of each")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="requests per probe (at least)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "reproduction"))
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    store = out / "easerve.json"
    results = load_results(store)
    for m in RECIPES:
        if m in results and all(k in results[m] for k in SYSTEMS):
            continue
        t0 = time.perf_counter()
        print(f"{m} …", flush=True)
        results[m] = run_case(m, args.requests, args.verbose)
        results[m]["wall_s"] = time.perf_counter() - t0
        save_results(store, results)
    rows = []
    for m in RECIPES:
        r = results[m]
        g = {k: r[k]["goodput"] for k in SYSTEMS}
        rows.append([m] + [f"{g[k]:.2f}" for k in SYSTEMS]
                    + [ratio(g["epd"], g["epd-static"]), ratio(g["epd"], g["nodg"]),
                       ratio(g["epd"], g["nodg_tp1"])])
    cfgs = [[m] + [_short(results[m][k]["config"]) for k in SYSTEMS] for m in RECIPES]
    text = ("<!-- written by examples/reproduce_easerve.py -->\n\n"
            + md_table(["modality"] + list(SYSTEMS.values())
                       + ["EPD / static", "EPD / vLLM", "EPD / vLLM tp 1"], rows)
            + "\n\nBest configuration of each:\n\n"
            + md_table(["modality"] + list(SYSTEMS.values()), cfgs) + "\n")
    (out / "easerve.md").write_text(text)
    plot(results, out / "easerve.png")
    print(text)


def _short(cfg: dict | None) -> str:
    if not cfg:
        return "–"
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "architecture")


if __name__ == "__main__":
    main()
