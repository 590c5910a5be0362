"""How the measured runs' clients are simulated (issue 13): the rows of one (engine, GPU)
under each client model of hastune.fidelity.run, with fixed terms.

    python benchmarks/fidelity_client_models.py [CSV] [--engine trtllm] [--gpu h200-141gb]
        [--rounds 12] [--rows]

For every row of the group (default: TensorRT-LLM on H200, InferenceX runs whose benchmark
started every client at once: hastune.fidelity.harness), simulates it with the engine's fitted terms
(hastune/engine_fitted.py) and its clients `spread` (over a request's zero-load lifetime, the
mean after two rounds), `together` (started at once, the mean over every request) and
`together-after-two` (started at once, the mean after two rounds), each run `--rounds`
requests per client (a list: one run per value, `together` only past the first), and prints
per isl × osl shape the range of simulated / measured mean TTFT and, per model, the median
|error| and the rows within 20%. The terms are not refitted here: `hastune fidelity` does that.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from silicon import CSV, group_rows  # benchmarks/silicon.py (this folder is on the path)


def main() -> int:
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.run import CLIENT_MODELS, recipe_for, simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", type=Path, default=CSV)
    ap.add_argument("--engine", default="trtllm")
    ap.add_argument("--gpu", default="h200-141gb")
    ap.add_argument("--rounds", default="12", help="requests per client, a comma list")
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    rounds = [int(x) for x in args.rounds.split(",")]
    cases = group_rows(args.csv, args.engine, args.gpu)
    t0 = time.perf_counter()
    runs = [(m, rounds[0]) for m in CLIENT_MODELS] + [("together", r) for r in rounds[1:]]
    ratio: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    profiles: dict = {}  # by model and precision, as hastune fidelity builds them
    terms = None
    for c in cases:
        for mode, r in runs:
            rec = recipe_for(c, {}, args.csv, r)
            key = (rec.model, c.weights)
            if key not in profiles:
                profiles[key] = resolve_profile(rec, quiet=True)[0]
            prof = profiles[key]
            if terms is None:  # one (engine, GPU): one set of terms
                terms = et.terms_for(c.engine, c.gpu, prof.memory.gpu_bytes / 2**30)
            sim = simulate(c, prof, terms, rec, clients=mode)
            ratio[(mode, r)][c.line] = sim.ttft_ms / c.ttft_ms
        if args.rows:
            print(f"{c.shape} tp{c.tp} c{c.clients}: measured {c.ttft_ms:.0f} ms; " + ", ".join(
                f"{m} ({r}) {ratio[(m, r)][c.line]:.2f}x" for m, r in runs), flush=True)
    print(f"{args.engine} on {args.gpu}: {len(cases)} rows, terms {terms.fitted_on or 'prior'}"
          f" ({time.perf_counter() - t0:.0f} s)")
    shapes = sorted({c.shape for c in cases}, key=lambda s: tuple(map(int, s.split("x"))))
    for mode, r in runs:
        e = np.array([abs(x - 1) for x in ratio[(mode, r)].values()])
        by = "; ".join(
            f"{s} {min(v):.2f}-{max(v):.2f}x" for s in shapes
            for v in [[ratio[(mode, r)][c.line] for c in cases if c.shape == s]])
        print(f"  {mode:18s} {r:3d} rounds: median |error| {np.median(e):6.1%}, "
              f"{int((e <= 0.2).sum()):2d} rows within 20%; simulated / measured TTFT: {by}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
