"""Simulator output on the shipped examples, without wall-clock fields: run before and after a
refactor and diff the two files (they must be byte-identical, or the change explained).

Run: python scripts/sim_golden.py OUT.json [--jobs 2]
Each case is `hastune simulate --json` at two rates and `hastune evaluate --json` (the whole
goodput search) of one recipe × config; configs are shipped files or written inline here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"
AUDIO, IMAGE = "audio-ultravox-8xa100.yaml", "image-llava-8xa100.yaml"
VIDEO = "video-qwen-8xa100.yaml"
L20, A800, H100 = ("ecoserve/l20-codellama-sharegpt.yaml", "ecoserve/a800-llama-sharegpt.yaml",
                   "ecoserve/h100-qwen-longbench.yaml")
CLOSED, BURST = "ecoserve/a800-codellama-closed.yaml", "ecoserve/l20-codellama-burst.yaml"
INLINE = {
    "padg8": {"architecture": "padg", "tp": 1, "instances": 8, "slack": "quantile"},
    "nodg8": {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": 512},
    "nodg8-nochunk": {"architecture": "nodg", "tp": 1, "replicas": 8, "chunk_tokens": None},
    "fudg35": {"architecture": "fudg", "prefill_instances": 3, "decode_instances": 5},
    "epd-nogap": {"architecture": "epd", "n_E": 3, "n_P": 1, "n_D": 4, "B": 4, "s": 0.3,
                  "max_gap_ms": None},
    "nodg-tp2pp2": {"architecture": "nodg", "tp": 2, "pp": 2, "replicas": 4},
    "padg-tp2x4": {"architecture": "padg", "tp": 2, "instances": 4},
    "nodg-tp2x4": {"architecture": "nodg", "tp": 2, "replicas": 4, "chunk_tokens": 2048},
}
# (recipe, config file under examples/ or inline name, rates for simulate)
CASES = [
    (AUDIO, "configs/epd-2-2-4.yaml", (20, 120)),
    (AUDIO, "configs/epd-static-2-2-4.yaml", (20, 100)),
    (AUDIO, "configs/audio-epd-4-0-4.yaml", (20, 120)),
    (AUDIO, "epd-nogap", (20, 120)),
    (AUDIO, "padg8", (10, 60)),
    (AUDIO, "nodg8", (10, 60)),
    (AUDIO, "nodg8-nochunk", (10, 60)),
    (AUDIO, "fudg35", (10, 60)),
    (IMAGE, "configs/epd-2-2-4.yaml", (2, 8)),
    (IMAGE, "configs/epd-static-2-2-4.yaml", (2, 8)),
    (VIDEO, "configs/epd-2-2-4.yaml", (5, 30)),
    (VIDEO, "nodg8", (5, 30)),
    ("reference-cpu.yaml", "configs/reference-cpu-epd.yaml", (20, 90)),
    ("reference-cpu.yaml", "configs/reference-cpu-nodg.yaml", (20, 90)),
    ("reference-cpu.yaml", "configs/reference-cpu-padg.yaml", (20, 90)),
    (L20, "ecoserve/configs/padg-tp2x8.yaml", (2, 6)),
    (L20, "ecoserve/configs/nodg-tp2x8.yaml", (2, 6)),
    (L20, "ecoserve/configs/fudg-2p6d-tp2.yaml", (2, 6)),
    (L20, "nodg-tp2pp2", (2, 6)),
    (A800, "ecoserve/configs/padg-tp2x8.yaml", (2, 6)),
    (H100, "ecoserve/configs/fudg-2p6d-tp2.yaml", (0.5, 2)),
    (BURST, "ecoserve/configs/padg-mitosis.yaml", (2, 6)),
    (CLOSED, "padg-tp2x4", (16, 64)),
    (CLOSED, "nodg-tp2x4", (16, 64)),
]
DROP = {"wall_s"}


def examples(only: str | None = None) -> list[tuple[Path, str, dict]]:
    """CASES as (recipe path, config name, config mapping) for the benchmarks that evaluate
    the shipped examples (benchmarks/engine_terms_goodput.py, paged_pools_goodput.py); only
    those whose recipe or config name contains `only`, when given."""
    from hastune.yamlio import read_yaml_mapping
    return [(EX / r, c, INLINE.get(c) or read_yaml_mapping(EX / c, "config"))
            for r, c, _ in CASES if not only or only in r + c]


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in DROP}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def _hastune(*args: str) -> object:
    p = subprocess.run([sys.executable, "-m", "hastune", *args], capture_output=True, text=True)
    if p.returncode not in (0, 3):  # 3: the run misses the SLOs (its JSON is the result)
        return {"exit": p.returncode, "stderr": p.stderr.strip().splitlines()[-1:]}
    return _strip(json.loads(p.stdout))


def _case(case, tmp: Path) -> tuple[str, dict]:
    recipe, config, rates = case
    if config in INLINE:
        path = tmp / f"{config}.yaml"
        path.write_text(yaml.safe_dump(INLINE[config]))
    else:
        path = EX / config
    r = str(EX / recipe)
    out = {f"simulate@{x}": _hastune("simulate", r, "-c", str(path), "--rate", str(x), "--json")
           for x in rates}
    out["evaluate"] = _hastune("evaluate", r, "-c", str(path), "--json")
    return f"{recipe} × {config}", out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(args.jobs) as pool:
        results = dict(pool.map(lambda c: _case(c, Path(d)), CASES))
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    bad = [k for k, v in results.items() if any(isinstance(x, dict) and "exit" in x
                                                 for x in v.values())]
    print(f"{len(results)} cases → {args.out}; failed commands in: {bad or 'none'}")


if __name__ == "__main__":
    main()
