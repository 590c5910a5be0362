"""Results carry their error (issue 36, item 5): hastune.fidelity.regimes groups the shipped
terms' errors on models they were not fitted on by regime, every regime's figures are those
of its rows, a lookup falls back to a coarser regime where a fine one has too few runs, and a
result's caveats quote the figure of the regime it is in."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import regimes as R
from hastune.fidelity import regimes as F

ENGINES = ("vllm", "sglang", "trtllm")


@st.composite
def rows(draw):
    n = draw(st.integers(1, 60))
    out, regime = [], {}
    for i in range(n):
        rid = f"r{i}"
        out.append({
            "id": rid, "engine": draw(st.sampled_from(ENGINES)),
            "model": draw(st.sampled_from(["m/a", "m/b", "fit/llama", "fit/llama-FP8"])),
            "mode": draw(st.sampled_from(["agg", "disagg"])),
            "status": draw(st.sampled_from(["scored", "scored", "unsupported"])),
            "ttft_ms": {"measured": draw(st.floats(1, 1e4)),
                        "simulated": draw(st.floats(0.5, 2e4))},
            "tpot_ms": {"measured": draw(st.floats(1, 100)),
                        "simulated": draw(st.floats(0.5, 200))}})
        regime[rid] = {"gpu_class": draw(st.sampled_from(["hopper", "blackwell"])),
                       "kind": draw(st.sampled_from(["dense", "moe"])),
                       "band": R.band(draw(st.floats(1, 1000)))}
    return out, regime


@settings(max_examples=60, deadline=None)
@given(data=rows())
def test_every_regime_summarises_its_rows(data):
    scored, regime = data
    table = F.build(scored, regime, {"fit/llama"})["regimes"]
    # fit/llama-FP8 is fit/llama's checkpoint in another precision: left out with it
    kept = [r for r in scored if r["status"] == "scored" and r["model"] in ("m/a", "m/b")]
    # the coarsest regime of each (engine, mode) holds every kept row of it
    for e in ENGINES:
        for m in ("agg", "disagg"):
            mine = [r for r in kept if r["engine"] == e and r["mode"] == m]
            k = R.key(e, R.ANY, R.ANY, m, R.ANY)
            assert (k in table) == bool(mine)
            if mine:
                assert table[k]["rows"] == len(mine)
                err = np.array([r["ttft_ms"]["simulated"] / r["ttft_ms"]["measured"] - 1
                                for r in mine])
                assert table[k]["ttft_median_abs_pct"] == pytest.approx(
                    round(float(np.median(np.abs(err))) * 100, 1))
                assert table[k]["ttft_bias_pct"] == pytest.approx(
                    round(float(np.median(err)) * 100, 1))
    # a finest regime's rows are exactly the kept rows that fall in it
    for k, v in table.items():
        e, cls, kind, m, bnd = k.split("|")
        if R.ANY in (cls, kind, bnd):
            continue
        n = sum(1 for r in kept if (r["engine"], r["mode"]) == (e, m)
                and regime[r["id"]] == {"gpu_class": cls, "kind": kind, "band": bnd})
        assert v["rows"] == n


def test_lookup_falls_back_to_a_coarser_regime():
    def entry(n):
        return {"rows": n, "ttft_median_abs_pct": 10.0, "ttft_bias_pct": -5.0,
                "tpot_median_abs_pct": 4.0, "tpot_bias_pct": 1.0}

    table = {"regimes": {
        R.key("vllm", "blackwell", "moe", "agg", "17-128"): entry(R.MIN_ROWS - 1),
        R.key("vllm", "blackwell", "moe", "agg", R.ANY): entry(R.MIN_ROWS),
        R.key("vllm", R.ANY, R.ANY, "agg", R.ANY): entry(500)}}
    k, _ = R.lookup("vllm", "b200-180gb", True, "agg", 40.0, table)
    assert k == R.key("vllm", "blackwell", "moe", "agg", R.ANY)  # the band had too few
    k, _ = R.lookup("vllm", "h100-80gb", False, "agg", None, table)
    assert k == R.key("vllm", R.ANY, R.ANY, "agg", R.ANY)
    assert R.lookup("sglang", "h100-80gb", False, "agg", 4.0, table) is None
    assert R.lookup("vllm", "h100-80gb", False, "disagg", 4.0, table) is None


@pytest.mark.parametrize("gpu, cls", [("h100-80gb", "hopper"), ("gb200-186gb", "blackwell"),
                                      ("b200-180gb", "blackwell"), ("a100-80gb", "ampere"),
                                      ("l40s-48gb", "ada"), ("rtx-pro-6000-96gb", "blackwell")])
def test_gpu_classes(gpu, cls):
    assert R.gpu_class(gpu) == cls


def test_the_shipped_table_and_a_caveat_that_quotes_it():
    table = json.loads(R.TABLE.read_text())
    assert "meta-llama/Llama-3.1-8B-Instruct" in table["excluded_models"]
    assert table["regimes"], "scripts/fidelity_regimes.py --write writes it"
    for v in table["regimes"].values():
        assert v["rows"] >= 1
    from hastune.caveats import LABEL, caveats
    from hastune.config import parse_config

    cfg = parse_config({"architecture": "nodg", "tp": 1, "replicas": 2})
    terms = {"engine": "vllm", "on": True, "gpu": "b200-180gb"}
    got = [c for c in caveats(terms, cfg, 10.0, in_flight=60.0, moe=True)
           if c.startswith("measured error")]
    k, s = R.lookup("vllm", "b200-180gb", True, "agg", 30.0)  # type: ignore[misc]
    assert len(got) == 1 and R.words(k, LABEL) in got[0]
    assert f"over {s['rows']} runs" in got[0]
    assert f"{s['ttft_median_abs_pct']:.0f}%" in got[0]
    off = caveats({**terms, "on": False}, cfg, 10.0, in_flight=60.0, moe=True)
    assert not any(c.startswith("measured error") for c in off)
