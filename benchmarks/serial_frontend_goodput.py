"""Goodput under a serial API server in open loop (issue 13): TensorRT-LLM's trtllm-serve
streams every output token in one process (engine_terms.STREAM_TOKEN_S), one per instance.

    python benchmarks/serial_frontend_goodput.py [RECIPE]

For the recipe (default benchmarks/trtllm-open-loop.yaml: TensorRT-LLM's terms on, open-loop
Poisson arrivals) and nodg layouts of its GPUs (replicas × TP), the goodput search of
`hastune evaluate` with the server's ceiling (as the simulator has it) and without it (what
open loop did before: STREAM_TOKEN_S emptied), beside the ceiling itself, replicas / (b ×
mean output tokens) requests a second. Prints a markdown table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    from hastune import engine_terms as et
    from hastune.config import parse_config
    from hastune.evaluators.sim import Evaluation
    from hastune.recipe import load_recipe

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "benchmarks" / "trtllm-open-loop.yaml"
    rec = load_recipe(path)
    gpus = rec.cluster.gpus
    b = et.STREAM_TOKEN_S.get(rec.engine.name, 0.0)
    t0 = time.perf_counter()
    print("| layout | ceiling (req/s) | goodput without it | with it | with/without |")
    print("|---|---|---|---|---|")
    for tp in (8, 4, 2, 1):
        if gpus % tp:
            continue
        cfg = parse_config({"kind": "deployment", "architecture": "nodg",
                            "replicas": gpus // tp, "tp": tp, "pp": 1})
        got = []
        for on in (False, True):
            saved = dict(et.STREAM_TOKEN_S)
            if not on:
                et.STREAM_TOKEN_S.clear()
            try:
                ev = Evaluation(rec)
                got.append(ev.goodput(cfg).goodput_rps)
            finally:
                et.STREAM_TOKEN_S.clear()
                et.STREAM_TOKEN_S.update(saved)
        out = float(ev.requests.output_tokens.mean())
        ceiling = gpus // tp / (b * out) if b > 0 else float("inf")
        print(f"| {gpus // tp} x TP {tp} | {ceiling:.1f} | {got[0]:.2f} | {got[1]:.2f} | "
              f"{got[1] / got[0]:.2f} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
