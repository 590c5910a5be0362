"""Whether a group's simulated TTFTs hang on a front end of exactly zero: the rows of one
(engine, GPU) with its fitted terms (hastune/engine_fitted.py), the front end's constant
(`frontend_s`) set to 0 and to a few small positive values, nothing refitted; the rows are
simulated as `hastune fidelity` simulates them (their benchmark client: queued on H100,
together on H200).

    python benchmarks/fidelity_zero_frontend.py [CSV] [--engine trtllm] [--gpu h200-141gb]
        [--values 0,1e-12,1e-6,1e-3] [--rows]

With a front end of exactly 0 (TensorRT-LLM's H200 terms until c91c5c7, whose clients start
together and whose per-stream wait is 0 too; fits now keep it at least
hastune.fidelity.fit.FRONTEND_MIN_S) a closed-loop client's next request reaches the engine at the
very instant its last one finished, a decode step's boundary, and joins the iteration that
starts there; with any positive front end (a picosecond or a millisecond alike) it comes
after that iteration was planned and waits for the next one. In lockstep closed loops those
are two different steady states. Prints, per value, the median |error| of the mean TTFT,
its bias, the rows within 20%, and how many rows move by more than 5% from the first value.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from silicon import CSV, group_rows  # benchmarks/silicon.py (this folder is on the path)


def main() -> int:
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity import fit as F
    from hastune.fidelity.run import recipe_for, simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", type=Path, default=CSV)
    ap.add_argument("--engine", default="trtllm")
    ap.add_argument("--gpu", default="h200-141gb")
    ap.add_argument("--values", default="0,1e-12,1e-6,1e-3",
                    help="front-end constants in seconds, a comma list (the first: the base)")
    ap.add_argument("--rows", action="store_true", help="print every row that moves by > 5%%")
    args = ap.parse_args()
    values = [float(x) for x in args.values.split(",")]
    cases = group_rows(args.csv, args.engine, args.gpu)
    t0 = time.perf_counter()
    cases.sort(key=lambda c: (c.isl, c.osl, c.tp, c.clients))
    profiles: dict = {}
    sim = np.zeros((len(values), len(cases)))
    terms = None
    for j, c in enumerate(cases):
        rec = recipe_for(c, {}, args.csv)
        key = (rec.model, c.weights)
        if key not in profiles:
            profiles[key] = resolve_profile(rec, quiet=True)[0]
        prof = profiles[key]
        if terms is None:  # as hastune fidelity simulates the group's rows (its client)
            sched = et.scheduler_defaults(c.engine, prof.memory.gpu_bytes / 2**30, c.gpu)
            terms = F.shipped(c.engine, c.gpu, sched)
        for i, v in enumerate(values):
            t = replace(terms, frontend=replace(terms.frontend, request_s=v))
            sim[i, j] = simulate(c, prof, t, rec).ttft_ms
        if args.rows and any(abs(sim[i, j] / sim[0, j] - 1) > 0.05 for i in range(len(values))):
            print(f"{c.shape} tp{c.tp} c{c.clients}: measured {c.ttft_ms:.0f} ms; " + ", ".join(
                f"{v:g} s: {sim[i, j]:.0f}" for i, v in enumerate(values)), flush=True)
    meas = np.array([c.ttft_ms for c in cases])
    print(f"{args.engine} on {args.gpu}: {len(cases)} rows, terms {terms.fitted_on} "
          f"({time.perf_counter() - t0:.0f} s)")
    for i, v in enumerate(values):
        e = sim[i] / meas - 1
        moved = int((np.abs(sim[i] / sim[0] - 1) > 0.05).sum())
        print(f"  front end {v:g} s: median |error| {np.median(np.abs(e)):6.1%}, bias "
              f"{np.median(e):+6.1%}, {int((np.abs(e) <= 0.2).sum()):2d} rows within 20%, "
              f"{moved:2d} rows > 5% from {values[0]:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
