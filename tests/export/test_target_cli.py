"""best_config.yaml says what it is for; export and serve refuse another model or GPU; tune
writes candidates.csv and deploy/<engine>/."""

from __future__ import annotations

import csv
import json

import yaml

from hastune.config import load_config, parse_config
from hastune.export.target import gpu_matches, read_target, recipe_mismatch
from hastune.recipe import load_recipe
from tests.export.conftest import ROOT, hastune, small


def test_tune_writes_a_self_describing_config(tuned):
    d = tuned["audio-ultravox-8xa100"]
    t = read_target(d / "best_config.yaml")
    summary = json.loads((d / "summary.json").read_text())
    cfg = load_config(d / "best_config.yaml")  # the knobs parse as before
    assert t is not None and t.model == "ultravox-v0.6-27b" and t.gpu == "a100-80gb"
    assert t.gpus == cfg.gpus == summary["best_gpus"]
    assert abs(t.goodput_rps - summary["goodput_rps"]) < 1e-5 and t.slo.ttft_s == 1.0
    assert [p.role for p in t.pools] == ["encode", "prefill", "decode"]
    assert sum(p.instances * p.tp * p.pp for p in t.pools) == cfg.gpus
    assert summary["deploy"]["engine"] == "vllm"
    assert (d / "deploy" / "vllm" / "README.md").exists()
    # evaluate still takes it
    (d.parent / "again").mkdir(exist_ok=True)
    rec = small("audio-ultravox-8xa100", d.parent / "again")
    r = hastune("evaluate", str(rec), "--config", str(d / "best_config.yaml"), "--json")
    assert r.returncode == 0, r.stderr


def test_candidates_are_ranked_distinct_and_in_the_summary(tuned):
    for d in tuned.values():
        rows = list(csv.DictReader((d / "candidates.csv").open()))
        summary = json.loads((d / "summary.json").read_text())
        assert len(rows) == len(summary["candidates"]) >= 1
        assert len({r["config"] for r in rows}) == len(rows)
        by_arch = {}
        for r in rows:
            by_arch.setdefault(r["architecture"], []).append(r)
        for arch_rows in by_arch.values():
            g = [float(r["goodput_rps"]) for r in arch_rows]
            assert g == sorted(g, reverse=True) and len(g) <= 5
            assert [int(r["rank"]) for r in arch_rows] == list(range(1, len(g) + 1))
        top = summary["candidates"][0]
        assert abs(top["goodput_per_gpu"] * top["gpus"] - top["goodput_rps"]) < 1e-4
        slo = summary["slo"]
        for c in summary["candidates"]:
            assert c["ttft_p90_s"] is not None  # recorded for every evaluated trial
            assert abs(c["ttft_margin"] - (slo["ttft_s"] - c["ttft_p90_s"]) / slo["ttft_s"]) \
                < 1e-4
            assert c["ttft_margin"] >= 0 and c["tpot_margin"] >= 0  # at goodput: within


def test_old_config_without_target_still_parses_and_export_asks_for_the_recipe(tmp_path):
    old = ROOT / "examples" / "configs" / "epd-static-2-2-4.yaml"
    assert read_target(old) is None
    load_config(old)
    r = hastune("export", str(old), "--engine", "vllm", "--out", str(tmp_path / "a"))
    assert r.returncode == 2 and "--recipe" in r.stderr and "Traceback" not in r.stderr
    r = hastune("export", str(old), "--engine", "vllm", "--out", str(tmp_path / "a"),
                "--recipe", str(ROOT / "examples" / "image-llava-8xa100.yaml"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a" / "launch.sh").exists()


def test_export_refuses_another_model_or_gpu(tuned, tmp_path):
    cfg = tuned["image-llava-8xa100"] / "best_config.yaml"
    data = yaml.safe_load((ROOT / "examples" / "image-llava-8xa100.yaml").read_text())
    data["cluster"]["gpu"] = "h100-80gb"
    other = tmp_path / "h100.yaml"
    other.write_text(yaml.safe_dump(data))
    r = hastune("export", str(cfg), "--engine", "sglang", "--recipe", str(other), "--json")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = json.loads(r.stdout)
    assert err["field"] == "cluster.gpu" and "a100-80gb" in err["message"]
    t = read_target(cfg)
    assert recipe_mismatch(t, load_recipe(ROOT / "examples" / "audio-ultravox-8xa100.yaml"))[0] \
        == "model"
    assert recipe_mismatch(t, load_recipe(ROOT / "examples" / "image-llava-8xa100.yaml")) is None


def test_serve_refuses_a_config_tuned_for_a_27b_model_on_gpus(tuned):
    """Done when: serve of the tuned 27B example on this machine exits 2 with the reason and
    the fix, no traceback."""
    cfg = tuned["audio-ultravox-8xa100"] / "best_config.yaml"
    r = hastune("serve", str(cfg), timeout=120)
    assert r.returncode == 2, r.stderr
    assert "ultravox-v0.6-27b" in r.stderr and "a100-80gb" in r.stderr
    assert "hastune export" in r.stderr and "Traceback" not in r.stderr


def test_blocked_export_says_why_and_closest_says_what_changed(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    cfg = parse_config({"architecture": "padg", "instances": 4, "tp": 2})
    from hastune.export.target import build_target, dump_target

    t = build_target(load_recipe(ROOT / "examples" / "image-llava-8xa100.yaml"), cfg, 3.0)
    text = yaml.safe_dump({"kind": "deployment", "architecture": "padg", "instances": 4,
                           "tp": 2, "target": dump_target(t)})
    (d / "best_config.yaml").write_text(text)
    r = hastune("export", str(d / "best_config.yaml"), "--engine", "vllm")
    assert r.returncode == 2 and "temporal" in r.stdout + r.stderr
    assert "temporal" in (d / "deploy" / "vllm" / "README.md").read_text()
    r = hastune("export", str(d / "best_config.yaml"), "--engine", "vllm", "--closest")
    assert r.returncode == 0 and "closest" in r.stdout
    assert "Closest expressible" in (d / "deploy" / "vllm" / "README.md").read_text()


def test_gpu_names():
    assert gpu_matches("a100-80gb", "NVIDIA A100-SXM4-80GB")
    assert gpu_matches("h100-80gb", "NVIDIA H100 80GB HBM3")
    assert not gpu_matches("h100-80gb", "NVIDIA A100-SXM4-80GB")
    assert not gpu_matches("a100-80gb", "a CPU")


def test_target_round_trips_and_a_changed_config_json_is_refused(tmp_path):
    import shutil

    from hastune.export.target import build_target, dump_target, parse_target

    cfg = parse_config({"architecture": "nodg", "replicas": 2, "tp": 2})
    for ex in ("llama31-8b-h100-fp8", "image-llava-8xa100", "qwen25vl-7b-h200"):
        rec = load_recipe(ROOT / "examples" / f"{ex}.yaml")
        t = build_target(rec, cfg, 3.0)
        assert parse_target({"target": dump_target(t)}) == t
        assert recipe_mismatch(t, rec) is None
    # a config-path model: the same path with another config.json is another model
    shutil.copytree(ROOT / "examples" / "models" / "llama-3.1-8b", tmp_path / "models" /
                    "llama-3.1-8b")
    data = yaml.safe_load((ROOT / "examples" / "llama31-8b-h100-fp8.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    rec = load_recipe(tmp_path / "r.yaml")
    t = build_target(rec, cfg, 3.0)
    assert t.model_config_sha256 and recipe_mismatch(t, rec) is None
    cj = tmp_path / "models" / "llama-3.1-8b" / "config.json"
    cj.write_text(cj.read_text().replace('"num_hidden_layers": 32', '"num_hidden_layers": 30'))
    bad = recipe_mismatch(t, load_recipe(tmp_path / "r.yaml"))
    assert bad is not None and bad[0] == "model" and "differs" in bad[1]


def test_export_input_errors_are_one_line(tuned, tmp_path):
    cfg = tuned["video-qwen-8xa100"] / "best_config.yaml"
    (tmp_path / "file").write_text("")
    for args in (["--engine", "vllm", "--out", str(tmp_path / "file"), "--closest"],
                 ["--engine", "trtllm"], ["--engine", "dynamo", "--backend", "trt"]):
        r = hastune("export", str(cfg), *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().startswith("error:") and "Fix:" in r.stderr
