"""Closed-loop steady state (issue 13): does a recipe's steady mean TTFT depend on how its
clients start?

    python benchmarks/closed_loop_starts.py [CSV] [--engine sglang] [--rounds 100]
        [--starts random together]

Simulates every aggregated row of one engine in a silicon-format CSV (default
hastune/data/calibration/e2e/silicon_llama31.csv) as a recipe's closed loop does — the engine's
fitted terms, the steady-state rule, the run doubled until its steady mean is known
(hastune.sim.warmup.steady_run) — with its clients started two ways (`--starts`, of
hastune.fidelity.run.CLIENT_MODELS: spread evenly over a request's lifetime, at random over
it, or together), and prints the distribution of |TTFT(second) / TTFT(first) − 1|, the rows
over 5% with the measured TTFT beside them. Identical, deterministic clients that start
together stay in lockstep (vLLM, TensorRT-LLM: the reason a recipe starts them spread,
docs/fidelity.md); SGLang's front-end waits vary, so its clients forget how they started —
slowly, and where they do not, its steady state depends on the start. A recipe starts them
together, as benchmark tools do (hastune.engine_terms.jittered).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from silicon import CSV, group_rows  # benchmarks/silicon.py (this folder is on the path)


def main() -> int:
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.run import recipe_for, simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", type=Path, default=CSV)
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--rounds", type=int, default=100, help="requests per client asked for")
    ap.add_argument("--starts", nargs=2, default=["random", "together"],
                    choices=["spread", "random", "together"], help="the two client starts")
    args = ap.parse_args()
    cases = group_rows(args.csv, args.engine)
    t0 = time.perf_counter()
    rows, profiles = [], {}
    for c in cases:
        rec = recipe_for(c, {}, args.csv, args.rounds, exact=True)
        key = (rec.model, c.weights)
        if key not in profiles:
            profiles[key] = resolve_profile(rec, quiet=True)[0]
        prof = profiles[key]
        t = et.terms_for(c.engine, c.gpu, prof.memory.gpu_bytes / 2**30)
        a, b = (simulate(c, prof, t, rec, steady=True, clients=m).ttft_ms
                for m in args.starts)
        if np.isfinite(a) and np.isfinite(b):  # a deployment that cannot hold the requests: out
            rows.append((c, a, b, abs(b / a - 1)))
    d = np.array([r[3] for r in rows])
    first, second = args.starts
    print(f"{args.engine}: {len(rows)} of {len(cases)} rows finite, {args.rounds} rounds asked: "
          f"|TTFT({second})/TTFT({first}) - 1| median {np.median(d):.2%}, P90 "
          f"{np.percentile(d, 90):.2%}, max {d.max():.2%}; {int((d > 0.05).sum())} over 5% "
          f"({time.perf_counter() - t0:.0f} s)")
    for c, a, b, x in sorted(rows, key=lambda r: -r[3])[:15]:
        if x > 0.05:
            print(f"  {c.gpu} tp{c.tp} {c.shape} c{c.clients}: {first} {a:.0f} ms, "
                  f"{second} {b:.0f} ms (measured {c.ttft_ms:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
