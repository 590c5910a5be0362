"""The cost objective (issue 37): prices make cost_per_hour and goodput_per_dollar, tune with
objective goodput_per_dollar maximises goodput × 3600 / cost, and its pruning and early stop,
converted per configuration, still find the exhaustive search's best."""

from __future__ import annotations

import json

import optuna
import pytest
import yaml

from hastune.config import parse_config
from hastune.cost import Objective, cost_fields, cost_per_hour, goodput_per_dollar
from hastune.evaluators.sim import Evaluation
from hastune.recipe import Recipe, load_recipe
from hastune.tune import run
from hastune.tune.grid import run_grid
from tests.generated import random_recipe
from tests.tune.conftest import hastune

PRICE = 2.5


@pytest.fixture
def priced_recipe(tmp_path):
    """llama-30b on up to 4 A100s, nodg replicas of tp 1 or 2 (fewer GPUs than the budget
    allowed, so that goodput and goodput per dollar can disagree), priced."""
    (tmp_path / "nodg.yaml").write_text(yaml.safe_dump({
        "architecture": "nodg", "budget": "at_most",
        "params": {"tp": [1, 2], "pp": [1], "replicas": {"low": 1},
                   "chunk_tokens": [None, 512]}}))
    data = {"name": "priced", "model": "llama-30b",
            "cluster": {"inventory": [{"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 4,
                                       "price_per_gpu_hour": PRICE}],
                        "intra_node": "nvlink-a100", "inter_node": "ib-200g"},
            "workload": {"preset": "alpaca", "requests": 150},
            "evaluator": {"min_span": 2.0},
            "architecture": "nodg", "search_space": "nodg.yaml",
            "objective": "goodput_per_dollar"}
    p = tmp_path / "priced.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_cost_arithmetic():
    rec = Recipe.model_validate({
        "model": "llama-30b", "workload": {"preset": "alpaca"},
        "cluster": {"gpu": "a100-80gb", "gpus": 8, "price_per_gpu_hour": 1.75}})
    for n in (1, 3, 8):
        cfg = parse_config({"architecture": "nodg", "replicas": n, "tp": 1, "pp": 1})
        assert cost_per_hour(rec.cluster, cfg) == pytest.approx(n * 1.75)
        f = cost_fields(rec.cluster, cfg, 12.0)
        assert f["goodput_per_dollar"] == pytest.approx(12.0 * 3600 / (n * 1.75))
        obj = Objective(rec)  # objective goodput: the value is the goodput
        assert obj.value(cfg, 12.0) == obj.goodput(cfg, 12.0) == 12.0
        per = Objective(rec.model_copy(update={"objective": "goodput_per_dollar"}))
        assert per.value(cfg, 12.0) == pytest.approx(f["goodput_per_dollar"])
        assert per.goodput(cfg, per.value(cfg, 12.0)) == pytest.approx(12.0)
    unpriced = rec.model_copy(update={"cluster": rec.cluster.model_copy(
        update={"price_per_gpu_hour": None})})
    assert cost_per_hour(unpriced.cluster, cfg) is None
    assert cost_fields(unpriced.cluster, cfg, 12.0) == {}
    assert goodput_per_dollar(1.0, None) is None and goodput_per_dollar(1.0, 0.0) is None


@pytest.mark.parametrize("seed", [3, 11])
def test_one_type_inventory_evaluates_as_the_old_form(seed):
    """The same recipe with its cluster written as a one-entry inventory: the same goodput
    search, probe for probe."""
    from tests.generated import space

    old = random_recipe(seed, ("nodg", "padg"), requests=(150, 200))
    c = old.cluster
    inv = old.model_copy(update={"cluster": type(c).model_validate({
        "inventory": [{"gpu": c.gpu, "nodes": 1, "gpus_per_node": c.gpus_per_node}],
        "gpus": c.gpus, "intra_node": c.intra_node.model_dump(),
        "inter_node": c.inter_node.model_dump()})})
    assert inv.cluster.inventory is not None and old.cluster.inventory is None
    a, b = Evaluation(old), Evaluation(inv)
    cfg = next(cf for cf in space(old.architectures[0]).configs(c.gpus) if a.runnable(cf))
    ra, rb = a.goodput(cfg), b.goodput(cfg)
    assert ra.as_dict() == rb.as_dict()


def _study(out) -> list[optuna.trial.FrozenTrial]:
    st = optuna.load_study(study_name=None, storage=f"sqlite:///{out}/study.db")
    return [t for t in st.get_trials(deepcopy=False) if t.user_attrs.get("evaluated")]


def test_tune_maximises_goodput_per_dollar(priced_recipe, tmp_path):
    res = run(priced_recipe, trials=40, out=str(tmp_path / "t"), plots=False, early_stop=True,
              workers=1)
    s = res.summary
    assert s["objective"] == "goodput_per_dollar" and s["meets_slo"]
    evals = _study(tmp_path / "t")

    def per_dollar(t) -> float:  # from the goodput and the GPUs, not from the study's value
        return t.user_attrs["goodput_rps"] * 3600 / (t.user_attrs["gpus"] * PRICE)

    best = max(evals, key=per_dollar)
    assert s["best_config"] == best.user_attrs["config"]
    assert s["goodput_per_dollar"] == pytest.approx(per_dollar(best))
    assert s["cost_per_hour"] == pytest.approx(parse_config(s["best_config"]).gpus * PRICE)
    for t in evals:
        assert t.value == pytest.approx(per_dollar(t))
    rows = s["candidates"]
    assert rows and all(r["cost_per_hour"] == pytest.approx(r["gpus"] * PRICE) for r in rows)
    assert "goodput_per_dollar" in (tmp_path / "t" / "candidates.csv").read_text().split("\n")[0]
    target = yaml.safe_load((tmp_path / "t" / "best_config.yaml").read_text())["target"]
    assert target["cost_per_hour"] == pytest.approx(s["cost_per_hour"])
    assert target["goodput_per_dollar"] == pytest.approx(s["goodput_per_dollar"])

    # pruning (bounds scaled by cost) and early stop (the incumbent converted per
    # configuration) are sound: the best per dollar of the exhaustive search, within the
    # search's tolerance, once the tuner has evaluated every survivor
    assert s["stopped"].startswith("space"), s["stopped"]
    grid = run_grid(priced_recipe)
    assert grid["objective"] == "goodput_per_dollar"
    top = grid["results"][0]
    assert top["goodput_per_dollar"] == max(r["goodput_per_dollar"] for r in grid["results"])
    tol = load_recipe(priced_recipe).evaluator.tolerance
    assert s["goodput_per_dollar"] >= (1 - tol) * top["goodput_per_dollar"]


def test_evaluate_reports_cost(priced_recipe, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"kind": "deployment", "architecture": "nodg",
                                   "replicas": 1, "tp": 2, "pp": 1}))
    r = hastune("evaluate", str(priced_recipe), "-c", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["cost_per_hour"] == pytest.approx(2 * PRICE)
    assert d["goodput_per_dollar"] == pytest.approx(d["goodput_rps"] * 3600 / (2 * PRICE))
    unpriced = yaml.safe_load(priced_recipe.read_text())
    del unpriced["cluster"]["inventory"][0]["price_per_gpu_hour"]
    del unpriced["objective"]
    p = tmp_path / "unpriced.yaml"
    p.write_text(yaml.safe_dump(unpriced))
    d = json.loads(hastune("evaluate", str(p), "-c", str(cfg), "--json").stdout)
    assert "cost_per_hour" not in d and "goodput_per_dollar" not in d
