"""What moved EcoServe's reproduction (issue 13): PaDG against NoDG with the engine terms off,
on, and on without the front end's wait per stream in flight.

    OMP_NUM_THREADS=1 python benchmarks/ecoserve_frontend.py [--cluster l20] [--model llama-30b]
        [--workload alpaca]

For one case of examples/reproduce_ecoserve.py (default: L20, Llama-30B, Alpaca, 32 GPUs)
and two deployments of its GPUs — PaDG (8 instances of TP 2 × PP 2, admitting on the minimum
saved TPOT) and Sarathi-like NoDG (8 replicas of TP 2 × PP 2, 512-token chunks) — the goodput
search of `hastune evaluate` with the engine terms off, on (vLLM's, pooled), and on with
`frontend_per_stream_s` at 0 (the rest of the terms kept). Prints a markdown table: goodput,
and at it the P90 TTFT and TPOT and the mean requests in flight per instance that streams
tokens (Evaluation.in_flight over the instances: what the per-stream caveat counts), the count
the per-stream wait multiplies.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

CONFIGS = {
    "PaDG 8 × (TP 2, PP 2), min": {"architecture": "padg", "instances": 8, "tp": 2, "pp": 2,
                                   "slack": "min"},
    "NoDG 8 × (TP 2, PP 2), 512-token chunks": {"architecture": "nodg", "replicas": 8, "tp": 2,
                                                "pp": 2, "chunk_tokens": 512},
}


@contextmanager
def no_stream_wait():
    """The engine terms with the front end's per-stream wait at 0 while the block runs."""
    from hastune import engine_terms as et

    orig = et.for_profile

    def patched(engine, profile):
        t = orig(engine, profile)
        return None if t is None else replace(t, frontend=replace(t.frontend, per_stream_s=0.0))

    et.for_profile = patched
    try:
        yield
    finally:
        et.for_profile = orig


def main() -> int:
    from reproduce_ecoserve import recipe

    from hastune import archs
    from hastune.config import parse_config
    from hastune.evaluators.sim import Evaluation

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="l20")
    ap.add_argument("--model", default="llama-30b")
    ap.add_argument("--workload", default="alpaca")
    ap.add_argument("--requests", type=int, default=800)
    args = ap.parse_args()
    base = recipe(args.cluster, args.model, args.workload, None, args.requests)
    t0 = time.perf_counter()
    print(f"{args.cluster} / {args.model} / {args.workload}, {base.cluster.gpus} GPUs\n")
    print("| deployment | engine terms | goodput (req/s) | P90 TTFT | P90 TPOT | "
          "in flight per instance |")
    print("|---|---|---|---|---|---|")
    for name, cfg_dict in CONFIGS.items():
        cfg = parse_config(cfg_dict)
        for label, terms, patch in (("off", False, False), ("on", True, False),
                                    ("on, no per-stream wait", True, True)):
            rec = base.model_copy(update={"engine": base.engine.model_copy(
                update={"terms": terms})})
            if patch:
                with no_stream_wait():
                    ev = Evaluation(rec)
            else:
                ev = Evaluation(rec)
            res = ev.goodput(cfg)
            run = res.best_run
            at = run.summary(rec.slo) if run is not None else {}
            got = ev.in_flight(res.goodput_rps, run)  # what the per-stream caveat counts
            inflight = float("nan") if got is None else got / archs.of(cfg).streams(cfg)
            print(f"| {name} | {label} | {res.goodput_rps:.2f} | "
                  f"{at.get('ttft_p90_s', float('nan')):.3f} s | "
                  f"{at.get('tpot_p90_s', float('nan')) * 1e3:.1f} ms | {inflight:.0f} |",
                  flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
