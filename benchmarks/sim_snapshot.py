"""A fingerprint of the simulators' output on the shipped examples: compare it before and after
a change that must not change behaviour (a refactor).

    python benchmarks/sim_snapshot.py OUT.json [--goodput]

For every shipped example recipe and every registered architecture, two configs from its
search space at the recipe's GPU budget (the first runnable one and the middle one of the
first 40) are run at two rates (the recipe's own request sample and seed); each run's
per-request TTFT, TPOT, arrival and finish times are hashed (sha256 of the float64 bytes)
beside its rejected count, events and utilisation. With
`--goodput`, one config per architecture also gets its goodput search. Wall-clock fields are
left out. Two files from the same inputs are byte-identical exactly when the simulators
computed the same runs: `cmp before.json after.json`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from hastune import archs
from hastune.evaluators.sim import Evaluation
from hastune.recipe import load_recipe
from hastune.space import space_for

ROOT = Path(__file__).resolve().parents[1]


def _h(a: np.ndarray | None) -> str | None:
    if a is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()[:16]


def _run(ev: Evaluation, cfg, rate: float) -> dict:
    r = ev.probe(ev.simulator(cfg), rate)
    return {"rate": rate, "ttft": _h(r.ttft), "tpot": _h(r.tpot), "arrival": _h(r.arrival),
            "finish": _h(r.finish), "rejected": r.rejected, "events": r.events,
            "warmup": r.warmup, "sim_time_s": r.sim_time_s,
            "utilisation": {k: round(v, 12) for k, v in sorted(r.utilisation.items())},
            "extra": {k: v for k, v in sorted(r.extra.items()) if "wall" not in k}}


def snapshot(goodput: bool = False) -> dict:
    out: dict = {}
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        rec = load_recipe(path)
        ev = Evaluation(rec)
        for arch in archs.NAMES:  # every architecture, not only the recipe's
            space = space_for(arch, str(path), rec.search_space, ev.profile)
            cfgs = []
            for c in space.configs(rec.cluster.gpus):
                if ev.runnable(c):
                    cfgs.append(c)
                if len(cfgs) >= 40:
                    break
            picked = [cfgs[0], cfgs[len(cfgs) // 2]] if cfgs else []
            runs = []
            for cfg in picked:
                start = ev.start_rate(cfg)
                runs.append({"config": cfg.model_dump(mode="json"),
                             "runs": [_run(ev, cfg, start * f) for f in (0.5, 1.0)]})
            if goodput and picked:
                g = ev.goodput(picked[0])
                runs[0]["goodput_rps"] = g.goodput_rps
            out[f"{path.name}:{arch}"] = runs
            print(f"{path.name}:{arch}: {len(picked)} configs", file=sys.stderr)
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python benchmarks/sim_snapshot.py OUT.json [--goodput]")
    Path(sys.argv[1]).write_text(json.dumps(snapshot("--goodput" in sys.argv), indent=1,
                                            sort_keys=True) + "\n")
