"""Simulator speed: simulated requests per wall-second at ~80% of goodput, and the seconds one
full `evaluate` (goodput search) takes, for 8-GPU deployments of the shipped recipes (every
architecture on the audio example), for padg/nodg/fudg on the 16-GPU EcoServe L20 recipe, and
for nodg on long prompts (nodg-long-prompts.yaml: Vidur's arxiv-summarization trace, 512-token
chunks, so every prompt takes several chunk iterations).

Run: OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/sim_speed.py [--requests 2000] [--repeat 5]
Targets (one core): ≥ 50,000 simulated requests/s; one evaluate (2,000 requests/probe) ≤ 1 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from hastune.config import load_config, parse_config
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
AUDIO = "audio-ultravox-8xa100.yaml"
L20 = "ecoserve/l20-codellama-sharegpt.yaml"
# (recipe under examples/, config: a file under examples/configs/ or an inline config)
CASES = [
    (AUDIO, "epd-2-2-4.yaml"),
    (AUDIO, "epd-static-2-2-4.yaml"),
    ("image-llava-8xa100.yaml", "epd-2-2-4.yaml"),
    ("video-qwen-8xa100.yaml", "epd-2-2-4.yaml"),
    (AUDIO, {"architecture": "padg", "tp": 1, "instances": 8, "slack": "quantile"}),
    (AUDIO, {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 512}),
    (AUDIO, {"architecture": "fudg", "prefill_instances": 3, "decode_instances": 5}),
    (L20, "../ecoserve/configs/padg-tp2x8.yaml"),
    (L20, "../ecoserve/configs/nodg-tp2x8.yaml"),
    (L20, "../ecoserve/configs/fudg-2p6d-tp2.yaml"),
    ("../benchmarks/nodg-long-prompts.yaml",
     {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 512}),
]


def _config(spec):
    if isinstance(spec, dict):
        return parse_config(spec), f"{spec['architecture']} (inline)"
    return load_config(ROOT / "examples" / "configs" / spec), Path(spec).name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", metavar="SUBSTRING", default=None,
                    help="run only the cases whose recipe or config contains SUBSTRING")
    args = ap.parse_args()
    print("req/s: simulated requests per wall-second (best / median of --repeat runs); "
          "evaluate_s: one goodput search (best / median)")
    print(f"{'recipe':36} {'config':22} {'goodput':>8} {'rate':>7} {'req/s best':>10} "
          f"{'median':>7} {'events/s':>9} {'evaluate_s':>10} {'median':>6} {'probes':>6}")
    for recipe, spec in CASES:
        if args.only is not None and args.only not in f"{recipe} {spec}":
            continue
        rec = load_recipe(ROOT / "examples" / recipe)
        cfg, config = _config(spec)
        ev = Evaluation(rec, requests=args.requests)
        sim = ev.simulator(cfg)
        times = []
        res = None
        for _ in range(max(1, args.repeat // 2 + 1)):
            t0 = time.perf_counter()
            res = ev.goodput(cfg)
            times.append(time.perf_counter() - t0)
        assert res is not None
        rate = 0.8 * res.goodput_rps
        walls, events = [], 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            run = sim.run(ev.requests, rate)
            walls.append(time.perf_counter() - t0)
            events = run.events
        w, wm = min(walls), statistics.median(walls)
        print(f"{recipe:36} {config:22} {res.goodput_rps:8.3f} {rate:7.3f} "
              f"{args.requests / w:10.0f} {args.requests / wm:7.0f} {events / w:9.0f} "
              f"{min(times):10.3f} {statistics.median(times):6.3f} {len(res.probes):6d}")


if __name__ == "__main__":
    main()
