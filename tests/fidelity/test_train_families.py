"""Rows of silicon_train.csv that issue 36's models, precisions and GPUs bring: MiniMax-M2.5,
gpt-oss-120b and Kimi K2.5 (read from aiconfigurator-core's packaged configs), NVFP4 weights
on B200, GB200 (`gb200`), a quantized checkpoint's name (…-FP8, …-NVFP4) read as its base
model, gpt-oss's fp4 on Hopper as its MXFP4 checkpoint, Kimi K2.5's int4_wo as its int4
experts, GLM-5's MLA with DSA, Qwen3.5's Gated DeltaNet. One row of each is scored with finite
simulated latencies; NVFP4 on Hopper of another checkpoint (a DeepSeek-R1-NVFP4 row moved to
H200) comes back unsupported with the reason; base names follow the rule on generated
names."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.errors import InputError
from hastune.fidelity import shipped
from hastune.fidelity.rows import QUANT_SUFFIX, SYSTEMS, base_names, model_dir

TRAIN = Path(__file__).resolve().parents[2] / "hastune" / "data" / "calibration" / "e2e" / \
    "silicon_train.csv"
ROWS = list(csv.DictReader(TRAIN.open()))

# (model_path, system, gemm_quant_mode, backend, mode): the first such row of the file
SCORED = [
    ("MiniMaxAI/MiniMax-M2.5", "b200_sxm", "fp8", "vllm", "agg"),
    ("MiniMaxAI/MiniMax-M2.5", "h200_sxm", "fp8", "vllm", "agg"),
    ("openai/gpt-oss-120b", "b200_sxm", "nvfp4", "trtllm", "agg"),
    ("moonshotai/Kimi-K2.5", "b200_sxm", "nvfp4", "vllm", "agg"),
    ("meta-llama/Llama-3.1-70B", "b200_sxm", "nvfp4", "vllm", "agg"),
    ("nvidia/DeepSeek-R1-NVFP4", "b200_sxm", "nvfp4", "trtllm", "agg"),
    ("nvidia/Llama-3.1-8B-Instruct-FP8", "h200_sxm", "fp8", "vllm", "agg"),
    ("deepseek-ai/DeepSeek-V3", "gb200", "nvfp4", "sglang", "disagg"),
    ("openai/gpt-oss-120b", "h200_sxm", "nvfp4", "vllm", "agg"),   # as MXFP4: its checkpoint
    ("openai/gpt-oss-120b", "h100_sxm", "nvfp4", "vllm", "agg"),
    ("openai/gpt-oss-120b", "h200_sxm", "nvfp4", "trtllm", "agg"),
    ("moonshotai/Kimi-K2.5", "b200_sxm", "int4_wo", "vllm", "agg"),  # int4 experts
    ("moonshotai/Kimi-K2.5", "h200_sxm", "int4_wo", "vllm", "agg"),
    ("zhipuai/GLM-5", "b200_sxm", "fp8", "sglang", "agg"),      # MLA with DSA
    ("zhipuai/GLM-5", "h200_sxm", "fp8", "sglang", "agg"),
    ("zhipuai/GLM-5", "b200_sxm", "nvfp4", "sglang", "agg"),
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "fp8", "sglang", "agg"),   # Gated DeltaNet
    ("Qwen/Qwen3.5-397B-A17B", "h200_sxm", "fp8", "sglang", "agg"),
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", "nvfp4", "sglang", "agg"),
]
# an NVFP4 checkpoint's row, moved to Hopper (the file has none: it has no FP4 tensor cores)
HOPPER_FP4 = ("nvidia/DeepSeek-R1-NVFP4", "b200_sxm", "nvfp4", "trtllm", "agg")


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, list(ROWS[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _first(key) -> dict:
    for r in ROWS:
        if (r["model_path"], r["system"], r["gemm_quant_mode"], r["backend"], r["mode"]) == key \
                and (r["mode"] == "agg" or r["prefill_num_workers"]) \
                and r.get("attention_dp_size", "1") in ("", "1") \
                and r.get("prefill_attention_dp_size", "1") in ("", "1") \
                and r.get("decode_attention_dp_size", "1") in ("", "1"):
            return r
    raise LookupError(key)


def _slowed(r: dict) -> dict:
    """The row measured 10 × slower: what a family is read as is checked here, not its error,
    and no row so slow is faster than its kernels can prefill (fidelity.run.overdrawn: the
    FP8 Llama-8B's first row is, as measured)."""
    return {**r, **{k: str(10 * float(r[k])) for k in ("silicon_ttft_ms", "silicon_tpot_ms")}}


def test_new_families_are_scored(tmp_path):
    rows = [_slowed(_first(k)) for k in SCORED] + [{**_first(HOPPER_FP4), "system": "h200_sxm",
                                                    "id": "nvfp4-moved-to-h200"}]
    path = tmp_path / "runs.csv"
    _write(path, rows)
    got = {r["id"]: r for r in shipped.score(path)["rows"]}
    for key, row in zip(SCORED, rows):
        r = got[row["id"]]
        assert r["status"] == "scored", (key, r["reason"])
        assert r["gpu"] == SYSTEMS[key[1]]
        for k in ("ttft_ms", "tpot_ms"):
            assert math.isfinite(r[k]["simulated"]) and r[k]["simulated"] > 0, (key, r)
    hop = got[rows[-1]["id"]]
    assert hop["status"] == "unsupported"
    assert "FP4 tensor cores (Blackwell" in hop["reason"]


NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9.]{0,12}(-[A-Za-z0-9]{1,6}){0,2}", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(org=st.from_regex(r"[a-z][a-z0-9-]{1,10}", fullmatch=True), name=NAME,
       suffix=st.sampled_from(["-FP8", "-NVFP4", "-fp8", "-FP4", "-AWQ", ""]))
def test_base_names(org, name, suffix):
    full = f"{org}/{name}{suffix}"
    got = base_names(full)
    if ".." in full:  # a name that could climb out of a config folder is refused
        assert got == []
        return
    assert all(g != full and "/" in g for g in got)
    base = QUANT_SUFFIX.sub("", f"{name}{suffix}")
    if base != f"{name}{suffix}":
        assert got[0] == f"{org}/{base}"  # the suffix dropped first, under its own org
    assert all(g.partition("/")[2] in (f"{name}{suffix}", base) for g in got)
    assert base_names(f"{org}/../{name}") == [] and base_names(name) == []


def test_base_names_find_the_publishers_config():
    assert "meta-llama/Llama-3.1-8B-Instruct" in base_names("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert "deepseek-ai/DeepSeek-R1" in base_names("nvidia/DeepSeek-R1-NVFP4")
    assert base_names("zhipuai/GLM-5") == ["zai-org/GLM-5"]
    with pytest.raises(InputError) as info:  # no config anywhere
        model_dir("nobody/No-Such-Model-7B-FP8", {}, TRAIN)
    assert info.value.field == "model_path"


def _layout(tp, dp, mtp, mep):
    return next(r for r in ROWS if r["mode"] == "agg" and (
        r["tp_size"], r["attention_dp_size"], r["moe_tp_size"], r["moe_ep_size"])
        == (tp, dp, mtp, mep))


def test_agg_moe_layouts(tmp_path):
    """MoE EP = TP runs with whole experts per GPU (nodg's expert_parallel); a tp_size that is
    MoE TP × EP with the two equal (16 = 4 × 4) is the run at TP 4, EP 4 (`_agg_layout`);
    attention-DP 8 at TP 1 with EP 8 is 8 ranks; attention-DP beside MoE TP and a mixed MoE
    TP × EP come back unsupported, each with its layout in the reason."""
    from hastune.fidelity.rows import read_rows

    rows = [_layout("8", "1", "1", "8"), _layout("8", "1", "8", "1"),
            _layout("1", "8", "1", "8"), _layout("16", "1", "4", "4"),
            _layout("8", "", "2", "4"), _layout("1", "4", "4", "1")]
    path = tmp_path / "runs.csv"
    _write(path, rows)
    got = read_rows(path)
    assert got[0].case is not None and got[0].case.ep and got[0].case.tp == 8
    assert got[1].case is not None and not got[1].case.ep
    assert got[2].case is not None and (got[2].case.tp, got[2].case.dp) == (1, 8)
    assert got[5].case is None and "agg: attention-DP not modelled" in str(got[5].reason)
    assert got[3].case is not None and got[3].case.ep and got[3].case.tp == 4
    assert got[4].case is None and "MoE TP 2 × EP 4 over TP 8" in str(got[4].reason)
    ids = (rows[0]["id"], rows[2]["id"])  # whole experts at TP 8; 8 attention-DP ranks
    res = {r["id"]: r for r in shipped.score(path, only=lambda r: r.id in ids)["rows"]}
    for i in ids:
        r = res[i]
        assert r["status"] == "scored", r["reason"]
        assert math.isfinite(r["tpot_ms"]["simulated"]) and math.isfinite(r["ttft_ms"]["simulated"])


def _read_one(tmp_path_factory, row: dict):
    from hastune.fidelity.rows import read_rows

    path = tmp_path_factory.mktemp("row") / "runs.csv"
    _write(path, [row])
    (got,) = read_rows(path)
    return got


@settings(max_examples=300, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
       dp=st.sampled_from(["", "1", "2", "4", "8", "16", "64"]),
       mtp=st.sampled_from(["", "1", "2", "4", "8"]),
       mep=st.sampled_from(["", "1", "2", "4", "8", "16", "64"]))
def test_an_agg_layout_reads_as_one_tp_group_or_is_unsupported(tmp_path_factory, tp, dp, mtp,
                                                                mep):
    """On generated (tp_size, attention-DP, MoE TP, MoE EP) columns of a MoE row, the case is
    (`rows._agg_layout`): one TP group of tp_size GPUs with experts split (EP 1, MoE TP 1 or
    TP) or whole (EP = TP, MoE TP 1); attention-DP ranks at TP 1 with whole experts over all
    of them (EP = their GPUs); or, where the columns give one pair twice (MoE TP = EP, or
    tp_size = attention-DP, the pair's product the columns' GPUs), that pair's one group. Any
    other layout is unsupported with it in the reason; a case never uses more GPUs than the
    columns give."""
    base = _layout("8", "1", "1", "8")
    got = _read_one(tmp_path_factory, {**base, "tp_size": str(tp), "attention_dp_size": dp,
                                       "moe_tp_size": mtp, "moe_ep_size": mep})
    d, m, e = (int(x) if x else 1 for x in (dp, mtp, mep))
    gpus = tp * d
    pair = m if m == e > 1 and m * e == gpus else tp if d == tp > 1 and m * e == gpus else 0
    if pair:
        want = (pair, True, 1) if d == 1 else (1, True, pair)
    elif d > 1:
        want = (1, True, d) if tp == 1 and m == 1 and e == gpus else None
    elif e == 1 and m in (1, tp):
        want = (tp, False, 1)
    elif m == 1 and e == tp and tp > 1:
        want = (tp, True, 1)
    else:
        want = None
    if want is None:
        assert got.case is None and "not modelled" in str(got.reason)
    else:
        assert got.case is not None, got.reason
        assert (got.case.tp, got.case.ep, got.case.dp) == want
        assert got.case.gpus <= gpus


@settings(max_examples=100, deadline=None)
@given(batch=st.integers(1, 512), dp=st.sampled_from(["", "1", "2", "8"]),
       conc=st.one_of(st.none(), st.integers(1, 4096)))
def test_agg_clients_are_batch_size_per_attention_dp_rank(tmp_path_factory, batch, dp, conc):
    """A run's clients: batch_size per attention-DP rank, whatever silicon_concurrency its
    source states."""
    base = _layout("1", "8", "1", "8") if dp not in ("", "1") else _layout("8", "1", "1", "8")
    src = "source_file=x.csv; model=m" + (f"; silicon_concurrency={conc}" if conc else "")
    row = {**base, "batch_size": str(batch), "attention_dp_size": dp,
           "moe_ep_size": dp if dp not in ("", "1") else "8",
           "tp_size": "1" if dp not in ("", "1") else "8", "silicon_data_source": src}
    got = _read_one(tmp_path_factory, row)
    assert got.case is not None, got.reason
    assert got.case.clients == batch * int(dp or 1)


def test_a_disagg_row_with_attention_dp_ranks_is_scored(tmp_path):
    """A measured disagg run whose prefill workers are attention-DP ranks (TP 1, EP = DP) runs
    as fudg with an instance per rank, timed as a rank (Profile.for_dp), and is scored."""
    row = next(r for r in ROWS if r["mode"] == "disagg" and r["prefill_num_workers"]
               and r["system"] == "b200_sxm" and r["prefill_attention_dp_size"] not in ("", "1")
               and r["prefill_tp_size"] == "1"
               and r["prefill_moe_ep_size"] == r["prefill_attention_dp_size"]
               and r["decode_attention_dp_size"] in ("", "1"))
    path = tmp_path / "runs.csv"
    _write(path, [row])
    (r,) = shipped.score(path)["rows"]
    assert r["status"] == "scored", r["reason"]
    for k in ("ttft_ms", "tpot_ms"):
        assert math.isfinite(r[k]["simulated"]) and r[k]["simulated"] > 0


@given(name=st.text(alphabet="abcdefgh-_@+.0123456789", min_size=1, max_size=40),
       n=st.sampled_from([16, 32, 64]))
def test_a_missing_attention_dp_group_counts_as_one_cause(name, n):
    """However the profile is named and whatever group it lacks, `unsupported_by` counts the
    row under one cause (not one per profile)."""
    from hastune.fidelity.shipped import cause

    reason = (f"profile {name} has no attention-DP variant of {n} ranks (it has 2, 4). Fix: "
              "use one of those, or regenerate the profile")
    assert cause(reason) == "profile: no such attention-DP group"


def test_the_fit_takes_attention_dp_rows_as_their_ranks(tmp_path):
    """The fit (hastune.fidelity.score.Fitter, as --cv and --write use it) keeps an
    attention-DP row — its profile has the rank the row needs — and simulates it as `--shipped`
    does; a row whose group the profile lacks is left out with why."""
    from hastune.fidelity import fit as F
    from hastune.fidelity.rows import read_rows
    from hastune.fidelity.score import Fitter

    row = _layout("1", "8", "1", "8")
    path = tmp_path / "runs.csv"
    _write(path, [row, {**row, "id": "dp64", "attention_dp_size": "64",
                           "moe_ep_size": "64"}])
    cases = [r.case for r in read_rows(path)]
    assert [c.dp for c in cases] == [8, 64]
    fitter = Fitter(cases, {}, path, strict=False)
    assert [c.id for c in fitter.cases] == [row["id"]]
    assert "attention-DP variant of 64 ranks" in next(iter(fitter.unsupported.values()))
    sim = fitter.run(cases[0], F.START)  # the kernels alone, with the least front end
    assert math.isfinite(sim.ttft_ms) and math.isfinite(sim.tpot_ms)


@pytest.mark.parametrize("system, gpu", [("b300_sxm", "b300-288gb"), ("gb300", "gb300-288gb")])
def test_a_system_of_the_kernel_database_is_its_gpu(tmp_path, system, gpu):
    """A row on a system the file does not hold but the kernel database does (Blackwell
    Ultra) runs on that system's GPU and is scored; a disagg row on a GPU without link
    figures comes back unsupported, saying so."""
    from hastune.fidelity.rows import gpu_of

    assert gpu_of(system) == gpu and gpu_of("mi300x") is None
    base = next(r for r in ROWS if r["model_path"].startswith("meta-llama/Llama-3.1-70B")
                and r["mode"] == "agg" and r["backend"] == "vllm")
    dis = next(r for r in ROWS if r["mode"] == "disagg" and r["prefill_num_workers"]
               and r["prefill_attention_dp_size"] in ("", "1")
               and r["decode_attention_dp_size"] in ("", "1"))
    rows = [{**base, "id": "agg", "system": system},
            {**dis, "id": "dis-b60", "system": "b60"}]
    path = tmp_path / "runs.csv"
    _write(path, rows)
    got = {r["id"]: r for r in shipped.score(path)["rows"]}
    assert got["agg"]["status"] == "scored" and got["agg"]["gpu"] == gpu, got["agg"]["reason"]
    assert math.isfinite(got["agg"]["ttft_ms"]["simulated"])
    assert got["dis-b60"]["status"] == "unsupported"
    assert "no link figures for b60-24gb" in got["dis-b60"]["reason"]


def test_gb200_rows_at_eight_gpus_are_scored(tmp_path):
    """GB200's tables time collectives on 2 and 4 GPUs; its 8-GPU ones come from B200's
    (hastune.calibrate.aic_fabric): an agg TP 8 row and a disagg row whose decode workers are
    TP 8 (the file's first of each, on its own columns) are scored, as is one whose prefill
    worker is 8 attention-DP ranks."""
    def first(pred):
        return next(r for r in ROWS if r["system"] == "gb200" and pred(r))

    rows = [first(lambda r: r["mode"] == "agg" and r["tp_size"] == "8"
                  and r["attention_dp_size"] in ("", "1")),
            first(lambda r: r["mode"] == "disagg" and r["prefill_num_workers"]
                  and r["decode_tp_size"] == "8" and r["decode_attention_dp_size"] == "1"),
            first(lambda r: r["mode"] == "disagg" and r["prefill_num_workers"]
                  and r["prefill_attention_dp_size"] == "8"
                  and r["decode_attention_dp_size"] in ("1", "8"))]
    path = _write(tmp_path / "runs.csv", [_slowed(r) for r in rows])
    got = {r["id"]: r for r in shipped.score(path)["rows"]}
    for row in rows:
        r = got[row["id"]]
        assert r["status"] == "scored", r["reason"]
        assert math.isfinite(r["tpot_ms"]["simulated"]) and math.isfinite(r["ttft_ms"]["simulated"])
