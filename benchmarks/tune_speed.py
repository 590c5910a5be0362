"""How long tuning takes: today's tree against a git ref, in one run, with the answers side by
side (issue 34's yardstick).

    python benchmarks/tune_speed.py --ref 1d83ef3            # README tune, evaluates, scaling
    python benchmarks/tune_speed.py --ref HEAD~1 --quick     # a few minutes: fewer trials
    python benchmarks/tune_speed.py --ref 1d83ef3 --only readme,evaluate --repeat 3
    python benchmarks/tune_speed.py --ref 1d83ef3 --only scaling --gpus 64 --trials 100

The ref is checked out in a temporary git worktree; each case runs `python -m hastune …` in a
fresh process there and in this tree (PYTHONPATH set to the tree, OMP_NUM_THREADS=1), the two
alternating so that the machine's load falls on both alike. Cases:

- readme: the README's `hastune tune examples/audio-ultravox-8xa100.yaml --trials 40`
  (--quick: 8 trials): wall seconds, the best configuration and its goodput;
- evaluate: one `hastune evaluate` of the audio example per architecture (the configs of
  benchmarks/sim_speed.py: epd 2-2-4, epd-static 2-2-4, padg, nodg and fudg on 8 GPUs): wall
  seconds and goodput;
- scaling: the audio example over all five architectures on 8, 16, 32 and 64 GPUs (--quick: 8
  and 16), `--trials 100` (--quick: 10): wall seconds, evaluations made, the best and its
  goodput.

It prints one row per case: the ref's and this tree's median wall seconds (of --repeat runs),
their ratio (ref / today: above 1 is faster today) and the two answers; `--json FILE` writes
every run. Only figures from one run of this script compare (same machine, same load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
AUDIO = "examples/audio-ultravox-8xa100.yaml"
ARCHS = ["epd", "epd-static", "padg", "nodg", "fudg"]
EVALUATE = {  # architecture: config (a file under examples/configs/ or inline)
    "epd": "epd-2-2-4.yaml",
    "epd-static": "epd-static-2-2-4.yaml",
    "padg": {"kind": "deployment", "architecture": "padg", "tp": 1, "instances": 8},
    "nodg": {"kind": "deployment", "architecture": "nodg", "tp": 1, "replicas": 8,
             "chunk_tokens": 512},
    "fudg": {"kind": "deployment", "architecture": "fudg", "prefill_instances": 3,
             "decode_instances": 5},
}


def hastune(tree: Path, args: list[str], timeout: float) -> tuple[float, dict]:
    """Run `python -m hastune ARGS --json` in `tree`: (wall seconds, the JSON it printed)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "hastune", *args, "--json"], cwd=tree, env=env,
                       capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 3):  # 3: nothing met the SLOs, still an answer
        raise RuntimeError(f"{tree}: hastune {' '.join(args)} exited {p.returncode}:\n"
                           f"{p.stderr[-2000:]}")
    return wall, json.loads(p.stdout[p.stdout.index("{"):])


def _answer(out: dict) -> str:
    cfg = out.get("best_config") or {}
    knobs = ", ".join(f"{k} {v}" for k, v in sorted(cfg.items())
                      if k not in ("architecture", "kind", "name") and v is not None)
    g = out.get("goodput_rps")
    head = f"{cfg.get('architecture', out.get('architecture', '?'))} {knobs}".strip()
    return f"{head} @ {g:.2f} req/s" if isinstance(g, (int, float)) else head


def cases(quick: bool, only: set[str], work: Path, gpus: list[int] | None = None,
          trials: int | None = None) -> list[tuple[str, list[str], float]]:
    """(name, hastune arguments, timeout) of every case; recipes and configs it needs are
    written under `work` (absolute paths: the same files for both trees)."""
    out: list[tuple[str, list[str], float]] = []
    audio = yaml.safe_load((ROOT / AUDIO).read_text())  # a shipped model: no relative paths
    if "readme" in only:
        out.append(("readme tune", ["tune", str(ROOT / AUDIO), "--trials",
                                    "8" if quick else "40", "--no-plots", "--out",
                                    str(work / "readme-{tree}")], 3600))
    if "evaluate" in only:
        for arch, spec in EVALUATE.items():
            if isinstance(spec, str):
                cfg = ROOT / "examples" / "configs" / spec
            else:
                cfg = work / f"{arch}.yaml"
                cfg.write_text(yaml.safe_dump(spec))
            out.append((f"evaluate {arch}", ["evaluate", str(ROOT / AUDIO), "--config",
                                             str(cfg)], 1800))
    if "scaling" in only:
        for g in gpus or ((8, 16) if quick else (8, 16, 32, 64)):
            rec = {**audio, "name": f"scaling-{g}", "architecture": ARCHS,
                   "cluster": {**audio["cluster"], "gpus": g}}
            path = work / f"scaling-{g}.yaml"
            path.write_text(yaml.safe_dump(rec, sort_keys=False))
            n = trials or (10 if quick else 100)
            out.append((f"scaling {g} GPUs", ["tune", str(path), "--trials", str(n), "--no-plots",
                                              "--out", str(work / f"scaling-{g}-{{tree}}")],
                        7200))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", required=True, help="the git ref to compare against")
    ap.add_argument("--quick", action="store_true", help="fewer trials and GPU counts")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each case per tree")
    ap.add_argument("--only", default="readme,evaluate,scaling",
                    help="comma-separated cases: readme, evaluate, scaling")
    ap.add_argument("--json", dest="json_out", default=None, help="write every run here")
    ap.add_argument("--gpus", default=None, help="scaling: comma-separated GPU counts "
                    "(default 8,16,32,64; --quick 8,16)")
    ap.add_argument("--trials", type=int, default=None, help="scaling: trials per study "
                    "(default 100; --quick 10)")
    a = ap.parse_args()
    only = set(a.only.split(","))
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tune-speed-") as tmp:
        tmp_p = Path(tmp)
        old = tmp_p / "ref"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old),
                        a.ref], check=True)
        try:
            trees = {"ref": old, "today": ROOT}
            print(f"{'case':<22}{'ref s':>9}{'today s':>9}{'ratio':>7}  answers (ref | today)")
            gpus = [int(g) for g in a.gpus.split(",")] if a.gpus else None
            for name, args, timeout in cases(a.quick, only, tmp_p, gpus, a.trials):
                walls: dict[str, list[float]] = {"ref": [], "today": []}
                answers: dict[str, str] = {}
                for k in range(a.repeat):
                    for label in (("ref", "today") if k % 2 == 0 else ("today", "ref")):
                        arg = [x.replace("{tree}", f"{label}-{k}") for x in args]
                        wall, out = hastune(trees[label], arg, timeout)
                        walls[label].append(wall)
                        answers[label] = _answer(out)
                        runs.append({"case": name, "tree": label, "run": k, "wall_s": wall,
                                     "answer": answers[label],
                                     "evaluations": out.get("evaluations")})
                r, t = statistics.median(walls["ref"]), statistics.median(walls["today"])
                print(f"{name:<22}{r:>9.1f}{t:>9.1f}{r / t:>7.2f}  {answers['ref']} | "
                      f"{answers['today']}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps({"ref": a.ref, "quick": a.quick,
                                                "repeat": a.repeat, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
