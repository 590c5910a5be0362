"""Leave-one-model-out (and -GPU-out) cross-validation of the engine terms
(hastune.fidelity.cv, `hastune fidelity CSV --cv model|gpu`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.fidelity import cv

HEADER = "id,backend,backend_version,model_path,system,precision,mode,isl,osl," \
         "gemm_quant_mode,batch_size,tp_size,pp_size,silicon_ttft_ms,silicon_tpot_ms"
SMALL, LARGE = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B"
SHAPES = ((128, 16, 2), (256, 32, 4), (512, 16, 2))


def _rows(model: str, tp: int, times: float = 1.0, eng: str = "vllm") -> list[str]:
    """Short runs of `model` (quick to simulate); measured values scaled by `times`."""
    big = 4.0 if model == LARGE else 1.0
    return [f"{model.split('/')[-1]}-{i},{eng},,{model},h100_sxm,,agg,{isl},{osl},,{c},{tp},1,"
            f"{(30.0 + isl / 20) * big * times},{(6.0 + 0.2 * c) * big * times}"
            for i, (isl, osl, c) in enumerate(SHAPES)]


def _write(tmp_path: Path, name: str, rows: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    return p


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same file twice, but for the large model's measurements: absurd (× 50) in the
    second. Cross-validated by model, each."""
    d = tmp_path_factory.mktemp("cv")
    sane = _write(d, "sane.csv", _rows(SMALL, 1) + _rows(LARGE, 4))
    wild = _write(d, "wild.csv", _rows(SMALL, 1) + _rows(LARGE, 4, times=50.0))
    return cv.run(sane, "model"), cv.run(wild, "model")


def test_a_held_out_models_rows_never_reach_its_fit(runs):
    sane, wild = runs
    # the fold that holds the large model out fits the same terms whatever its rows say
    assert sane["folds"][LARGE] == wild["folds"][LARGE]
    # ... and its rows are scored with them: same simulations, errors 50 × apart
    for a, b in zip(sane["per_row"], wild["per_row"]):
        if a["model"] == LARGE:
            assert a["cv_ttft_ms"] == b["cv_ttft_ms"] and b["ttft_ms"] == 50 * a["ttft_ms"]
    # where the absurd rows are in the training set, they move the fit (the check can fail)
    assert sane["folds"][SMALL] != wild["folds"][SMALL]
    assert sane["terms"] != wild["terms"]


def test_the_engines_figures_are_the_mean_over_held_out_models(runs):
    for res in runs:
        b = res["engines"]["vllm"]
        per = b["models"]
        assert set(per) == {SMALL, LARGE} and b["cv"]["held_out"] == 2
        for kind in ("cv", "fit"):
            for f in cv.FIGURES:
                assert b[kind][f] == pytest.approx(np.mean([v[kind][f] for v in per.values()]))
        assert b["cv"]["rows"] == sum(v["rows"] for v in per.values()) == res["rows"]
        # each model's figures are over its own rows
        for m, v in per.items():
            errs = [r["cv_ttft_ms"] / r["ttft_ms"] - 1 for r in res["per_row"] if r["model"] == m]
            assert v["cv"]["ttft_median_abs_pct"] == pytest.approx(
                100 * np.median(np.abs(errs)))
    # the wild file's large model is missed by far more held out than in its own fit's error
    wild = runs[1]["engines"]["vllm"]["models"][LARGE]
    assert wild["cv"]["ttft_median_abs_pct"] > 90


def test_one_model_cannot_be_held_out(tmp_path):
    one = _write(tmp_path, "one.csv", _rows(SMALL, 1))
    with pytest.raises(InputError) as e:
        cv.run(one, "model")
    assert "cannot hold one out" in e.value.problem and e.value.field == "--cv"
    out = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(one), "--cv",
                          "model"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and "cannot hold one out" in out.stderr
    assert "Traceback" not in out.stderr
    bad = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(one), "--cv",
                          "engine"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "--cv" in bad.stderr


def test_an_engine_with_one_model_says_it_has_no_held_out_figure(tmp_path):
    p = _write(tmp_path, "two.csv", _rows(SMALL, 1) + _rows(LARGE, 4)
               + _rows(SMALL, 1, eng="trtllm"))
    res = cv.run(p, "model")
    t = res["engines"]["trtllm"]
    assert t["cv"] is None and "cannot hold one out" in t["note"]
    assert all(r["cv_ttft_ms"] is None for r in res["per_row"] if r["engine"] == "trtllm")
    assert res["engines"]["vllm"]["cv"]["held_out"] == 2


def test_a_split_fit_finds_each_classes_kernel_scale_and_one_class_is_the_plain_fit():
    """fit.fit_split: measurements made by forms with a kernel scale per class (a GPU) and
    the other terms shared give those scales back; with one class it is fit.fit."""
    from hastune.fidelity import fit as F

    rng = np.random.default_rng(3)
    ks, shared = [0.7, 1.3], np.array([2e-3, 2e-5, 0.02, 1e-3, 1.0])
    forms, where = [], []
    for i in range(40):
        c = int(rng.integers(1, 64))
        ttft = np.array([rng.uniform(20, 2000), rng.uniform(500, 3000), 1000 * c, 1e3,
                         1e3 * (c - 1), 0.0])
        tpot = np.array([rng.uniform(3, 80), 1000.0, 1000.0 * c, 0.0, 0.0, 0.0])
        forms.append(F.Form(ttft, tpot))
        where.append(i % 2)
    theta = [np.r_[ks[w], shared] for w in where]
    mt = np.array([f.ttft @ t for f, t in zip(forms, theta)])
    mp = np.array([f.tpot @ t for f, t in zip(forms, theta)])
    got = F.fit_shared(forms, mt, mp, where)
    assert [g[0] for g in got] == pytest.approx(ks, rel=0.02)
    assert got[0][1:] == pytest.approx(got[1][1:])  # the rest shared
    one = F.fit_split(forms, mt, mp, {})
    assert all((t == F.fit(forms, mt, mp)).all() for t in one)


ARCH = {"m1": "a", "m2": "a", "m3": "b"}


def _stub_fitter(share: str):
    """A Fitter without profiles: `fitted(rows)` answers which rows it was given."""
    from hastune.fidelity.score import Fitter

    f = Fitter.__new__(Fitter)
    f.share = share
    f._arch = ARCH  # m1 and m2: two checkpoints of one architecture
    f.fitted = lambda rows: tuple(sorted(c.line for c in rows))  # type: ignore[method-assign]
    return f


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["vllm", "sglang", "trtllm"]),
                          st.sampled_from(["h100-80gb", "h200-141gb", "b200-180gb"]),
                          st.sampled_from(["m1", "m2", "m3"])), min_size=1, max_size=40))
def test_the_models_share_fits_a_gpu_alone_only_on_two_models(draw):
    """`--share models`: an (engine, GPU) whose rows come from at least two models gets terms
    fitted on its own rows; one whose rows are one model's gets its engine's, fitted on all
    the engine's rows (that model on its other GPUs, and the other models). Two checkpoints
    of one architecture (m1, m2) are one model."""
    from hastune.fidelity.rows import Case
    from hastune.fidelity.score import MIN_MODELS

    cases = [Case(f"r{i}", e, "", m, g, "bf16", 1024, 128, 8, 1, 100.0, 10.0, i)
             for i, (e, g, m) in enumerate(draw)]
    table = _stub_fitter("models").table(cases)
    for (e, g), got in table.terms.items():
        mine = [c for c in cases if c.group == (e, g)]
        engine = [c for c in cases if c.engine == e]
        alone = len({ARCH[c.model] for c in mine}) >= MIN_MODELS
        assert got == tuple(sorted(c.line for c in (mine if alone else engine)))
    assert set(table.terms) == {c.group for c in cases}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["vllm", "sglang"]),
                          st.sampled_from(["h100-80gb", "h200-141gb", "b200-180gb"]),
                          st.integers(1, 45)), min_size=1, max_size=6,
                unique_by=lambda t: (t[0], t[1])))
def test_the_gpu_share_gives_a_gpu_of_few_rows_the_pooled_terms(groups):
    """`--share gpu`: an (engine, GPU) with at least MIN_GROUP_ROWS rows gets terms fitted on
    its own rows; one with fewer gets none of its own, and its rows take the engine's pooled
    ones (its GPU with the most rows, which always has its own, however few)."""
    from hastune.fidelity.rows import Case
    from hastune.fidelity.score import MIN_GROUP_ROWS

    cases, i = [], 0
    for e, g, n in groups:
        for _ in range(n):
            cases.append(Case(f"r{i}", e, "", "m1", g, "bf16", 1024, 128, 8, 1, 100.0, 10.0, i))
            i += 1
    table = _stub_fitter("gpu").table(cases)
    for e, g, n in groups:
        mine = tuple(sorted(c.line for c in cases if c.group == (e, g)))
        pooled = table.pooled[e]
        most = max(m for e2, _, m in groups if e2 == e)
        assert n <= most and dict(((e2, g2), m) for e2, g2, m in groups)[(e, pooled)] == most
        if n >= MIN_GROUP_ROWS or g == pooled:
            assert table.terms[(e, g)] == mine
        else:
            assert (e, g) not in table.terms
        case = next(c for c in cases if c.group == (e, g))
        assert table.theta(case) == table.terms[(e, g) if (e, g) in table.terms else (e, pooled)]


def test_checkpoints_of_one_architecture_are_held_out_together(tmp_path):
    """Llama-3.1-8B in bf16 and NVIDIA's fp8 checkpoint of it are one model to hold out: the
    fold that holds it out fits on the 70B's rows only, so absurd (× 50) fp8 rows do not
    reach it; held out alone, the bf16 checkpoint's fold would have fitted on them."""
    fp8 = "nvidia/Llama-3.1-8B-Instruct-FP8"
    sane = _write(tmp_path, "sane.csv", _rows(SMALL, 1) + _rows(fp8, 1) + _rows(LARGE, 4))
    wild = _write(tmp_path, "wild.csv", _rows(SMALL, 1) + _rows(fp8, 1, times=50.0)
                  + _rows(LARGE, 4))
    a, b = cv.run(sane, "model"), cv.run(wild, "model")
    eight = " + ".join(sorted([SMALL, fp8]))
    for res in (a, b):
        assert set(res["engines"]["vllm"]["models"]) == {eight, LARGE}
        assert res["engines"]["vllm"]["models"][eight]["rows"] == 2 * len(SHAPES)
    assert a["folds"][eight] == b["folds"][eight]  # the 8B's fold never saw the fp8 rows
    assert a["folds"][LARGE] != b["folds"][LARGE]  # where they are trained on, they count
