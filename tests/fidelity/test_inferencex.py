"""A disaggregated InferenceX row's deployment, from the config that ran it (issue 36 items 1
and 2): hastune.fidelity.inferencex and scripts/inferencex_deployments.py.

- On generated tables of deployments and rows: a row finds the one deployment listed for its
  model, precision, GPU, engine, lengths, concurrency and TPs in the week from its measurement,
  as the pools fudg runs (attention-DP ranks or a TP group, workers, GPUs) and the MTP drafts
  its recipe's name gives ("…_mtp3"); a second listed deployment (MTP entries apart only in
  their drafts are two), MTP whose drafts no name gives, a date outside the window, another
  TP or concurrency is NotFound with the reason, counted under one cause by `--shipped`.
- The builder, on a generated git history of the config, lists each deployment from the
  commit that added it to the one that dropped it; the shipped table reads, and its rows are
  deployments fudg can size.
"""

from __future__ import annotations

import csv
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.fidelity import inferencex as ix
from hastune.fidelity import shipped
from hastune.fidelity.rows import Unmodelled, _disagg_case

ROOT = Path(__file__).resolve().parents[2]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
GPUS = ["h100", "h200", "b200", "gb200"]
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200"}
FRAMEWORKS = {"dynamo-trt": "trtllm", "dynamo-sglang": "sglang", "dynamo-vllm": "vllm"}


@st.composite
def deployments(draw) -> dict:
    """One table row: a DeepSeek-R1 deployment listed from day a to day b (or still)."""
    prec, gpu = draw(st.sampled_from(["fp4", "fp8"])), draw(st.sampled_from(GPUS))
    fw = draw(st.sampled_from(sorted(FRAMEWORKS)))
    a = draw(st.integers(0, 60))
    b = draw(st.one_of(st.none(), st.integers(a + 1, 90)))
    out = {"config": f"dsr1-{prec}-{gpu}-{fw}", "model": "m", "precision": prec,
           "framework": fw, "isl": draw(st.sampled_from([1024, 8192])),
           "osl": draw(st.sampled_from([1024, 8192])),
           "concurrency": draw(st.sampled_from([1, 4, 64, 512])),
           "spec_decoding": draw(st.sampled_from(["none", "none", "mtp"])),
           "recipe": draw(st.sampled_from(["", "x.yaml", "ctx1_gen2_tep8_batch4_eplb0_mtp1"
                                           ".yaml", "ctx1_gen3_dep8_mtp3.yaml", "a_mtp2",
                                           "low-latency-1p9d-mtp.yaml"])),
           "drafts": draw(st.sampled_from([None, None, 1, 3])),
           "valid_from": T0 + dt.timedelta(days=a),
           "valid_to": None if b is None else T0 + dt.timedelta(days=b)}
    for s in ("prefill", "decode"):
        tp = draw(st.sampled_from([1, 2, 4, 8]))
        dp = draw(st.booleans()) and tp > 1
        out |= {f"{s}_workers": draw(st.sampled_from([1, 2, 5, 12, 0])), f"{s}_tp": tp,
                f"{s}_ep": tp if dp or draw(st.booleans()) else 1, f"{s}_dp_attn": dp}
    return out


def _row(d: dict, day: float) -> dict[str, str]:
    """A file row of deployment `d`'s run measured on `day` (worker counts empty, its MoE
    columns not the run's: as the InferenceX rows give them)."""
    when = T0 + dt.timedelta(days=day)
    return {"id": "x", "backend": FRAMEWORKS[d["framework"]], "model_path":
            "deepseek-ai/DeepSeek-R1", "system": SYSTEMS[d["config"].split("-")[2]],
            "precision": d["precision"], "mode": "disagg", "isl": str(d["isl"]),
            "osl": str(d["osl"]), "gemm_quant_mode": "fp8_block", "batch_size": "",
            "tp_size": "", "silicon_ttft_ms": "100", "silicon_tpot_ms": "10",
            "prefill_num_workers": "", "decode_num_workers": "",
            "prefill_tp_size": str(d["prefill_tp"]), "decode_tp_size": str(d["decode_tp"]),
            "prefill_moe_ep_size": "1", "decode_moe_ep_size": "3",
            "silicon_data_source": f"source_file=2026-04-06.csv; model=DeepSeek-R1; "
                                   f"silicon_concurrency={d['concurrency']}; "
                                   f"measured={when:%Y-%m-%dT%H:%M:%SZ}; wip=False"}


def _listed(d: dict, day: float) -> bool:
    when = T0 + dt.timedelta(days=day)
    return d["valid_from"] <= when + ix.WINDOW and (d["valid_to"] is None
                                                    or when < d["valid_to"])


def _same_run(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in ("config", "isl", "osl", "concurrency", "prefill_tp",
                                      "decode_tp"))


def _drafts(d: dict) -> int | None:
    """The draft tokens of a generated entry: 0 without MTP, else what its settings set
    (DECODE_MTP_SIZE), else the recipe's `_mtp<N>`."""
    if d["spec_decoding"] == "none":
        return 0
    if d.get("drafts") is not None:
        return d["drafts"]
    return {"ctx1_gen2_tep8_batch4_eplb0_mtp1.yaml": 1, "ctx1_gen3_dep8_mtp3.yaml": 3,
            "a_mtp2": 2}.get(d["recipe"])


def _deployment(d: dict) -> tuple:
    return (d["spec_decoding"], _drafts(d), *(d[f"{s}_{k}"] for s in ("prefill", "decode")
                                              for k in ("workers", "ep", "dp_attn")))


@settings(max_examples=300, deadline=None)
@given(table=st.lists(deployments(), min_size=1, max_size=6), pick=st.integers(0, 5),
       day=st.floats(-10, 100))
def test_a_row_finds_the_one_deployment_listed_for_it(table, pick, day):
    d = table[pick % len(table)]
    row = _row(d, day)
    live = {_deployment(t) for t in table if _same_run(t, d) and _listed(t, day)}
    try:
        got = ix.deployment(row, tuple(table))
    except ix.NotFound as exc:
        reason = str(exc)
        assert shipped.cause(f"disagg: {reason}") in {
            "disagg: no worker counts, and InferenceX's configs list no such deployment",
            "disagg: no worker counts, and InferenceX's configs list several deployments of "
            "it: which one ran is not known",
            "disagg: speculative decoding with draft tokens not known",
            "disagg: no worker counts, and InferenceX's config lists a pool of no workers"}
        if not live:
            assert "no such deployment" in reason
        elif len(live) > 1:  # two MTP entries apart only in their drafts are two
            assert "several deployments" in reason
            assert reason.count(" prefill + ") == len(live)
        elif next(iter(live))[1] is None:
            assert "draft tokens not known" in reason
        else:  # the one deployment has a pool of no workers
            (only,) = live
            assert "no workers" in reason and 0 in (only[2], only[5])
        return
    (want_key,) = live
    assert want_key[1] is not None and got["decode"].pop("nextn") == want_key[1]
    (want,) = [t for t in table if _same_run(t, d) and _listed(t, day)][:1]
    assert min(want["prefill_workers"], want["decode_workers"]) >= 1
    for s in ("prefill", "decode"):
        g, tp, ep = got[s], want[f"{s}_tp"], want[f"{s}_ep"]
        assert g["num_workers"] == want[f"{s}_workers"] and g["pp_size"] == 1
        # the pool's GPUs per worker are the config's TP, as ranks or as one TP group
        assert g["tp_size"] * g["attention_dp_size"] == tp
        assert g["attention_dp_size"] == (tp if want[f"{s}_dp_attn"] else 1)
        assert g["moe_ep_size"] == ep
        if not want[f"{s}_dp_attn"]:
            assert g["moe_tp_size"] * g["moe_ep_size"] == tp


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(d=deployments(), day=st.floats(0, 60))
def test_a_found_deployment_runs_as_fudg_pools(monkeypatch, d, day):
    """Through rows: the row's case has the config's workers, ranks and TPs, its MTP drafts,
    and the clients its source states; or it is Unmodelled with the finder's reason."""
    d = {**d, "valid_from": T0 + dt.timedelta(days=day), "valid_to": None}
    monkeypatch.setattr(ix, "load", lambda path=ix.TABLE: (d,))
    row = _row(d, day)
    try:
        case = _disagg_case(row, Path("runs.csv"), 2)
    except Unmodelled as exc:
        assert ("speculative decoding" in str(exc)) == (_drafts(d) is None)
        assert ("no workers" in str(exc)) == (_drafts(d) is not None)
        return
    assert _drafts(d) is not None and min(d["prefill_workers"], d["decode_workers"]) >= 1
    assert case.nextn == _drafts(d)  # MTP's drafts a decode step, as the recipe names them
    p = case.pools
    for s in ("prefill", "decode"):
        dp = d[f"{s}_tp"] if d[f"{s}_dp_attn"] else 1
        assert getattr(p, f"{s}_workers") == d[f"{s}_workers"]
        assert getattr(p, f"{s}_dp") == dp
        assert getattr(p, f"{s}_tp") == d[f"{s}_tp"] // dp
        assert getattr(p, f"{s}_ep") == (dp == 1 and d[f"{s}_ep"] == d[f"{s}_tp"] > 1)
    assert p.gpus == sum(d[f"{s}_workers"] * d[f"{s}_tp"] for s in ("prefill", "decode"))
    assert case.clients == d["concurrency"]


def test_a_row_from_elsewhere_still_needs_its_worker_counts():
    row = _row(dict(config="dsr1-fp8-h200-dynamo-trt", framework="dynamo-trt",
                    precision="fp8", isl=1024, osl=1024, concurrency=4, prefill_tp=8,
                    decode_tp=8), 0)
    row["silicon_data_source"] = "db-dump/2026-04-27; config_id=1"
    with pytest.raises(Unmodelled, match="no worker counts .*empty"):
        _disagg_case(row, Path("runs.csv"), 2)


def test_the_shipped_table_reads_and_sizes_pools():
    table = ix.load()
    assert len(table) > 500
    for r in table:
        assert r["valid_to"] is None or r["valid_from"] < r["valid_to"]
        assert r["framework"].removeprefix("dynamo-") in ix.ENGINES
        assert r["config"].split("-")[0] in set(ix.PREFIXES.values())
        for s in ("prefill", "decode"):
            assert r[f"{s}_workers"] >= 0 and r[f"{s}_tp"] >= 1 and r[f"{s}_ep"] >= 1
            side = ix._side(r, s)
            assert side["tp_size"] * side["attention_dp_size"] == r[f"{s}_tp"]


def _config(entries: list[tuple]) -> str:
    """A master config listing `entries` ((name, isl, conc, prefill workers, decode
    workers)) as InferenceX writes them."""
    out: dict = {}
    for name, isl, conc, pw, dw in entries:
        e = out.setdefault(name, {"model": "m", "precision": name.split("-")[1],
                                  "framework": "dynamo-trt", "disagg": True,
                                  "seq-len-configs": []})
        e["seq-len-configs"].append({"isl": isl, "osl": 1024, "search-space": [{
            "conc-list": [conc], "prefill": {"num-worker": pw, "tp": 4, "ep": 4,
                                             "dp-attn": True},
            "decode": {"num-worker": dw, "tp": 8, "ep": 8, "dp-attn": False}}]})
    out["agg-entry"] = {"model": "m", "disagg": False, "seq-len-configs": []}
    return yaml.safe_dump(out)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=st.lists(st.lists(st.tuples(
    st.sampled_from(["dsr1-fp8-h200-dynamo-trt", "dsr1-fp4-b200-dynamo-trt"]),
    st.sampled_from([1024, 8192]), st.sampled_from([4, 64]), st.integers(1, 3),
    st.integers(1, 3)), max_size=4), min_size=1, max_size=4))
def test_the_builder_lists_each_deployment_while_the_config_did(tmp_path_factory, history):
    sys.path.insert(0, str(ROOT / "scripts"))
    import inferencex_deployments as build

    repo = tmp_path_factory.mktemp("ix")
    run = dict(cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    path = repo / ".github" / "configs" / "nvidia-master.yaml"
    path.parent.mkdir(parents=True)
    for i, entries in enumerate(history):
        path.write_text(_config(entries) + f"# version {i}\n")
        when = f"2026-01-{i + 1:02d}T00:00:00+00:00"
        subprocess.run(["git", "add", "-A"], **run)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "-m", str(i)], **run, env={**os.environ, "GIT_COMMITTER_DATE": when,
                                                    "GIT_AUTHOR_DATE": when})
    rows = build.table(str(repo), "2026-02-01")
    got = {}
    for r in rows:
        got.setdefault((r[0], r[4], r[6], r[8], r[12]), []).append((r[-2][:10], r[-1][:10]))
    # each deployment of version i: listed from the first version of its run of versions
    for key in {(n, isl, c, pw, dw) for v in history for (n, isl, c, pw, dw) in v}:
        on = [i for i, v in enumerate(history) if key in v]
        spans, start = [], None
        for i in range(len(history) + 1):
            if i in on and start is None:
                start = i
            if i not in on and start is not None:
                spans.append((f"2026-01-{start + 1:02d}",
                              f"2026-01-{i + 1:02d}" if i < len(history) else ""))
                start = None
        assert sorted(got.pop(key)) == sorted(spans)
    assert not got  # nothing that was never listed, no agg entry
    # what it writes reads back
    out = tmp_path_factory.mktemp("out") / "t.csv"
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(build.COLUMNS)
        w.writerows(rows)
    assert len(ix.load(out)) == len(rows)


@settings(max_examples=100, deadline=None)
@given(d=deployments(), eps=st.floats(0.001, 6.0))
def test_the_window_is_the_week_from_the_measurement(d, eps):
    """Listed from day a to day b: a run measured up to a week before a, or any time until b,
    finds it; one measured at b or later, or more than a week before a, does not."""
    d = {**d, "spec_decoding": "none", "prefill_workers": 1, "decode_workers": 1,
         "valid_to": d["valid_to"] or d["valid_from"] + dt.timedelta(days=3)}
    a = (d["valid_from"] - T0) / dt.timedelta(days=1)
    b = (d["valid_to"] - T0) / dt.timedelta(days=1)
    week = ix.WINDOW / dt.timedelta(days=1)
    for day, found in ((a - week + min(eps, week) * 0.99, True), (b - min(eps, b - a) * 0.99,
                                                                  True),
                       (b + eps, False), (b, False), (a - week - eps, False)):
        try:
            ix.deployment(_row(d, day), (d,))
            assert found, day
        except ix.NotFound as exc:
            assert not found and "no such deployment" in str(exc), (day, exc)


@settings(max_examples=300, deadline=None)
@given(table=st.lists(deployments(), min_size=1, max_size=6), pick=st.integers(0, 5),
       day=st.floats(0, 60), extra=st.integers(-4, 4))
def test_tp_columns_above_every_listed_tp_read_as_the_deployments_gpus(table, pick, day,
                                                                         extra):
    """A row whose prefill and decode TP are one number N above every TP the configs list for
    its cell finds the one deployment listed then whose workers × TP over both pools sum to
    N; no such deployment, or several, is NotFound. N at or below a listed TP is read as TPs
    (the test above)."""
    d = table[pick % len(table)]
    n = ix.gpus(d) + extra
    row = {**_row(d, day), "prefill_tp_size": str(n), "decode_tp_size": str(n)}
    cell = [t for t in table if all(t[k] == d[k] for k in ("config", "isl", "osl",
                                                              "concurrency"))]
    top = max(max(t["prefill_tp"], t["decode_tp"]) for t in cell)
    if n <= top or n < 1:
        return
    live = {_deployment(t) for t in cell if _listed(t, day) and ix.gpus(t) == n}
    try:
        got = ix.deployment(row, tuple(table))
    except ix.NotFound as exc:
        reason = str(exc)
        assert (not live and "no such deployment" in reason) or \
            (len(live) > 1 and "several deployments" in reason) or \
            (len(live) == 1 and ("speculative" in reason or "no workers" in reason))
        return
    assert len(live) == 1
    (want,) = [t for t in cell if _listed(t, day) and ix.gpus(t) == n][:1]
    for s in ("prefill", "decode"):
        g = got[s]
        assert g["num_workers"] == want[f"{s}_workers"]
        assert g["tp_size"] * g["attention_dp_size"] == want[f"{s}_tp"]
    assert sum(got[s]["num_workers"] * got[s]["tp_size"] * got[s]["attention_dp_size"]
               for s in ("prefill", "decode")) == n


@settings(max_examples=200, deadline=None)
@given(d=deployments(), day=st.floats(0, 60), named=st.sampled_from(["per-worker", "other",
                                                                     "wrong", ""]))
def test_a_recipe_named_per_decode_worker_runs_conc_times_its_workers(d, day, named):
    """The H200 TensorRT-LLM recipes "c<conc>_ctx<P>_gen<D>_…" run conc × D clients (their
    benchmark's `concurrencies`); any other recipe, or one whose name does not give this
    entry's concurrency and decode workers, runs the entry's concurrency."""
    d = d | {"spec_decoding": "none", "valid_from": T0, "valid_to": None,
             "prefill_workers": max(d["prefill_workers"], 1),
             "decode_workers": max(d["decode_workers"], 2)}
    conc, dw = d["concurrency"], d["decode_workers"]
    d["recipe"] = {"per-worker": f"c{conc}_ctx1_gen{dw}_tep8_batch32_eplb0_mtp0.yaml",
                   "other": f"ctx1_gen{dw}_tep8_batch32_eplb0_mtp0_{conc}.yaml",
                   "wrong": f"c{conc + 1}_ctx1_gen{dw}_tep8_batch32_eplb0_mtp0.yaml",
                   "": ""}[named]
    ran = conc * dw if named == "per-worker" else conc
    assert ix.clients_of(d) == ran
    got = ix.deployment(_row(d | {"concurrency": ran}, day), (d,))
    assert got["decode"]["num_workers"] == dw
    if ran != conc:   # the entry's own concurrency is not what its benchmark ran
        with pytest.raises(ix.NotFound, match="no such deployment"):
            ix.deployment(_row(d, day), (d,))


def test_the_shipped_h200_recipes_ran_their_concurrency_times_their_decode_workers():
    # srt-slurm recipes/trtllm/h200/1k1k/stp/c4_ctx1_gen9_tep8_batch256_eplb0_mtp0.yaml:
    # benchmark `concurrencies: "36"`
    (r,) = [r for r in ix.load() if r["recipe"].startswith("c4_ctx1_gen9_")
            and r["isl"] == 1024 and r["valid_to"] is None]
    assert (r["concurrency"], r["decode_workers"], ix.clients_of(r)) == (4, 9, 36)
    assert all(ix.clients_of(r) == r["concurrency"] for r in ix.load()
               if not r["config"].startswith("dsr1-fp8-h200-dynamo-trt"))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 5), where=st.sampled_from(["decode", "prefill", "entry", None]),
       named=st.sampled_from(["", "ctx1_gen4_tep8_batch32_eplb0_mtp2.yaml"]),
       spec=st.sampled_from(["mtp", "none"]))
def test_the_builder_records_the_drafts_an_entry_sets(tmp_path_factory, n, where, named, spec):
    """An entry that sets DECODE_MTP_SIZE=N (in its decode, prefill or own settings) is listed
    with N drafts; read back, an MTP entry runs N drafts a step, before any count its recipe's
    name gives; without the setting, the name's count; a plain entry none."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import inferencex_deployments as build

    sp = {"conc-list": [4], "spec-decoding": spec,
          "prefill": {"num-worker": 1, "tp": 4, "ep": 4, "dp-attn": True},
          "decode": {"num-worker": 2, "tp": 8, "ep": 8, "dp-attn": False}}
    settings_ = [f"CONFIG_FILE=recipes/x/{named}"] if named else []
    if where is not None:
        settings_.append(f"DECODE_MTP_SIZE={n}")
    target = sp if where == "entry" else sp[where] if where else sp["decode"]
    target["additional-settings"] = settings_
    text = yaml.safe_dump({"dsr1-fp8-b200-dynamo-trt": {
        "model": "m", "precision": "fp8", "framework": "dynamo-trt", "disagg": True,
        "seq-len-configs": [{"isl": 1024, "osl": 1024, "search-space": [sp]}]}})
    (row,) = build.entries(text)
    assert row[-1] == (n if where is not None else "")
    out = tmp_path_factory.mktemp("out") / "t.csv"
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(build.COLUMNS)
        w.writerow((*row, "2026-01-01T00:00:00+00:00", ""))
    (entry,) = ix.load(out)
    want = (0 if spec == "none" else n if where is not None else 2 if named else None)
    assert ix.nextn_of(entry) == want
