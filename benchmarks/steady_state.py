"""Does a configuration's goodput depend on the probe length? Evaluate it with the recipe's
request count and with others, and print the goodputs and their spread.

Run: OMP_NUM_THREADS=1 python benchmarks/steady_state.py benchmarks/steady-video-8xh200.yaml \\
         --config n_E=4,n_P=3,n_D=1,B=8,s=0.5 --config n_E=6,n_P=0,n_D=2,B=1,s=0 \\
         --requests 1500 20000
"""

from __future__ import annotations

import argparse
import time

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe


def _config(spec: str, arch: str) -> object:
    d: dict = {"architecture": arch}
    for kv in spec.split(","):
        k, v = kv.split("=")
        d[k] = float(v) if "." in v else int(v)
    return parse_config(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("recipe")
    ap.add_argument("--config", action="append", required=True,
                    help="knobs as k=v,k=v (architecture: the recipe's first)")
    ap.add_argument("--requests", type=int, nargs="+", default=[1500, 20000])
    args = ap.parse_args()
    rec = load_recipe(args.recipe)
    for spec in args.config:
        cfg = _config(spec, rec.architectures[0])
        vals = []
        for n in args.requests:
            t0 = time.perf_counter()
            res = Evaluation(rec, requests=n).goodput(cfg)
            vals.append(res.goodput_rps)
            print(f"{spec:32} requests {n:6d}: {res.goodput_rps:9.3f} req/s "
                  f"({len(res.probes)} probes, {time.perf_counter() - t0:.1f} s)", flush=True)
        spread = max(vals) / min(vals) - 1 if min(vals) > 0 else float("inf")
        print(f"{spec:32} spread {spread:.1%}")


if __name__ == "__main__":
    main()
