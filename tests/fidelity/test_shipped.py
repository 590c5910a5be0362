"""`hastune fidelity CSV --shipped`: the shipped engine terms, no refit, on every row.

- On generated files — measured rows of the shipped file mixed with rows hastune cannot
  simulate (disaggregated runs without worker counts, a system or precision it has no profile
  for, pipeline parallel, a model with no config, a bad number, a prompt no KV room holds) —
  every row comes back once, in
  order, `scored` with both latencies or `unsupported` with the reason that applies; the
  coverage and the per-engine counts are those rows'.
- A scored row is simulated with the terms hastune.engine_fitted ships for its (engine, GPU),
  under the benchmark-client rules `fidelity` fits them under (hastune.fidelity.fit.shipped):
  the same numbers.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.fidelity import shipped
from hastune.fidelity.rows import read_cases

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "hastune" / "data" / "calibration" / "e2e" / "silicon_llama31.csv"
ROWS = list(csv.DictReader(FILE.open()))
HEADER = list(ROWS[0])

# how to spoil a measured row, and what the reason must then say
SPOIL = {
    "disagg": ({"mode": "disagg"}, "disagg: no worker counts"),  # an agg row: no pools
    "system": ({"system": "mi300x"}, "unknown system"),
    "quant": ({"gemm_quant_mode": "w4a8_awq"}, "gemm_quant_mode"),
    # int4 weight-only on a dense model: the int4 modelled is a MoE checkpoint's experts'
    "int4": ({"gemm_quant_mode": "int4_wo"}, "quantize a MoE model's routed experts"),
    # NVFP4 on the file's Hopper GPUs: no FP4 tensor cores, no kernel rows
    "nvfp4": ({"gemm_quant_mode": "nvfp4"}, "NVFP4 needs FP4 tensor cores (Blackwell"),
    "pp": ({"pp_size": "2"}, "pipeline parallel"),
    # attention-DP beside MoE TP (ranks with whole experts over them are modelled)
    "adp": ({"attention_dp_size": "8", "moe_tp_size": "8", "moe_ep_size": "1"},
            "agg: attention-DP not modelled"),
    "moemix": ({"moe_tp_size": "2", "moe_ep_size": "4"}, "agg: MoE TP × EP not modelled"),
    "model": ({"model_path": "nobody/No-Such-Model-7B"}, "no model config"),
    "number": ({"isl": "many"}, "not a number"),
    # a prompt no instance's KV holds: simulated, every request is rejected (no latency to
    # score), which is said rather than scored
    "kv": ({"isl": "9000000"}, "simulated: requests rejected, the KV room left beside"),
    # measured far faster than the kernels can prefill its prompts (hastune.fidelity.run.
    # overdrawn): said rather than scored
    "overdrawn": ({"silicon_ttft_ms": "0.01", "silicon_tpot_ms": "0.0001"},
                  "cannot have prefilled every prompt in full"),
}


def _write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, HEADER)
        w.writeheader()
        w.writerows(rows)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(picks=st.lists(st.tuples(st.integers(0, len(ROWS) - 1),
                                st.sampled_from([None, *SPOIL])), min_size=1, max_size=8))
def test_every_row_comes_back_scored_or_with_why(tmp_path, picks):
    rows, want = [], []
    for i, (k, spoil) in enumerate(picks):
        row = {**ROWS[k], "id": f"r{i}"}
        if spoil is not None:
            row.update(SPOIL[spoil][0])
        rows.append(row)
        want.append(spoil)
    path = tmp_path / "runs.csv"
    _write(path, rows)
    res = shipped.score(path)
    got = res["rows"]
    assert [r["id"] for r in got] == [r["id"] for r in rows]  # every row, once, in order
    for r, spoil in zip(got, want):
        assert r["mode"] == ("disagg" if spoil == "disagg" else "agg")
        if spoil is None:
            assert r["status"] == "scored", r
            for k in ("ttft_ms", "tpot_ms"):
                assert r[k]["measured"] > 0 and math.isfinite(r[k]["simulated"])
                assert r[k]["simulated"] > 0
        else:
            assert r["status"] == "unsupported", r
            assert SPOIL[spoil][1] in r["reason"], (spoil, r["reason"])
            assert r["ttft_ms"]["simulated"] is None
    n_scored = sum(w is None for w in want)
    assert res["coverage"] == pytest.approx(n_scored / len(rows))
    assert sum(e["rows"] for e in res["engines"].values()) == len(rows)
    assert sum(e["scored"] for e in res["engines"].values()) == n_scored


def test_scored_rows_are_simulated_with_the_shipped_terms():
    from hastune import engine_terms as et
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity import fit as F
    from hastune.fidelity.run import recipe_for, simulate

    res = shipped.score(FILE)
    assert res["coverage"] == 1.0  # the file the terms were fitted on: every row scored
    by_id = {r["id"]: r for r in res["rows"]}
    seen = set()
    for c in read_cases(FILE):
        if c.group in seen:
            continue  # one row per (engine, GPU)
        seen.add(c.group)
        rec = recipe_for(c, {}, FILE)
        prof = resolve_profile(rec, quiet=True)[0]
        sched = et.scheduler_defaults(c.engine, prof.memory.gpu_bytes / 2**30, c.gpu)
        want = simulate(c, prof, F.shipped(c.engine, c.gpu, sched, c), rec)
        got = by_id[c.id]
        assert got["ttft_ms"]["simulated"] == pytest.approx(want.ttft_ms, rel=1e-9)
        assert got["tpot_ms"]["simulated"] == pytest.approx(want.tpot_ms, rel=1e-9)
    assert len(seen) >= 3


def test_the_cli_lists_every_row_as_json(tmp_path):
    import subprocess
    import sys

    rows = [{**ROWS[0], "id": "ok"}, {**ROWS[1], "id": "split", "mode": "disagg"}]
    path = tmp_path / "runs.csv"
    _write(path, rows)
    r = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(path), "--shipped",
                        "--json", "--rows"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["status"] for x in out["rows"]] == ["scored", "unsupported"]
    for x in out["rows"]:
        assert set(x) >= {"id", "engine", "model", "gpu", "mode", "status", "reason",
                          "ttft_ms", "tpot_ms"}
    r = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(path), "--shipped",
                        "--write"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--shipped" in r.stderr


def test_a_model_is_found_in_aiconfigurators_packaged_configs():
    from hastune.fidelity.rows import aic_model_config, model_dir

    p = aic_model_config("Qwen/Qwen3-32B")
    assert p is not None and p.name == "Qwen--Qwen3-32B_config.json"  # [kernels] extra
    assert model_dir("Qwen/Qwen3-32B", {}, FILE) == str(p)
    assert aic_model_config("../etc/passwd") is None and aic_model_config("x") is None


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(picks=st.lists(st.integers(0, len(ROWS) - 1), min_size=1, max_size=3, unique=True))
def test_terms_off_simulates_the_kernels_alone(tmp_path, picks):
    """`score(terms=False)` (benchmarks/fidelity_cpu_floor.py): each row as `simulate` runs it
    with no terms, said in its reason; the same rows with the terms differ."""
    from hastune.evaluators.profile import resolve_profile
    from hastune.fidelity.run import recipe_for, simulate

    path = tmp_path / "runs.csv"
    _write(path, [ROWS[i] for i in picks])
    off, on = shipped.score(path, terms=False), shipped.score(path)
    assert off["terms"] == "none" and on["terms"] == "shipped"
    cases = read_cases(path)
    for c, a, b in zip(cases, off["rows"], on["rows"]):
        assert a["status"] == "scored" and "kernels alone" in a["reason"]
        rec = recipe_for(c, {}, path)
        want = simulate(c, resolve_profile(rec, quiet=True)[0], None, rec)
        assert a["tpot_ms"]["simulated"] == pytest.approx(want.tpot_ms, rel=1e-9)
        assert a["ttft_ms"]["simulated"] == pytest.approx(want.ttft_ms, rel=1e-9)
        assert a["tpot_ms"]["simulated"] != pytest.approx(b["tpot_ms"]["simulated"], rel=1e-6)
