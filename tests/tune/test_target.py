"""Which engines can launch a tuned answer, and `tune --target ENGINE`.

- `hastune.export.blocking_for` says what `export` would refuse, without writing: on
  generated recipes and configurations of every architecture, for every engine, it is empty
  exactly when export writes launch files (and, then, a launch script).
- A tune's summary names, per engine, whether it can launch the best and, where it cannot,
  the best evaluated configuration it can; candidates.csv has a column per engine; the recipe
  engine's deploy/ folder holds launch files (the best's, or the best deployable one's with its
  config) or is not reported as written.
- `--target vllm` searches only what vLLM can launch (pruning's `target` rule): every
  evaluated trial exports for vLLM, and so does the answer."""

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
    out = tmp_path_factory.mktemp("export")
    for engine in ENGINES:
        why = blocking_for(cfg, gpn, engine, "vllm")
        res = export(cfg, target, engine, out / engine, backend="vllm")
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
    s = _tune(small_recipe, tmp_path / "out")
    gpn = 8
    best = parse_config(s["best_config"])
    evals = _evaluated(tmp_path / "out")
    for engine, e in s["engines"].items():
        why = blocking_for(best, gpn, engine, "vllm")
        assert e["deploys"] == (not why)
        if why:
            can = [float(t.value) for t in evals if float(t.value or 0) > 0 and not
                   blocking_for(parse_config(t.user_attrs["config"]), gpn, engine, "vllm")]
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
    for t in evals:
        assert not blocking_for(parse_config(t.user_attrs["config"]), 8, "vllm", "vllm")
    assert s["engines"]["vllm"]["deploys"] and s["deploy"]["written"]
    assert (tmp_path / "out" / "deploy" / "vllm" / "launch.sh").exists()
