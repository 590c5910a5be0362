"""Closed-loop steady state (issue 13): does a run's mean TTFT depend on its length?

    python benchmarks/closed_loop_rounds.py [CSV] [--engine E] [--terms fitted|none]
        [--client recipe|measured]

Simulates every aggregated row of a silicon-format CSV (default
hastune/data/calibration/e2e/silicon_llama31.csv) at 40 and at 400 requests per client, with the
engine's fitted terms (hastune/engine_fitted.py) or none, and prints the distribution of
|mean TTFT(400) / mean TTFT(40) − 1| and the rows over 5%. `--client recipe` (default): the
client model a recipe's closed loop gets (clients spread over one zero-load lifetime, or over
the loaded cycle a pilot run finds where that is longer — started together where the front
end's waits vary, SGLang's: hastune.engine_terms.jittered — the mean from where the
steady state begins, the run doubled until that mean is known: hastune.sim.warmup.steady_run — the
figures also say how many more rounds the 40-round runs took);
`measured`: the one `hastune fidelity` simulates those rows with, which for InferenceX's runs
reproduces how they were measured (hastune.fidelity.harness: clients that start together,
lengths drawn at random), the mean after two rounds (for those, not over every request as
hastune fidelity counts them: that share of the first round would change with the run's
length by construction).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from silicon import CSV  # benchmarks/silicon.py (this folder is on the path)


def main() -> int:
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.rows import read_cases
    from hastune.fidelity.run import client_model, recipe_clients, recipe_for, simulate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", type=Path, default=CSV)
    ap.add_argument("--engine", default=None)
    ap.add_argument("--terms", choices=("fitted", "none"), default="fitted")
    ap.add_argument("--client", choices=("recipe", "measured"), default="recipe")
    args = ap.parse_args()
    cases = [c for c in read_cases(args.csv) if args.engine in (None, c.engine)]
    t0 = time.perf_counter()
    rows, ran, unsettled = [], [], []  # ran: rounds run / asked, of the 40-round runs
    for c in cases:
        means = []
        for rounds in (40, 400):
            rec = recipe_for(c, {}, args.csv, rounds, exact=True)
            prof = resolve_profile(rec, quiet=True)[0]
            t = (et.terms_for(c.engine, c.gpu, prof.memory.gpu_bytes / 2**30)
                 if args.terms == "fitted" else None)
            # a recipe's clients as its closed loop starts them (spread, or together where
            # the front end's waits vary); the measured ones as hastune fidelity has them, the
            # mean after two rounds (not over every request: the first round's share would
            # change with the run's length by construction)
            if args.client == "measured":
                mode = "spread" if client_model(c, t) == "spread" else "together-after-two"
            else:
                mode = recipe_clients(t)
            s = simulate(c, prof, t, rec, steady=args.client == "recipe", clients=mode)
            means.append(s.ttft_ms)
            if rounds == 40:
                ran.append(s.requests / c.clients / rounds)
                if s.settled is False:  # at the cap, its steady mean still unknown: a caveat
                    unsettled.append(c.id)
        rows.append((c, means[0], means[1], abs(means[1] / means[0] - 1)))
    d = np.array([r[3] for r in rows])
    print(f"{len(rows)} rows, terms {args.terms}, client {args.client}: "
          f"|TTFT(400)/TTFT(40) - 1| median "
          f"{np.median(d):.2%}, P90 {np.percentile(d, 90):.2%}, max {d.max():.2%}; "
          f"{int((d > 0.05).sum())} over 5% ({time.perf_counter() - t0:.0f} s)")
    x = np.array(ran)
    print(f"  the 40-round runs ran {x.mean():.2f}x the rounds asked on average (steady_run "
          f"doubles an unsettled run): {int((x > 1).sum())} of {len(x)} longer, at most "
          f"{x.max():.0f}x; {len(unsettled)} stopped unsettled at the cap (a result's "
          f"caveat: hastune.caveats.closed_loop)")
    for eng in sorted({r[0].engine for r in rows}):
        e = np.array([r[3] for r in rows if r[0].engine == eng])
        print(f"  {eng}: {len(e)} rows, {int((e > 0.05).sum())} over 5%, max {e.max():.2%}")
    for c, a, b, x in sorted(rows, key=lambda r: -r[3])[:10]:
        if x > 0.05:
            said = " (the 40-round run stopped unsettled)" if c.id in unsettled else ""
            print(f"  {c.engine} {c.gpu} tp{c.tp} {c.shape} c{c.clients}: {a:.0f} -> {b:.0f} ms"
                  f"{said}")
    over = {r[0].id for r in rows if r[3] > 0.05}
    print(f"  of the {len(over)} rows over 5%, {len(over & set(unsettled))} had a caveat at 40 "
          f"rounds; of the {len(unsettled)} with one, {len(set(unsettled) - over)} moved by "
          "5% or less")
    return 0


if __name__ == "__main__":
    sys.exit(main())
