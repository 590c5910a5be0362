"""A disaggregated run whose decode workers predict several tokens a step (MTP: issue 36 item
4), simulated end to end (hastune.fidelity.run.simulate through fudg):

- On generated Llama-8B deployments, drafts and lengths, one client's mean TPOT with k drafts
  over its TPOT without is the per-token step over the plain step of the decode pool's
  profile (hastune.speculative, engine terms on), at the mean context: the drafts change the
  decode step and nothing else; its TTFT is the same.
- A case with drafts and no layer count is refused (the step needs them), not run plain.
- Through `--shipped`, an InferenceX row whose config entry's recipe names `_mtp3` scores
  with a TPOT about the step's factor below the same row of an `_mtp0` entry, its reason
  saying what the decode pools ran.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune import speculative as sp
from hastune.evaluators.profile import resolve_profile
from hastune.fidelity import inferencex as ix
from hastune.fidelity import shipped
from hastune.fidelity.rows import read_rows
from hastune.fidelity.run import recipe_for, simulate

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "hastune" / "data" / "calibration" / "e2e" / "silicon_llama31.csv"
BASE = next(r for r in csv.DictReader(FILE.open())
            if r["model_path"] == "meta-llama/Llama-3.1-8B-Instruct" and r["backend"] == "trtllm")
LAYERS = 32  # Llama-3.1-8B's


def _write(path: Path, row: dict) -> Path:
    """A one-row file of measured runs."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(row))
        w.writeheader()
        w.writerow(row)
    return path


def _case(tmp: Path, tp: int, isl: int, osl: int):
    pool = {"num_workers": "1", "tp_size": str(tp), "pp_size": "1", "attention_dp_size": "1",
            "moe_tp_size": str(tp), "moe_ep_size": "1"}
    row = {**BASE, "id": "m", "mode": "disagg", "batch_size": "", "tp_size": "",
           "isl": str(isl), "osl": str(osl), "decode_batch_size": "1",
           **{f"{s}_{k}": v for s in ("prefill", "decode") for k, v in pool.items()}}
    path = _write(tmp / "runs.csv", row)
    (r,) = read_rows(path)
    assert r.case is not None, r.reason
    return r.case, path


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(k=st.integers(1, 3), tp=st.sampled_from([1, 2]), isl=st.integers(64, 2048),
       osl=st.integers(8, 96))
def test_drafts_change_the_decode_step_alone(tmp_path, k, tp, isl, osl):
    case, path = _case(tmp_path, tp, isl, osl)
    rec = recipe_for(case, {}, path, rounds=3, exact=True)
    prof = resolve_profile(rec, quiet=True)[0]
    terms = et.for_profile(rec.engine, prof)
    plain = simulate(case, prof, terms, rec)
    mtp = simulate(replace(case, nextn=k), prof, terms, rec, layers=LAYERS)
    on = et.apply(prof, terms).for_parallel(tp, 1)
    spec = sp.Speculative(k, LAYERS)
    ctx = isl + osl / 2  # one client: a step of one sequence, its context growing linearly
    want = (spec.decode(on.decode, terms.iteration_s, terms.per_seq_s).step(1, ctx)
            / on.decode.step(1, ctx))
    assert mtp.tpot_ms / plain.tpot_ms == pytest.approx(want, rel=0.03)
    assert mtp.ttft_ms == pytest.approx(plain.ttft_ms, rel=1e-6)


def test_drafts_without_layers_are_refused(tmp_path):
    case, path = _case(tmp_path, 1, 256, 16)
    rec = recipe_for(case, {}, path, rounds=2, exact=True)
    prof = resolve_profile(rec, quiet=True)[0]
    with pytest.raises(ValueError, match="layers are needed"):
        simulate(replace(case, nextn=2), prof, et.for_profile(rec.engine, prof), rec)


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _entry(recipe: str) -> dict:
    """An InferenceX config entry of Llama-70B on H200 TensorRT-LLM, 1 + 1 workers at TP 2."""
    return {"config": "llama70b-fp8-h200-dynamo-trt", "model": "m", "precision": "fp8",
            "framework": "dynamo-trt", "isl": 512, "osl": 32, "concurrency": 2,
            "spec_decoding": "none" if recipe.endswith("mtp0.yaml") else "mtp",
            "prefill_workers": 1, "prefill_tp": 2, "prefill_ep": 1, "prefill_dp_attn": False,
            "decode_workers": 1, "decode_tp": 2, "decode_ep": 1, "decode_dp_attn": False,
            "recipe": recipe, "valid_from": T0, "valid_to": None}


def test_an_inferencex_row_runs_the_drafts_its_recipe_names(tmp_path, monkeypatch):
    """Through `--shipped`: the row of an entry whose recipe says `_mtp3` scores with a shorter
    TPOT than the same row of an `_mtp0` entry, by about the step's factor, its reason saying
    what the decode pools ran; the prefill side is the same."""
    row = {**BASE, "id": "ix", "silicon_data_source": "source_file=2026-04-06.csv; "
           "model=Llama-3.1-70B; silicon_concurrency=2; measured=2026-01-01T00:00:00Z",
           "model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm", "precision": "fp8",
           "mode": "disagg", "isl": "512", "osl": "32", "batch_size": "", "tp_size": "",
           "prefill_tp_size": "2", "decode_tp_size": "2", "prefill_num_workers": "",
           "decode_num_workers": "", "decode_batch_size": ""}
    path = _write(tmp_path / "runs.csv", row)
    got = {}
    for recipe in ("ctx1_gen1_tep2_batch2_eplb0_mtp0.yaml",
                   "ctx1_gen1_tep2_batch2_eplb0_mtp3.yaml"):
        monkeypatch.setattr(ix, "load", lambda path=ix.TABLE, e=_entry(recipe): (e,))
        (out,) = shipped.score(path)["rows"]
        assert out["status"] == "scored", out["reason"]
        got[recipe[-9:-5]] = out
    plain, mtp = got["mtp0"], got["mtp3"]
    assert "MTP" not in (plain["reason"] or "")
    assert "MTP, 3 draft tokens a step" in mtp["reason"]
    ratio = mtp["tpot_ms"]["simulated"] / plain["tpot_ms"]["simulated"]
    assert 0.3 < ratio < 0.75  # (L + 3)/L · (kernels of 4 tokens a sequence) over 2.105 tokens
    assert mtp["ttft_ms"]["simulated"] == pytest.approx(plain["ttft_ms"]["simulated"], rel=0.05)
