"""Simulator fidelity: simulated vs measured P90 TTFT, P90 TPOT and goodput on this machine.

1. Profiles the reference model here (`hastune profile --model ref-small --device cpu
   --threads 1`, one thread per worker, as the engine runs them; cached in benchmarks/.cache).
2. For 4 deployments (epd ×2, nodg, padg; two worker processes each) of
   benchmarks/fidelity-recipe.yaml and 3 rates each (30 / 60 / 85% of the
   simulated goodput), runs the simulator and the engine on the same requests and compares
   P90 TTFT and P90 TPOT; then compares the goodputs (real: the same search, 10% tolerance).

Run: OMP_NUM_THREADS=1 python benchmarks/fidelity.py [--requests 150] [--no-goodput]
Targets: goodput within 15%, P90 TTFT/TPOT within 20% at rates below saturation. The engine's
workers are processes sharing this machine's cores, which the simulator (one device per
worker) does not model: keep the rest of the machine idle while this runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from hastune.config import EPDConfig, EPDStaticConfig, NoDGConfig, PaDGConfig
from hastune.evaluate import Evaluation
from hastune.real import RealEvaluation, RealOptions
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
# At most two worker processes each: one per core of a 2-core machine, as the simulator
# assumes one device per worker (three processes on two cores time-share, which it does not
# model). `--configs all` adds the three-worker ones.
CONFIGS = [
    EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=1, s=0.0),
    EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=4, s=0.0),
    NoDGConfig(architecture="nodg", replicas=2, tp=1, pp=1),
    PaDGConfig(architecture="padg", instances=2, tp=1, pp=1, n_upper=2),
]
THREE_WORKERS = [
    EPDConfig(architecture="epd", n_E=1, n_P=1, n_D=1, B=2, s=0.5),
    EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=2, B=4, s=0.0),
    EPDStaticConfig(architecture="epd-static", n_E=1, n_P=1, n_D=1, batch=2, timeout_ms=10),
]


def err(sim: float, real: float) -> float:
    return abs(sim - real) / real if real > 0 else float("inf")


def name(c) -> str:
    if c.architecture == "nodg":
        return f"nodg {c.replicas} replicas chunk={c.chunk_tokens}"
    if c.architecture == "padg":
        return f"padg {c.instances} instances"
    knobs = f"B={c.B} s={c.s}" if c.architecture == "epd" else f"batch={c.batch}"
    return f"{c.architecture} {c.n_E}-{c.n_P}-{c.n_D} {knobs}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=150)
    ap.add_argument("--no-goodput", action="store_true")
    ap.add_argument("--fresh", action="store_true", help="re-profile")
    ap.add_argument("--configs", choices=("two-worker", "all"), default="two-worker")
    args = ap.parse_args()
    prof = ROOT / "benchmarks" / ".cache" / "ref-small-1thread.yaml"
    if args.fresh or not prof.exists():
        prof.parent.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "hastune", "profile", "--model", "ref-small",
                        "--device", "cpu", "--threads", "1", "--out", str(prof)]
                       + (["--fresh"] if args.fresh else []), check=True)  # else: refit rows
    rec = load_recipe(ROOT / "benchmarks" / "fidelity-recipe.yaml")
    rec = rec.model_copy(update={"profile": str(prof)})
    sim = Evaluation(rec, requests=args.requests)
    real = RealEvaluation(rec, RealOptions(requests=args.requests, max_span_s=60.0))
    pct = rec.slo.percentile
    rows, gp_rows = [], []
    print(f"{'config':28} {'rate':>6} {'TTFT sim':>9} {'real':>8} {'err':>6} "
          f"{'TPOT sim':>9} {'real':>8} {'err':>6}")
    for cfg in CONFIGS + (THREE_WORKERS if args.configs == "all" else []):
        g_sim = sim.goodput(cfg)
        for frac in (0.3, 0.6, 0.85):
            rate = round(frac * g_sim.goodput_rps, 3)
            reqs = real.requests_at(rate)
            s_run = sim.simulator(cfg).run(reqs, rate)
            r_run = real.run(cfg, rate)
            st, rt = s_run.percentile("ttft", pct), r_run.percentile("ttft", pct)
            sp, rp = s_run.percentile("tpot", pct), r_run.percentile("tpot", pct)
            rows.append((err(st, rt), err(sp, rp)))
            print(f"{name(cfg):28} {rate:6.2f} {st * 1e3:7.1f}ms {rt * 1e3:6.1f}ms "
                  f"{100 * rows[-1][0]:5.0f}% {sp * 1e3:7.1f}ms {rp * 1e3:6.1f}ms "
                  f"{100 * rows[-1][1]:5.0f}%")
        real.close()
        if not args.no_goodput:
            g_real = real.goodput(cfg)
            gp_rows.append((name(cfg), g_sim.goodput_rps, g_real.goodput_rps))
    print()
    for what, i in (("P90 TTFT", 0), ("P90 TPOT", 1)):
        xs = [r[i] for r in rows]
        print(f"{what}: median error {100 * statistics.median(xs):.0f}%, worst "
              f"{100 * max(xs):.0f}% over {len(xs)} (config, rate) pairs")
    if gp_rows:
        print(f"\n{'config':28} {'sim goodput':>12} {'real':>8} {'err':>6}")
        for n, gs, gr in gp_rows:
            print(f"{n:28} {gs:12.2f} {gr:8.2f} {100 * err(gs, gr):5.0f}%")
        es = [err(gs, gr) for _, gs, gr in gp_rows]
        print(f"goodput: median error {100 * statistics.median(es):.0f}%, worst "
              f"{100 * max(es):.0f}%")


if __name__ == "__main__":
    main()
