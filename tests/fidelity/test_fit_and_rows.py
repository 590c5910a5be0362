"""The fidelity fit and the measurements reader (hastune.fidelity)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.fidelity import fit as F
from hastune.fidelity.rows import REQUIRED, read_cases
from hastune.fidelity.score import fold_shapes

HEADER = "id,backend,backend_version,model_path,system,precision,mode,isl,osl," \
         "gemm_quant_mode,batch_size,tp_size,pp_size,silicon_ttft_ms,silicon_tpot_ms"


def _row(i, eng="vllm", isl=1024, osl=128, c=8, tp=1, ttft=100.0, tpot=10.0, mode="agg",
         system="h100_sxm", model="meta-llama/Llama-3.1-8B-Instruct", quant=""):
    return f"r{i},{eng},,{model},{system},,{mode},{isl},{osl},{quant},{c},{tp},1,{ttft},{tpot}"


def _write(tmp_path: Path, rows: list[str]) -> Path:
    p = tmp_path / "m.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


@st.composite
def problems(draw, least: int = 6, prefill: bool = False):
    """Cases whose measured values are exactly a form · θ for a θ inside the bounds; with
    `prefill` the prompts' scale is a term too (else held at 1, its column 0, as
    fit.form makes it)."""
    n = draw(st.integers(least, 30))
    theta = np.array([draw(st.floats(lo, hi)) for lo, hi in
                      ((0.6, 2.0), (0, 5e-3), (0, 1e-4), (0, 0.05), (0, 5e-3))]
                     + [draw(st.floats(0.6, 1.8)) if prefill else 1.0])
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    forms = []
    for _ in range(n):
        c = rng.integers(1, 128)
        pre = (rng.uniform(10, 1000), rng.uniform(0.1, 10)) if prefill else (0.0, 0.0)
        ttft = np.array([rng.uniform(20, 2000), rng.uniform(500, 3000), 1000 * c, 1e3,
                         1e3 * (c - 1), pre[0]])
        tpot = np.array([rng.uniform(3, 80), 1000.0, 1000.0 * c, 0.0, 0.0, pre[1]])
        forms.append(F.Form(ttft, tpot))
    mt = np.array([f.ttft @ theta for f in forms])
    mp = np.array([f.tpot @ theta for f in forms])
    return forms, mt, mp


@given(problems())
@settings(max_examples=30, deadline=None)
def test_fit_reproduces_measurements_made_by_its_own_model(p):
    forms, mt, mp = p
    th = F.fit(forms, mt, mp)
    assert np.all(th >= F.LOWER - 1e-12) and np.all(th <= F.UPPER + 1e-12)
    pred = np.array([f.predict(th) for f in forms])
    np.testing.assert_allclose(pred[:, 0], mt, rtol=2e-3)
    np.testing.assert_allclose(pred[:, 1], mp, rtol=2e-3)


@given(problems(least=10, prefill=True))
@settings(max_examples=30, deadline=None)
def test_the_prompts_scale_is_fitted_when_asked_and_held_at_one_otherwise(p):
    """With `prefill` the sixth term is fitted and the measurements reproduced; without, it
    stays at the prior's 1 whatever the cases say."""
    forms, mt, mp = p
    th = F.fit(forms, mt, mp, prefill=True)
    pred = np.array([f.predict(th) for f in forms])
    np.testing.assert_allclose(pred[:, 0], mt, rtol=2e-3)
    np.testing.assert_allclose(pred[:, 1], mp, rtol=2e-3)
    assert len(F.fit(forms, mt, mp)) == len(F.NAMES) and F.fit(forms, mt, mp)[5] == 1.0


@given(problems(least=15), st.floats(20, 200))
@settings(max_examples=20, deadline=None)
def test_one_wild_case_does_not_pull_the_rest(p, factor):
    """A case measured `factor` × off (an engine out of KV cache) moves the others' fitted
    predictions by little (with 15 cases or more for 5 terms): the loss is soft-L1 in the
    log error.

    Not where the wild case is also far shorter than the rest: its log error is then cheap to
    cut with a constant term the others absorb (found by hypothesis: a 53 ms case among 1-2 s
    ones, 20x off, pulls the front end (frontend_s) from 0 to 0.13 s and the others' median
    TTFT error to 8%; soft-L1's influence is bounded, not redescending). That limit is the
    terms' refit's to lift (issue 36); the property holds for a wild case within 5x of the
    median."""
    forms, mt, mp = p
    assume(mt[0] >= np.median(mt) / 5)
    mt2 = mt.copy()
    mt2[0] *= factor
    th = F.fit(forms, mt2, mp)
    pred = np.array([f.predict(th) for f in forms[1:]])
    err = np.median(np.abs(pred[:, 0] / mt[1:] - 1))
    assert err < 0.05


def test_folds_leave_whole_shapes_out(tmp_path):
    rows = [_row(i, isl=isl, osl=osl, c=c) for i, (isl, osl, c) in enumerate(
        (a, b, c) for a in (1024, 2048, 4096) for b in (128, 512) for c in (4, 16))]
    cases = read_cases(_write(tmp_path, rows))
    folds = fold_shapes(cases)
    shapes = [s for f in folds for s in f]
    assert sorted(shapes) == sorted({c.shape for c in cases})  # each shape in one fold
    assert len(shapes) == len(set(shapes))


@pytest.mark.parametrize("bad, field", [
    (_row(1, isl="abc"), "line 2: isl"),
    (_row(1, c=0), "line 2: batch_size"),
    (_row(1, eng="tgi"), "line 2: backend"),
    (_row(1, system="mi300x"), "line 2: system"),
    (_row(1, quant="int4"), "line 2: gemm_quant_mode"),
])
def test_a_bad_row_names_its_line_and_column(tmp_path, bad, field):
    with pytest.raises(InputError) as e:
        read_cases(_write(tmp_path, [bad]))
    assert e.value.field == field


def test_missing_columns_and_files_are_named(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("id,backend\nr1,vllm\n")
    with pytest.raises(InputError) as e:
        read_cases(p)
    assert "isl" in str(e.value.field)
    with pytest.raises(InputError):
        read_cases(tmp_path / "nope.csv")
    assert set(REQUIRED) <= set(HEADER.split(","))


def test_disaggregated_rows_are_skipped(tmp_path):
    cases = read_cases(_write(tmp_path, [_row(1), _row(2, mode="disagg")]))
    assert [c.id for c in cases] == ["r1"]


def test_fidelity_command_scores_a_small_file(tmp_path):
    """End to end: the command builds the profile, simulates and fits every row and prints
    one JSON object with the aggregate, the terms and per-row errors."""
    rows = [_row(i, isl=isl, osl=osl, c=c, ttft=40.0 + 3 * c + isl / 40, tpot=7.0 + 0.1 * c)
            for i, (isl, osl, c) in enumerate(
                (a, b, c) for a in (1024, 2048) for b in (64, 128) for c in (2, 8))]
    p = _write(tmp_path, rows)
    out = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(p), "--json",
                          "--rows"], capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 4), out.stderr
    doc = json.loads(out.stdout)
    assert doc["rows"] == len(rows) == len(doc["per_row"])
    assert set(doc["terms"]) == {"vllm@h100-80gb"}
    b = doc["aggregate"]["engine"]["vllm"]
    assert b["rows"] == len(rows) and b["cv"]["ttft"]["n"] == len(rows)
    shapes = doc["aggregate"]["shape"]  # by the folds' unit: each shape's rows, once
    assert set(shapes) == {f"vllm@h100-80gb {a}x{b}" for a in (1024, 2048) for b in (64, 128)}
    assert all(v["rows"] == 2 for v in shapes.values())
    for r in doc["per_row"]:
        assert r["cv_ttft_ms"] > 0 and r["fit_tpot_ms"] > 0
    assert doc["terms"]["vllm@h100-80gb"]["prefill_scale"] == 1.0  # held unless asked for
    fitted = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(p), "--json",
                             "--prefill-scale"], capture_output=True, text=True, timeout=600)
    assert fitted.returncode in (0, 4), fitted.stderr
    pk = json.loads(fitted.stdout)["terms"]["vllm@h100-80gb"]["prefill_scale"]
    assert pk != 1.0 and F.LOWER[5] <= pk <= F.UPPER[5]
    bad = subprocess.run([sys.executable, "-m", "hastune", "fidelity",
                          str(tmp_path / "none.csv")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
