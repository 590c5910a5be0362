"""examples/mixed-l40s-h100.yaml tunes (few trials, short probes) and its answer names each
pool's GPU type and its cost per hour; its deployment exports by type (each node one type)."""

from __future__ import annotations

import json

import pytest
import yaml

from hastune.config import parse_config
from tests.tune.conftest import ROOT, hastune


def test_the_mixed_example_names_each_pools_gpu_type_and_its_cost(tmp_path):
    data = yaml.safe_load((ROOT / "examples" / "mixed-l40s-h100.yaml").read_text())
    data["workload"]["requests"] = 300
    data["evaluator"] = {"min_span": 2.0}
    data["search_space"] = str(ROOT / "examples" / "spaces" / "epd-tp12.yaml")
    rec = tmp_path / "mixed.yaml"
    rec.write_text(yaml.safe_dump(data))
    r = hastune("tune", str(rec), "--trials", "6", "--out", str(tmp_path / "out"),
                "--no-plots", "--json", timeout=600)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["objective"] == "goodput_per_dollar" and s["goodput_rps"] > 0
    cfg = parse_config(s["best_config"])
    prices = {e["gpu"]: e["price_per_gpu_hour"] for e in data["cluster"]["inventory"]}
    by_type = cfg.gpus_by_type(data["cluster"]["inventory"][0]["gpu"])
    assert s["cost_per_hour"] == pytest.approx(sum(n * prices[t] for t, n in by_type.items()))
    assert s["goodput_per_dollar"] == pytest.approx(s["goodput_rps"] * 3600 / s["cost_per_hour"])
    target = yaml.safe_load((tmp_path / "out" / "best_config.yaml").read_text())["target"]
    pools = [p for p in target["pools"] if p["instances"]]
    assert pools and all(p["gpu"] in prices for p in pools)
    assert {p["gpu"] for p in pools} == set(by_type)
    assert target["cost_per_hour"] == pytest.approx(s["cost_per_hour"])
