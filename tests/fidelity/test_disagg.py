"""`hastune fidelity CSV --shipped` on disaggregated rows (issue 36 item 2): a row with its
prefill and decode workers becomes a `fudg` deployment.

- On generated disaggregated rows (random worker counts, TP, EP, attention-DP, lengths and
  clients per decode worker) the case read has the row's pools, the fudg config its pool sizes
  and TPs, and the recipe's cluster the sum of workers × TP GPUs; a deployment fudg does not
  model (no worker counts, attention-DP, MoE TP × EP mixed, pipeline stages) is `unsupported`
  with a reason naming it — every row comes back once.
- Scored on a file that mixes them with aggregated rows, the summary reports each mode on its
  own: the counts and errors of `modes[m]` are those of mode m's rows alone.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.fidelity import shipped
from hastune.fidelity.rows import read_rows
from hastune.fidelity.run import LINKS, cluster_for, fudg_config, recipe_for

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "hastune" / "data" / "calibration" / "e2e" / "silicon_llama31.csv"
ROWS = list(csv.DictReader(FILE.open()))
HEADER = list(ROWS[0])
# Llama-3.1-8B rows: profiles with TP 1, 2, 4, 8 (the dense model's MoE columns are its TP's)
SMALL = [r for r in ROWS if r["model_path"] == "meta-llama/Llama-3.1-8B-Instruct"]


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, HEADER)
        w.writeheader()
        w.writerows(rows)
    return path


@st.composite
def sides(draw, side: str, adp_max: int = 8, mixed: bool = True, whole: bool = True) -> dict:
    """One pool's columns: workers, TP, attention-DP, and its MoE split: over the TP group
    ("split": MoE TP = TP), whole experts (EP = TP), or mixed (MoE TP × EP, both > 1)."""
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    adp = draw(st.sampled_from([1, 1, 1, 2, 8][: 5 if adp_max > 1 else 3]))
    kinds = ["split"] + (["whole"] if tp > 1 and whole else []) + (["mixed"] if tp >= 4 and mixed
                                                            else [])
    if adp > 1 and draw(st.booleans()):  # ranks at TP 1, experts whole over them (modelled)
        tp, kinds = 1, ["ranks"]
    kind = draw(st.sampled_from(kinds))
    mtp, mep = {"split": (tp, 1), "whole": (1, tp), "mixed": (2, tp // 2),
                "ranks": (1, adp)}[kind]
    return {f"{side}_num_workers": str(draw(st.integers(1, 6))),
            f"{side}_tp_size": str(tp), f"{side}_pp_size": "1",
            f"{side}_attention_dp_size": str(adp), f"{side}_moe_tp_size": str(mtp),
            f"{side}_moe_ep_size": str(mep)}


def _disagg(base: dict, pre: dict, dec: dict, isl: int, osl: int, per_worker: int,
            i: int, workers: bool = True) -> dict:
    row = {**base, **pre, **dec, "id": f"d{i}", "mode": "disagg", "batch_size": "",
           "tp_size": "", "isl": str(isl), "osl": str(osl),
           "decode_batch_size": str(per_worker)}
    if not workers:
        row["prefill_num_workers"] = row["decode_num_workers"] = ""
    return row


def _want(row: dict) -> str | None:
    """What a generated row's reason must name (None: fudg models it)."""
    if not row["prefill_num_workers"]:
        return "disagg: no worker counts"
    ranks = {}
    for s in ("prefill", "decode"):
        tp, adp, mtp, mep = (int(row[f"{s}_{k}"]) for k in (
            "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"))
        if adp != 1 and not (tp == 1 and mtp == 1 and mep == adp):
            return "disagg: attention-DP not modelled"
        ranks[s] = adp
    for s in ("prefill", "decode"):
        tp, mtp, mep = (int(row[f"{s}_{k}"]) for k in ("tp_size", "moe_tp_size",
                                                       "moe_ep_size"))
        if ranks[s] == 1 and not (mep == 1 and mtp == tp) and not (mtp == 1 and mep == tp):
            return "disagg: MoE TP × EP not modelled"
    return None


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.lists(st.tuples(st.integers(0, len(ROWS) - 1), sides("prefill"),
                               sides("decode"), st.integers(1, 16384), st.integers(1, 4096),
                               st.integers(1, 512), st.booleans()), min_size=1, max_size=10))
def test_a_disagg_row_maps_to_its_pools(tmp_path, data):
    rows = [_disagg(ROWS[k], pre, dec, isl, osl, per, i, workers=w or i % 3 != 0)
            for i, (k, pre, dec, isl, osl, per, w) in enumerate(data)]
    got = read_rows(_write(tmp_path / "runs.csv", rows))
    assert [g.id for g in got] == [r["id"] for r in rows]  # every row, once, in order
    for r, g in zip(rows, got):
        assert g.mode == "disagg"
        want = _want(r)
        if want is not None:
            assert g.case is None and g.reason.startswith(want), (want, g.reason)
            assert shipped.cause(g.reason) == want  # counted by what fudg lacks
            continue
        assert g.case is not None, g.reason
        c, p = g.case, g.case.pools
        pw, pt = int(r["prefill_num_workers"]), int(r["prefill_tp_size"])
        dw, dt = int(r["decode_num_workers"]), int(r["decode_tp_size"])
        pr, dr = int(r["prefill_attention_dp_size"]), int(r["decode_attention_dp_size"])
        assert (p.prefill_workers, p.prefill_tp, p.decode_workers, p.decode_tp,
                p.prefill_dp, p.decode_dp) == (pw, pt, dw, dt, pr, dr)
        cfg = fudg_config(c)  # an instance per attention-DP rank
        assert (cfg.prefill_instances, cfg.prefill_tp, cfg.decode_instances,
                cfg.decode_tp) == (pw * pr, pt, dw * dr, dt)
        assert cfg.prefill_pp == cfg.decode_pp == 1
        for s, on, n in (("prefill", cfg.prefill_expert_parallel, pr),
                         ("decode", cfg.decode_expert_parallel, dr)):
            assert on == (n == 1 and int(r[f"{s}_moe_ep_size"]) > 1)
        assert cfg.gpus == c.gpus == pw * pt * pr + dw * dt * dr
        assert (c.isl, c.osl) == (int(r["isl"]), int(r["osl"]))
        assert c.clients == dw * dr * int(r["decode_batch_size"])
        rec = recipe_for(c, {}, tmp_path / "runs.csv")
        assert rec.architecture == "fudg" and rec.cluster.gpus == cfg.gpus
        intra, inter = LINKS[c.gpu]
        assert rec.cluster.intra_node.bandwidth_GBps == intra["bandwidth_GBps"]
        assert rec.cluster.inter_node.bandwidth_GBps == inter["bandwidth_GBps"]
        assert cluster_for(c)["gpus"] == cfg.gpus


def _modelled(row: dict) -> bool:
    return _want(row) is None


@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.lists(st.tuples(st.integers(0, len(SMALL) - 1),
                               sides("prefill", adp_max=1, mixed=False, whole=False),
                               sides("decode", whole=False), st.integers(64, 2048),
                               st.integers(2, 48), st.integers(1, 4)), min_size=2, max_size=5),
       agg=st.lists(st.integers(0, len(SMALL) - 1), min_size=1, max_size=3))
def test_scored_disagg_rows_are_reported_on_their_own(tmp_path, data, agg):
    rows = [_disagg(SMALL[k], {**pre, "prefill_num_workers": str(min(2, int(
        pre["prefill_num_workers"])))}, {**dec, "decode_num_workers": "1"}, isl, osl, per, i)
        for i, (k, pre, dec, isl, osl, per) in enumerate(data)]
    rows += [{**SMALL[k], "id": f"a{j}"} for j, k in enumerate(agg)]
    res = shipped.score(_write(tmp_path / "runs.csv", rows))
    out = res["rows"]
    assert [o["id"] for o in out] == [r["id"] for r in rows]  # in = out
    for r, o in zip(rows, out):
        assert o["mode"] == r["mode"]
        if r["mode"] == "disagg" and not _modelled(r):
            assert o["status"] == "unsupported" and o["reason"].startswith("disagg: ")
            assert o["ttft_ms"]["simulated"] is None
        else:  # the Llama-8B profiles have every TP drawn: each modelled row is scored
            assert o["status"] == "scored", o
            for k in ("ttft_ms", "tpot_ms"):
                assert o[k]["simulated"] > 0 and math.isfinite(o[k]["simulated"])
    modes = res["modes"]
    assert sum(m["rows"] for m in modes.values()) == len(rows)
    for m, b in modes.items():
        mine = [o for o in out if o["mode"] == m]
        assert b["rows"] == len(mine) > 0
        assert b["scored"] == sum(o["status"] == "scored" for o in mine)
        for e, s in b["engines"].items():
            assert s == shipped.summary([o for o in mine if o["engine"] == e])
    assert set(modes) == {"agg", "disagg"}
    dis = [o for o in out if o["mode"] == "disagg" and o["status"] == "scored"]
    if dis:  # the disagg errors are the disagg rows', not the agg rows' too
        e = dis[0]["engine"]
        errs = [o["ttft_ms"]["simulated"] / o["ttft_ms"]["measured"] - 1 for o in dis
                if o["engine"] == e]
        got = modes["disagg"]["engines"][e]["ttft_median_abs_pct"]
        assert got == pytest.approx(np.median(np.abs(errs)) * 100)


def test_the_table_has_a_disagg_line_per_engine(tmp_path):
    base = next(r for r in SMALL if r["backend"] == "trtllm")
    pre = {"prefill_num_workers": "1", "prefill_tp_size": "1", "prefill_pp_size": "1",
           "prefill_attention_dp_size": "1", "prefill_moe_tp_size": "1",
           "prefill_moe_ep_size": "1"}
    dec = {k.replace("prefill", "decode"): v for k, v in pre.items()}
    rows = [{**base, "id": "a"}, _disagg(base, pre, dec, 512, 16, 2, 1),
            _disagg(base, pre, {**dec, "decode_attention_dp_size": "4"}, 512, 16, 2, 2)]
    path = _write(tmp_path / "runs.csv", rows)
    r = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(path), "--shipped",
                        "--json", "--rows"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["status"] for x in doc["rows"]] == ["scored", "scored", "unsupported"]
    assert "attention-DP 4" in doc["rows"][2]["reason"]
    assert doc["modes"]["disagg"]["engines"]["trtllm"]["rows"] == 2
    assert doc["modes"]["agg"]["engines"]["trtllm"]["rows"] == 1
    r = subprocess.run([sys.executable, "-m", "hastune", "fidelity", str(path), "--shipped"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if "trtllm" in ln]
    assert any(" agg " in ln for ln in lines) and any(" disagg " in ln for ln in lines)
