"""Goodput of the shipped EPD, FuDG and PaDG examples with vLLM's terms on, their decode KV
reserved (prompt + output at admission, as before issue 13's paged pools) and on demand
(hastune.sim.decode_paged, hastune.sim.padg.paged: what `kv_on_demand` now gives them).

    python benchmarks/paged_pools_goodput.py [--only SUBSTRING]

For each epd / fudg / padg recipe × config of scripts/sim_golden.py: the goodput search of
`hastune evaluate` with `engine: {name: vllm, terms: true}`, once with the profile's
`kv_on_demand` forced off and once as the terms set it (on). Prints a markdown table: goodput
reserved, on demand, their ratio, the P90 TPOT at goodput and the preemptions in that run.
Then the same for benchmarks/paged-long-outputs.yaml (long outputs on little KV: Qwen2-72B on
H100, ~1k-token prompts, ~2k-token outputs), FuDG with TP-4 and TP-2 decode instances and
PaDG with four TP-2 and two TP-4 instances. The PaDG cases on that recipe are slow (four TP-2
instances: 383 s reserved, 171 s on demand, one core); `--only` picks cases.
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
    print("| recipe | config | reserved (req/s) | on demand (req/s) | ratio | P90 TPOT reserved "
          "| P90 TPOT on demand | preemptions |")
    print("|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    long = Path(__file__).resolve().parent / "paged-long-outputs.yaml"
    cases = G.examples()
    cases += [(long, f"fudg {p}p-tp2 {d}d-tp{tp}",
               {"architecture": "fudg", "prefill_instances": p, "prefill_tp": 2,
                "decode_instances": d, "decode_tp": tp}) for p, d, tp in ((2, 1, 4), (1, 3, 2))]
    cases += [(long, f"padg {k}x-tp{tp}", {"architecture": "padg", "tp": tp, "instances": k})
              for k, tp in ((4, 2), (2, 4))]
    for rec_path, cfg_name, cfg_dict in cases:
        rec_name = rec_path.name
        if cfg_dict["architecture"] not in ("epd", "fudg", "padg"):
            continue
        if args.only and args.only not in rec_name + cfg_name:
            continue
        rec = load_recipe(rec_path)
        rec = rec.model_copy(update={"engine": rec.engine.model_copy(
            update={"name": "vllm", "terms": True})})
        cfg = parse_config(cfg_dict)
        out = []
        for on in (False, True):
            ev = Evaluation(rec)
            if ev.engine_terms is None:
                break
            ev.profile = ev.profile.model_copy(update={"kv_on_demand": on})
            res = ev.goodput(cfg)
            best = res.best_run
            at = best.summary(rec.slo) if best is not None else {}
            pre = best.extra.get("preemptions", 0.0) if best is not None else 0.0
            out.append((res.goodput_rps, at.get("tpot_p90_s", float("nan")), pre))
        if len(out) < 2:
            continue
        (g0, p0, _), (g1, p1, n1) = out
        ratio = g1 / g0 if g0 else float("nan")
        print(f"| {rec_name} | {cfg_name} | {g0:.2f} | {g1:.2f} | {ratio:.2f} | {p0:.4f} s | "
              f"{p1:.4f} s | {n1:.0f} |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
