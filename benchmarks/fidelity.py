"""Simulator fidelity: simulated vs measured P90 TTFT, P90 TPOT and goodput on this machine,
before and after `hastune calibrate` re-fits the profile from the engine's own step timings.

1. The profile: the shipped one-core profile (profiles/cpu/ref-small-1core.yaml, one thread per
   worker as the engine runs them); `--fresh` re-profiles here first (`hastune profile --model
   ref-small --device cpu --threads 1`, cached in benchmarks/.cache).
2. For 4 deployments (the shipped reference configs of epd, nodg and padg, and epd with B=1;
   two worker processes each: they fit a 2-core machine) of benchmarks/fidelity-recipe.yaml
   and 3 rates each (30 / 60 / 85% of the simulated goodput), runs the simulator and the
   engine on the same requests and compares P90 TTFT and P90 TPOT; then compares the
   goodputs (real: the same search, 10% tolerance).
3. Re-fits the profile from the steps the engine recorded in step 2's rate sweep
   (hastune.calibrate.from_runs, what `hastune calibrate` runs) and prints the simulator's
   errors again with the re-fitted profile, against the same measurements.

Run: OMP_NUM_THREADS=1 python benchmarks/fidelity.py [--requests 150] [--no-goodput] [--fresh]
Targets: goodput within 15%, P90 TTFT/TPOT within 20% at rates below saturation, after
calibration. Keep the rest of the machine idle while this runs (`uptime` before and after).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import yaml

from hastune.archs.epd import EPDConfig
from hastune.archs.epd_static import EPDStaticConfig
from hastune.config import load_config
from hastune.evaluators.engine import RealEvaluation, RealOptions
from hastune.evaluators.sim import Evaluation
from hastune.profile import load_profile
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent
# The shipped reference configs (examples/configs/reference-cpu-{epd,nodg,padg}.yaml), and epd
# with B=1: two worker processes each, one per core of a 2-core machine, as the simulator
# assumes one device per worker (three processes on two cores time-share, which it does not
# model). `--configs all` adds the three-worker ones.
SHIPPED = [load_config(ROOT / "examples" / "configs" / f"reference-cpu-{a}.yaml")
           for a in ("epd", "nodg", "padg")]
CONFIGS = [EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=1, s=0.0), *SHIPPED]
THREE_WORKERS = [
    EPDConfig(architecture="epd", n_E=1, n_P=1, n_D=1, B=2, s=0.5),
    EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=2, B=4, s=0.0),
    EPDStaticConfig(architecture="epd-static", n_E=1, n_P=1, n_D=1, batch=2, timeout_ms=10),
]


def err(sim: float, real: float) -> float:
    """Relative error; inf where the engine missed the SLOs outright (rejected requests make
    its P90 infinite) or measured nothing."""
    if not 0 < real < float("inf"):
        return float("inf")
    return abs(sim - real) / real


def name(c) -> str:
    if c.architecture == "nodg":
        return f"nodg {c.replicas} replicas chunk={c.chunk_tokens}"
    if c.architecture == "padg":
        return f"padg {c.instances} instances"
    knobs = f"B={c.B} s={c.s}" if c.architecture == "epd" else f"batch={c.batch}"
    return f"{c.architecture} {c.n_E}-{c.n_P}-{c.n_D} {knobs}"


def report(rows: list, gp_rows: list, what: str) -> None:
    print(f"\n== {what}")
    for label, i in (("P90 TTFT", 0), ("P90 TPOT", 1)):
        xs = [r[i] for r in rows]
        print(f"{label}: median error {100 * statistics.median(xs):.0f}%, worst "
              f"{100 * max(xs):.0f}% over {len(xs)} (config, rate) pairs")
    if gp_rows:
        print(f"{'config':28} {'sim goodput':>12} {'real':>8} {'err':>6}")
        for n, gs, gr in gp_rows:
            print(f"{n:28} {gs:12.2f} {gr:8.2f} {100 * err(gs, gr):5.0f}%")
        es = [err(gs, gr) for _, gs, gr in gp_rows]
        print(f"goodput: median error {100 * statistics.median(es):.0f}%, worst "
              f"{100 * max(es):.0f}%")
        tpot = statistics.median(r[1] for r in rows)
        print(f"targets: every goodput within 15%: {'met' if max(es) <= 0.15 else 'NOT met'}; "
              f"P90 TPOT median error ≤ 20%: {'met' if tpot <= 0.20 else 'NOT met'}")


def compare(sim: Evaluation, pairs: list, pct: float, show: bool) -> list:
    """(TTFT error, TPOT error) of the simulator against each measured (config, rate, run)."""
    rows = []
    for cfg, rate, reqs, r_run in pairs:
        s_run = sim.simulator(cfg).run(reqs, rate)
        st, rt = s_run.percentile("ttft", pct), r_run.percentile("ttft", pct)
        sp, rp = s_run.percentile("tpot", pct), r_run.percentile("tpot", pct)
        rows.append((err(st, rt), err(sp, rp)))
        if show:
            print(f"{name(cfg):28} {rate:6.2f} {st * 1e3:7.1f}ms {rt * 1e3:6.1f}ms "
                  f"{100 * rows[-1][0]:5.0f}% {sp * 1e3:7.1f}ms {rp * 1e3:6.1f}ms "
                  f"{100 * rows[-1][1]:5.0f}%", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=150)
    ap.add_argument("--no-goodput", action="store_true")
    ap.add_argument("--fresh", action="store_true", help="re-profile here first")
    ap.add_argument("--configs", choices=("two-worker", "all"), default="two-worker")
    args = ap.parse_args()
    prof = ROOT / "profiles" / "cpu" / "ref-small-1core.yaml"
    if args.fresh:
        prof = ROOT / "benchmarks" / ".cache" / "ref-small-1thread.yaml"
        prof.parent.mkdir(exist_ok=True)
        subprocess.run([sys.executable, "-m", "hastune", "profile", "--model", "ref-small",
                        "--device", "cpu", "--threads", "1", "--out", str(prof), "--fresh"],
                       check=True)
    rec = load_recipe(ROOT / "benchmarks" / "fidelity-recipe.yaml")
    rec = rec.model_copy(update={"profile": str(prof)})
    sim = Evaluation(rec, requests=args.requests)
    # --configs all: three workers on a 2-core machine run oversubscribed (and say so)
    real = RealEvaluation(rec, RealOptions(requests=args.requests, max_span_s=60.0,
                                           oversubscribe=args.configs == "all"))
    pct = rec.slo.percentile
    pairs, goodputs = [], []
    print(f"{'config':28} {'rate':>6} {'TTFT sim':>9} {'real':>8} {'err':>6} "
          f"{'TPOT sim':>9} {'real':>8} {'err':>6}")
    for cfg in CONFIGS + (THREE_WORKERS if args.configs == "all" else []):
        g_sim = sim.goodput(cfg)
        for frac in (0.3, 0.6, 0.85):
            rate = round(frac * g_sim.goodput_rps, 3)
            reqs = real.requests_at(rate)
            pairs.append((cfg, rate, reqs, real.run(cfg, rate)))
        real.close()
        sweep_steps = list(real.steps)
        if not args.no_goodput:
            goodputs.append((cfg, g_sim.goodput_rps, real.goodput(cfg).goodput_rps))
        real.steps = sweep_steps  # calibrate from the sweeps' runs only
    rows = compare(sim, pairs, pct, show=True)
    report(rows, [(name(c), gs, gr) for c, gs, gr in goodputs], f"profile {prof.name}")

    from hastune.calibrate.from_runs import recalibrate

    new, fits = recalibrate(load_profile(prof), [p["workers"] for p in real.steps])
    print("\nre-fitted from the sweeps' engine steps (median / P90 error before → after):")
    for f in fits:
        print(f"  {f.stage:8} {f.rows:6d} steps  {f.before['median_pct']:.1f}% / "
              f"{f.before['p90_pct']:.1f}% → {f.after['median_pct']:.1f}% / "
              f"{f.after['p90_pct']:.1f}%  ({f.method})")
    out = ROOT / "benchmarks" / ".cache" / "ref-small-calibrated.yaml"
    out.parent.mkdir(exist_ok=True)
    out.write_text(yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False))
    sim2 = Evaluation(rec.model_copy(update={"profile": str(out)}), requests=args.requests)
    rows2 = compare(sim2, pairs, pct, show=False)
    gp2 = [(name(c), sim2.goodput(c).goodput_rps, gr) for c, _, gr in goodputs]
    report(rows2, gp2, f"after calibration ({out.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
