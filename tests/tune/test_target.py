"""Which engines can launch a tuned answer, and `tune --target ENGINE`.

- `hastune.export.blocking_for` says what `export` would refuse, without writing: on
  generated recipes and configurations of every architecture, for every engine, it is empty
  exactly when export writes launch files (and, then, a launch script).
- A tune's summary names, per engine, whether it can launch the best and, where it cannot,
  the best evaluated configuration it can; candidates.csv has a column per engine; the recipe
  engine's deploy/ folder holds launch files (the best's, or the best deployable one's with its
  config) or is not reported as written.
- `--target vllm` searches only what vLLM can launch (pruning's `target` rule): every
  evaluated trial exports for vLLM, and so does the answer; EAServe's co-resident prefill is
  searched as a fixed SM split (sm_split, CUDA MPS), which vLLM runs. The CLI's default
  target is the recipe's engine (`auto`); `all` searches every configuration."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.config import parse_config
from hastune.export import ENGINES, blocking_for, export
from hastune.export.target import build_target
from hastune.recipe import load_recipe
from hastune.tune.runner import model_facts
from tests.generated import random_recipe, space
from tests.tune.conftest import hastune


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), arch=st.sampled_from(archs.NAMES),
       gpn=st.sampled_from([1, 2, 4, 8]))
def test_blocking_for_is_what_export_refuses(tmp_path_factory, seed, arch, gpn):
    rec = random_recipe(seed, (arch,))
    cfgs = list(space(arch).configs(rec.cluster.gpus))
    if not cfgs:
        return
    cfg = cfgs[int(np.random.default_rng(seed).integers(len(cfgs)))]
    rec = rec.model_copy(update={"cluster": rec.cluster.model_copy(
        update={"gpus_per_node": gpn})})
    target = build_target(rec, cfg, 1.0)
    facts = model_facts(rec)
    out = tmp_path_factory.mktemp("export")
    for engine in ENGINES:
        why = blocking_for(cfg, gpn, engine, *facts)
        res = export(cfg, target, engine, out / engine, backend=facts[0])
        assert res.written == (not why), (engine, why, res.plan.blocking)
        if not why:
            assert res.plan.blocking == []
        else:
            assert res.plan.blocking[:len(why)] == why


def _tune(recipe, out, *extra):
    r = hastune("tune", str(recipe), "--trials", "8", "--out", str(out), "--no-plots",
                "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_summary_says_which_engines_launch_the_best_and_what_they_can(small_recipe,
                                                                          tmp_path):
    """EAServe and fudg on 5 GPUs: the best is EAServe with co-resident prefill (no engine but
    runners/ launches it); the fudg trials are what vLLM, SGLang and Dynamo can."""
    import yaml

    data = yaml.safe_load(small_recipe.read_text())
    data["architecture"] = ["epd", "fudg"]
    small_recipe.write_text(yaml.safe_dump(data))
    s = _tune(small_recipe, tmp_path / "out", "--target", "all")
    gpn = 8
    facts = model_facts(load_recipe(small_recipe))
    best = parse_config(s["best_config"])
    evals = _evaluated(tmp_path / "out")
    for engine, e in s["engines"].items():
        why = blocking_for(best, gpn, engine, *facts)
        assert e["deploys"] == (not why)
        if why:
            can = [float(t.value) for t in evals if float(t.value or 0) > 0 and not
                   blocking_for(parse_config(t.user_attrs["config"]), gpn, engine, *facts)]
            got = e["best_deployable"]
            assert (got is None) == (not can)
            if got is not None:
                assert got["goodput_rps"] == pytest.approx(max(can))
    rows = list(csv.DictReader((tmp_path / "out" / "candidates.csv").open()))
    assert rows and all(r[e] == "yes" or r[e].startswith("no: ") for r in rows for e in ENGINES)
    d = s["deploy"]
    folder = tmp_path / "out" / "deploy" / d["engine"]
    assert d["written"] == (folder / "launch.sh").exists()
    e = s["engines"][d["engine"]]
    if not e["deploys"] and e["best_deployable"]:  # the best it can launch, not nothing
        assert d["instead_of_best"] and d["written"]
    assert any(not x["deploys"] and x["best_deployable"] for x in s["engines"].values()), \
        "the case this test is for: a best some engine cannot launch, and one it can"
    if d.get("instead_of_best"):
        assert (folder / "config.yaml").exists()
        assert d["goodput_rps"] == s["engines"][d["engine"]]["best_deployable"]["goodput_rps"]


def _evaluated(out) -> list:
    from optuna import load_study

    from hastune.tune.storage import open_storage

    st = load_study(study_name=json.loads((out / "summary.json").read_text())["study"],
                    storage=open_storage(f"sqlite:///{out / 'study.db'}", None))
    return [t for t in st.get_trials() if t.user_attrs.get("evaluated")]


def test_target_searches_only_what_the_engine_can_launch(small_recipe, tmp_path):
    s = _tune(small_recipe, tmp_path / "out", "--target", "vllm")
    assert s["pruned"]["rules"]["target"] > 0
    evals = _evaluated(tmp_path / "out")
    assert evals
    facts = model_facts(load_recipe(small_recipe))
    for t in evals:
        assert not blocking_for(parse_config(t.user_attrs["config"]), 8, "vllm", *facts)
    assert s["engines"]["vllm"]["deploys"] and s["deploy"]["written"]
    assert (tmp_path / "out" / "deploy" / "vllm" / "launch.sh").exists()


@pytest.mark.parametrize("model,arch,engine,topology,refused", [
    ("llava-v1.6-34b", "epd-static", "sglang", "epd",
     "no model class for LlavaNextForConditionalGeneration"),
    ("qwen2.5-vl-32b", "epd-static", "sglang", "epd", None),
    ("ultravox-v0.6-27b", "fudg", "sglang", "pd", "no model class for UltravoxModel"),
    ("ultravox-v0.6-27b", "epd-static", "vllm", "epd", None),
    ("llava-v1.6-34b", "epd-static", "dynamo", "epd", None),
])
def test_engines_refuse_models_as_their_pinned_registries_do(model, arch, engine, topology,
                                                             refused, tmp_path):
    """What the engines' wheels say (hastune/export/engine_models.json): SGLang 0.5.23 has no
    class for LLaVA-NeXT's or Ultravox's Hugging Face architecture (its Transformers fallback
    is text only) and disaggregates the encoder of Qwen2.5-VL; vLLM 0.33.0 serves all three,
    E/P/D included (Dynamo as its vLLM backend)."""
    root = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples"
    rec = load_recipe(root / {"llava-v1.6-34b": "image-llava-8xa100.yaml",
                              "qwen2.5-vl-32b": "video-qwen-8xa100.yaml",
                              "ultravox-v0.6-27b": "audio-ultravox-8xa100.yaml"}[model])
    assert rec.model == model
    cfg = parse_config({"architecture": "epd-static", "n_E": 2, "n_P": 2, "n_D": 4}
                       if arch == "epd-static" else
                       {"architecture": "fudg", "prefill_instances": 4, "decode_instances": 4})
    why = blocking_for(cfg, 8, engine, *model_facts(rec))
    res = export(cfg, build_target(rec, cfg, 1.0), engine, tmp_path / "out")
    assert res.plan.topology == topology
    if refused is None:
        assert not why and res.written
    else:
        assert any(refused in w for w in why) and not res.written
        assert (tmp_path / "out" / "README.md").exists()
        assert not list((tmp_path / "out").glob("*.sh"))


def test_sglang_disaggregates_only_the_encoders_its_hook_lists():
    from hastune.archs.deploy import Topology
    from hastune.export.models import model_blocking, tables

    # a class, but not on the hook's list: P/D yes, E/P/D no
    assert "LlavaForConditionalGeneration" in tables()["sglang"]["generate"]
    assert not model_blocking("sglang", "LlavaForConditionalGeneration", Topology.PD, True)
    why = model_blocking("sglang", "LlavaForConditionalGeneration", Topology.EPD, True)
    assert why and "pd_disaggregation_hook" in why[0]
    # a text model with no class of its own: the fallback serves text
    assert not model_blocking("sglang", "NoSuchForCausalLM", Topology.PD, False)
    assert model_blocking("vllm", "NoSuchForCausalLM", Topology.PD, False)
    for engine in ("vllm", "sglang"):  # the tables say where they come from
        src = tables()[engine]["source"]
        assert src["wheel"].startswith(engine) and len(src["wheel_sha256"]) == 64


def test_a_vllm_target_searches_the_co_resident_prefill_as_a_fixed_split(small_recipe,
                                                                          tmp_path):
    """EAServe's co-resident prefill (s < 1) runs on vLLM only as a fixed split: a tune for
    vLLM (the CLI's default for this recipe: auto) evaluates such configurations, each with
    its split, and none with the dynamic one; `--target all` never sets a split."""
    s = _tune(small_recipe, tmp_path / "auto")
    assert s["target"] == "vllm"
    cfgs = [parse_config(t.user_attrs["config"]) for t in _evaluated(tmp_path / "auto")]
    local = [c for c in cfgs if c.architecture == "epd" and c.s < 1]
    assert local, "the case this test is for: co-resident prefill evaluated for vLLM"
    assert all(c.sm_split is not None for c in local)
    assert all(c.sm_split is None for c in cfgs if c.architecture == "epd" and c.s == 1)
    s = _tune(small_recipe, tmp_path / "all", "--target", "all")
    assert s["target"] is None
    cfgs = [parse_config(t.user_attrs["config"]) for t in _evaluated(tmp_path / "all")]
    assert all(getattr(c, "sm_split", None) is None for c in cfgs)
