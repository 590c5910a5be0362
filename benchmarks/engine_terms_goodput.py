"""The shipped examples' goodputs with the engine terms off (the kernels) and on (issue 13; the
default since 2026-12-03).

    python benchmarks/engine_terms_goodput.py [--only SUBSTRING]

For each recipe × config of scripts/sim_golden.py (the shipped examples), the goodput search
of `hastune evaluate` with `engine: {terms: false}` and with `terms: true` (the fitted vLLM
terms: docs/fidelity.md); profiles measured on a device (the CPU reference) take no terms.
Prints a markdown table: goodput off, on, their ratio, and the P90 TTFT / TPOT at goodput.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    import sim_golden as G

    from hastune.config import parse_config
    from hastune.evaluators.sim import Evaluation
    from hastune.recipe import load_recipe

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="only cases whose recipe or config has this")
    args = ap.parse_args()
    print("| recipe | config | terms off (req/s) | terms on (req/s) | on/off | P90 TTFT on | "
          "P90 TPOT on |")
    print("|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for rec_path, cfg_name, cfg_dict in G.examples(args.only):
        rec_name = rec_path.relative_to(G.EX)
        rec = load_recipe(rec_path)
        cfg = parse_config(cfg_dict)
        out = []
        for terms in (False, True):
            r = rec.model_copy(update={"engine": rec.engine.model_copy(update={"terms": terms})})
            ev = Evaluation(r)
            if terms and ev.engine_terms is None:
                out.append(None)
                continue
            res = ev.goodput(cfg)
            at = res.best_run.summary(r.slo) if res.best_run is not None else {}
            out.append((res.goodput_rps, at.get("ttft_p90_s"), at.get("tpot_p90_s")))
        off, on = out
        if on is None:
            print(f"| {rec_name} | {cfg_name} | {off[0]:.2f} | n/a (measured profile) | | | |")
            continue
        ratio = on[0] / off[0] if off[0] else float("nan")
        ttft = f"{on[1]:.3f} s" if on[1] is not None else "-"
        tpot = f"{on[2]:.4f} s" if on[2] is not None else "-"
        print(f"| {rec_name} | {cfg_name} | {off[0]:.2f} | {on[0]:.2f} | {ratio:.2f} | {ttft} | "
              f"{tpot} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
