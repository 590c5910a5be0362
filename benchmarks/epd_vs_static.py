"""EPD (EAServe) against the static E/P/D split (Dynamo-like) on the same GPUs: the best
configuration of each over a grid, for one recipe.

Run: OMP_NUM_THREADS=1 python benchmarks/epd_vs_static.py examples/audio-ultravox-8xa100.yaml
Grid: every (n_E, n_P, n_D) within the budget; epd: B ∈ {1, 2, 4, 8}, s ∈ {0, .25, .5, .75, 1};
epd-static: batch ∈ {1, 4, 8}, timeout 20 ms. Prints the best of each and the ratio.
"""

from __future__ import annotations

import argparse
import time

from hastune.archs.epd import EPDConfig
from hastune.archs.epd_static import EPDStaticConfig
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe


def allocations(g: int, min_p: int):
    for n_e in range(1, g):
        for n_p in range(min_p, g - n_e):
            n_d = g - n_e - n_p
            if n_d >= 1:
                yield n_e, n_p, n_d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("recipe")
    ap.add_argument("--requests", type=int, default=1000)
    args = ap.parse_args()
    rec = load_recipe(args.recipe)
    ev = Evaluation(rec, requests=args.requests)
    g = rec.cluster.gpus
    t0 = time.perf_counter()
    best: dict[str, tuple[float, object]] = {}
    for arch in ("epd", "epd-static"):
        cands = []
        if arch == "epd":
            for e, p, d in allocations(g, 0):
                for B in (1, 2, 4, 8):
                    for s in (0.0, 0.25, 0.5, 0.75, 1.0):
                        if p == 0 and s > 0:
                            continue
                        cands.append(EPDConfig(architecture="epd", n_E=e, n_P=p, n_D=d, B=B, s=s))
        else:
            for e, p, d in allocations(g, 1):
                for b in (1, 4, 8):
                    cands.append(EPDStaticConfig(architecture="epd-static", n_E=e, n_P=p, n_D=d,
                                                 batch=b, timeout_ms=20))
        for c in cands:
            gp = ev.goodput(c).goodput_rps
            if arch not in best or gp > best[arch][0]:
                best[arch] = (gp, c)
        print(f"{arch:11} best {best[arch][0]:8.3f} req/s of {len(cands)} configs: "
              f"{best[arch][1].model_dump(exclude={'kind', 'name'})}")
    ratio = best["epd"][0] / best["epd-static"][0] if best["epd-static"][0] else float("inf")
    print(f"epd / epd-static = {ratio:.2f}x  ({rec.name}, {args.requests} requests/probe, "
          f"seed {rec.seed}, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
