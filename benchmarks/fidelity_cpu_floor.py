"""Is an engine's per-iteration CPU time added to its GPU step, or hidden behind it?

    OMP_NUM_THREADS=1 python benchmarks/fidelity_cpu_floor.py [--engine sglang] [--lomo]

The shipped engine terms add the CPU time of an iteration to its kernels' time
(hastune.engine_terms: step = kernel_scale × kernels + iteration_s + per_seq_s × n). An engine
that prepares iteration i + 1 while the GPU runs iteration i (SGLang's and TensorRT-LLM's
overlap schedulers) takes the longer of the two instead. Each row of silicon_train.csv is
simulated twice through `hastune fidelity --shipped`: with the shipped terms, and with the
kernels alone (g, the engines' scheduler defaults). Per engine, mode and model it prints the
median |error| / bias of TPOT as shipped, of max(K·g, iteration_s) — the CPU time overlapped,
the same terms — and of K·g alone (K the shipped kernel scale of the row's engine and GPU, or
the engine's pooled one).

`--lomo`: whether either form transfers. On every engine's agg rows, TPOT = K·g + c0 + c1·n
(added) and max(K·g, c0 + c1·n) (overlapped), n the row's decoding sequences (its clients ×
the share of a request's life spent decoding, from its measured TTFT and TPOT), fitted per
(engine, GPU) on the other models' rows (a GPU with fewer than 30 of them: the engine's rows),
soft-L1 on log errors (scale 15%), and checked on the held-out model's: the mean over held-out
models of median |error| / bias. Kernels-only TPOT stands for the simulator here: queueing
and prefill interleaving are as the kernels alone make them.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hastune.engine_fitted import FITTED, POOLED  # noqa: E402
from hastune.fidelity import shipped  # noqa: E402
from hastune.fidelity.rows import model_dir  # noqa: E402
from hastune.fidelity.score import architecture_of  # noqa: E402

CSV = ROOT / "hastune" / "data" / "calibration" / "e2e" / "silicon_train.csv"


def _subset(rows: list[dict], tmp: Path) -> Path:
    path = tmp / "rows.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _fig(errs) -> str:
    e = np.asarray(errs, dtype=float)
    return f"{np.median(np.abs(e)) * 100:5.1f} / {np.median(e) * 100:+6.1f}" if e.size else "-"


def _pairs(path: Path) -> list[tuple[dict, dict]]:
    """(row with the shipped terms, the same row with the kernels alone), scored both ways."""
    on, off = shipped.score(path)["rows"], shipped.score(path, terms=False)["rows"]
    return [(a, b) for a, b in zip(on, off) if a["status"] == b["status"] == "scored"]


def floor(engine: str, tmp: Path, src: list[dict]) -> None:
    rows = [r for r in src if r["backend"] == engine]
    groups: dict[tuple[str, str], dict[str, list]] = collections.defaultdict(
        lambda: {"shipped": [], "overlapped": [], "kernels": []})
    for a, b in _pairs(_subset(rows, tmp)):
        t = FITTED.get((engine, a["gpu"])) or FITTED[(engine, POOLED[engine])]
        m, g = a["tpot_ms"]["measured"], b["tpot_ms"]["simulated"]
        k = t["kernel_scale"] * g
        for key in ((a["mode"], "all"), (a["mode"], a["model"].split("/")[-1])):
            groups[key]["shipped"].append(a["tpot_ms"]["simulated"] / m - 1)
            groups[key]["overlapped"].append(max(k, t["iteration_s"] * 1e3) / m - 1)
            groups[key]["kernels"].append(k / m - 1)
    print(f"\n{engine}: TPOT median |error| / bias, %  (shipped: added; overlapped: "
          "max(K·g, iteration_s); kernels: K·g)")
    print(f"{'mode':7} {'model':28} {'rows':>5}  {'shipped':>14}  {'overlapped':>14}  "
          f"{'kernels':>14}")
    for (mode, model), v in sorted(groups.items()):
        print(f"{mode:7} {model[:28]:28} {len(v['shipped']):5d}  {_fig(v['shipped']):>14}  "
              f"{_fig(v['overlapped']):>14}  {_fig(v['kernels']):>14}")


def _predict(p, g, n, form: str):
    K, c0, c1 = np.abs(p)
    cpu = c0 + c1 * n
    return K * g + cpu if form == "added" else np.maximum(K * g, cpu)


def _fit(g, n, m, form: str):
    best = None
    for x0 in ([1.0, 1.0, 0.01], [0.8, 5.0, 0.05], [1.2, 10.0, 0.0]):
        s = least_squares(lambda p: np.log(_predict(p, g, n, form) / m), x0, loss="soft_l1",
                          f_scale=0.15)
        if best is None or s.cost < best.cost:
            best = s
    return best.x


def lomo(tmp: Path, src: list[dict]) -> None:
    rows = [r for r in src if r["mode"] == "agg"]
    data: dict[str, list[tuple]] = collections.defaultdict(list)
    arch: dict[str, str] = {}
    for r in shipped.score(_subset(rows, tmp), terms=False)["rows"]:
        m, g = r["tpot_ms"]["measured"], r["tpot_ms"]["simulated"]
        if r["status"] != "scored" or not (m > 0 and g > 0):
            continue
        line = rows[r["line"] - 2]
        osl, bs = int(line["osl"]), int(line["batch_size"])
        if osl < 2:
            continue
        n = bs * (osl - 1) * m / (r["ttft_ms"]["measured"] + (osl - 1) * m)
        if r["model"] not in arch:
            arch[r["model"]] = architecture_of(model_dir(r["model"], {}, CSV))
        data[r["engine"]].append((arch[r["model"]], r["gpu"], g, n, m))
    print("\nleave-one-model-out, agg TPOT: mean over held-out models of median |error| / "
          "bias, %")
    for engine, items in sorted(data.items()):
        models = sorted({x[0] for x in items})
        for form in ("added", "overlapped"):
            meds, biases = [], []
            for held in models:
                test = [x for x in items if x[0] == held]
                train = [x for x in items if x[0] != held]
                errs = []
                for gpu in sorted({x[1] for x in test}):
                    tr = [x for x in train if x[1] == gpu]
                    tr = tr if len(tr) >= 30 else train
                    p = _fit(*(np.array([x[i] for x in tr]) for i in (2, 3, 4)), form)
                    te = [x for x in test if x[1] == gpu]
                    g, n, m = (np.array([x[i] for x in te]) for i in (2, 3, 4))
                    errs += list(_predict(p, g, n, form) / m - 1)
                meds.append(np.median(np.abs(errs)) * 100)
                biases.append(np.median(errs) * 100)
            print(f"{engine:7} {form:10} {np.mean(meds):5.1f} / {np.mean(biases):+6.1f}  "
                  f"({len(models)} models, {len(items)} rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--engine", default="sglang")
    ap.add_argument("--lomo", action="store_true", help="the leave-one-model-out check too")
    args = ap.parse_args()
    t0 = time.perf_counter()
    src = list(csv.DictReader(args.csv.open(newline="", encoding="utf-8")))
    with tempfile.TemporaryDirectory() as tmp:
        floor(args.engine, Path(tmp), src)
        if args.lomo:
            lomo(Path(tmp), src)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
