"""How far off the simulator is, by regime: the error of the shipped engine terms on measured
runs of models they were not fitted on, by engine, GPU class, dense or MoE model, aggregated or
disaggregated serving and requests in flight per instance that streams tokens. A result's
caveats quote the figure of the regime it falls in (hastune.caveats).

    entry = lookup("vllm", "b200-180gb", moe=True, mode="agg", per_stream=40.0)

The table ships as hastune/data/fidelity_regimes.json; hastune.fidelity.regimes builds it
(`python scripts/fidelity_regimes.py --write`, from silicon_train.csv).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parent / "data" / "fidelity_regimes.json"
MIN_ROWS = 10   # fewer measured runs than this in a regime: its coarser regime is quoted
BANDS = ((16, "1-16"), (128, "17-128"), (float("inf"), "129+"))
# GPU classes by the leading part of a hastune GPU name (hastune.calibrate.gpus)
CLASSES = (("gb", "blackwell"), ("b", "blackwell"), ("rtx-pro", "blackwell"),
           ("h", "hopper"), ("a", "ampere"), ("l", "ada"), ("rtx", "ada"))
ANY = "any"
# coarsening order: the band first, then the GPU class, then dense / MoE
LEVELS = (("band",), ("band", "gpu_class"), ("band", "gpu_class", "kind"))
KEYS = ("engine", "gpu_class", "kind", "mode", "band")


def gpu_class(gpu: str) -> str:
    for prefix, cls in CLASSES:
        if gpu.startswith(prefix):
            return cls
    return "other"


def band(per_stream: float | None) -> str:
    """The band of `per_stream` requests in flight per instance that streams tokens."""
    if per_stream is None:
        return ANY
    for top, name in BANDS:
        if per_stream <= top:
            return name
    return BANDS[-1][1]


def key(engine: str, cls: str, kind: str, mode: str, bnd: str) -> str:
    return "|".join((engine, cls, kind, mode, bnd))


@lru_cache(maxsize=1)
def _shipped() -> dict:
    return json.loads(TABLE.read_text()) if TABLE.is_file() else {"regimes": {}}


def lookup(engine: str, gpu: str, moe: bool | None, mode: str, per_stream: float | None,
           table: dict | None = None) -> tuple[str, dict] | None:
    """(regime key, its summary) of the finest regime a result falls in that holds at least
    MIN_ROWS measured runs, or None: the band, GPU class and kind are made `any` in turn
    (an unknown kind or band is `any` from the start)."""
    regimes = (table or _shipped())["regimes"]
    fields = {"engine": engine, "gpu_class": gpu_class(gpu), "mode": mode,
              "kind": ANY if moe is None else ("moe" if moe else "dense"),
              "band": band(per_stream)}
    for drop in ((), *LEVELS):
        k = key(*(ANY if f in drop else fields[f] for f in KEYS))
        got = regimes.get(k)
        if got is not None and got["rows"] >= MIN_ROWS:
            return k, got
    return None


def words(k: str, labels: dict[str, str]) -> str:
    """A regime key in words, each engine by its label in `labels` (hastune.caveats.LABEL):
    'vLLM on Blackwell, MoE, aggregated, 17-128 requests in flight per instance'."""
    engine, cls, kind, mode, bnd = k.split("|")
    parts = [labels.get(engine, engine) + ("" if cls == ANY else f" on {cls.capitalize()}")]
    if kind != ANY:
        parts.append("MoE" if kind == "moe" else "dense")
    parts.append("aggregated" if mode == "agg" else "disaggregated")
    if bnd != ANY:
        parts.append(f"{bnd} requests in flight per instance")
    return ", ".join(parts)
