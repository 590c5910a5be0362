"""Speed of the reserved-KV nodg run (hastune.sim.nodg.run.Run: KV for prompt + output reserved
at admission), which benchmarks/sim_speed.py's nodg rows (vLLM's paged terms) do not cover: the
Python path (its shortcuts; HASTUNE_SIM_CORE=python) against the compiled core (the run event by
event), on TensorRT-LLM's open-loop recipe and on the long-prompt one with its engine
terms off. Per path: the goodput, one `evaluate` (goodput search; best / median of 3), and
simulated requests per second of one 2,000-request run at 80% of the goodput (best / median of
--repeat), with its events.

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/nodg_reserved_speed.py --repeat 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[1]
CASES = [("trtllm-open-loop.yaml", True, {"tp": 1, "replicas": 8, "chunk_tokens": None}),
         ("nodg-long-prompts.yaml", False, {"tp": 2, "replicas": 4, "chunk_tokens": 512})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    for name, terms, spec in CASES:
        rec = load_recipe(ROOT / "benchmarks" / name)
        if not terms:
            rec = rec.model_copy(update={"engine": Engine(name=rec.engine.name, terms=False)})
        ev = Evaluation(rec, requests=args.requests)
        cfg = parse_config({"architecture": "nodg", **spec})
        for path in ("python", "compiled"):
            os.environ["HASTUNE_SIM_CORE"] = path
            try:
                evals = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    g = ev.goodput(cfg)
                    evals.append(time.perf_counter() - t0)
                sim = ev.simulator(cfg)
                sim.core = path
                assert not sim.profile.kv_on_demand
                assert sim.compiled(ev.requests) == (path == "compiled")
                rate = 0.8 * g.goodput_rps
                walls = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    run = sim.run(ev.requests, rate)
                    walls.append(time.perf_counter() - t0)
            finally:
                os.environ.pop("HASTUNE_SIM_CORE", None)
            n = len(ev.requests)
            print(f"{name} {spec} {path}: goodput {g.goodput_rps:.3f} req/s, "
                  f"{n / min(walls):,.0f} / {n / statistics.median(walls):,.0f} simulated req/s "
                  f"(best / median), {run.events} events; evaluate {min(evals):.2f} / "
                  f"{statistics.median(evals):.2f} s, {len(g.probes)} probes", flush=True)


if __name__ == "__main__":
    main()
