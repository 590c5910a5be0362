"""The table of hastune.regimes (a result's measured error by regime), built from a
measurements file: its rows simulated with the shipped terms (`fidelity --shipped`), the rows
of the models the terms were fitted on (silicon_llama31.csv's) left out, so what a caveat
quotes is how the terms do on a model they never saw, the position of a recipe's model.

    python scripts/fidelity_regimes.py --write    # hastune/data/fidelity_regimes.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hastune.regimes import ANY, KEYS, LEVELS, MIN_ROWS, band, gpu_class, key

FITTED_FILE = Path(__file__).resolve().parent.parent / "data" / "calibration" / "e2e" / \
    "silicon_llama31.csv"


def summary(rows: list[dict]) -> dict[str, Any]:
    """rows (scored), and of TTFT and TPOT the median |error| and the median signed error, %
    (hastune.fidelity.shipped.errors)."""
    from hastune.fidelity.shipped import errors

    out: dict[str, Any] = {"rows": len(rows)}
    for k in ("ttft_ms", "tpot_ms"):
        e = errors(rows, k)
        name = k[:4]
        out[f"{name}_median_abs_pct"] = round(float(np.median(np.abs(e))) * 100, 1) \
            if e.size else None
        out[f"{name}_bias_pct"] = round(float(np.median(e)) * 100, 1) if e.size else None
    return out


def fitted_models(path: Path = FITTED_FILE) -> set[str]:
    """The models of the measured runs the shipped terms were fitted on."""
    from hastune.fidelity.rows import read_rows

    return {r.model for r in read_rows(path)}


def build(scored: list[dict], regime_of: dict[str, dict], excluded: set[str]) -> dict:
    """The table: `scored` rows of `fidelity --shipped` (status scored), each row's regime by
    id in `regime_of` ({"gpu_class", "kind", "band"}), the rows of `excluded` models left out.
    Every regime and each coarser one (LEVELS: the band, then the GPU class, then the kind
    made `any`) gets its summary. A model whose base model (another precision's checkpoint of
    it: hastune.fidelity.rows.base_names) is excluded is excluded too."""
    from hastune.fidelity.rows import base_names

    groups: dict[str, list[dict]] = {}
    for r in scored:
        if r["status"] != "scored" or r["id"] not in regime_of or r["model"] in excluded \
                or any(b in excluded for b in base_names(r["model"])):
            continue
        g = regime_of[r["id"]]
        fields = {"engine": r["engine"], "mode": r["mode"], **g}
        for drop in ((), *LEVELS):
            k = key(*(ANY if f in drop else fields[f] for f in KEYS))
            groups.setdefault(k, []).append(r)
    return {"excluded_models": sorted(excluded), "min_rows": MIN_ROWS,
            "regimes": {k: summary(v) for k, v in sorted(groups.items())}}


def regimes_of(path: str | Path, models: dict[str, str] | None = None) -> dict[str, dict]:
    """Each simulable row's regime by id: its GPU class, dense or MoE model (its config as
    `fidelity` resolves it) and band of clients per instance that streams tokens (an agg
    run's one, a disagg run's decode workers)."""
    from hastune.fidelity.rows import model_dir, read_rows
    from hastune.models.hf import load_model

    kinds: dict[str, str | None] = {}
    out = {}
    for r in read_rows(path):
        c = r.case
        if c is None:
            continue
        if c.model not in kinds:
            try:
                kinds[c.model] = "moe" if load_model(model_dir(c.model, models or {},
                                                                Path(path))).llm.moe else "dense"
            except Exception:  # noqa: BLE001 - a model fidelity cannot read is not scored
                kinds[c.model] = None
        if kinds[c.model] is None:
            continue
        streams = c.pools.decode_workers if c.pools is not None else 1
        out[r.id] = {"gpu_class": gpu_class(c.gpu), "kind": kinds[c.model],
                     "band": band(c.clients / streams)}
    return out


def from_file(path: str | Path, models: dict[str, str] | None = None,
              progress=None) -> dict:
    """The table of measurements file `path`, its rows simulated with the shipped terms
    (hastune.fidelity.shipped.score), the fitted models' rows left out."""
    from hastune.fidelity import shipped

    res = shipped.score(path, models, progress=progress)
    table = build(res["rows"], regimes_of(path, models), fitted_models())
    table["file"] = Path(path).name
    return table
