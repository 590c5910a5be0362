"""Profiles on demand (issue 12): recipes naming a config path, a precision and an engine get a
profile built from aiconfigurator-core's kernel tables on first use, cached, and reported.

Needs the kernels extra (installed in CI; without it these fail there, as they should)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.calibrate import ondemand
from hastune.calibrate.build import TP_DEGREES, UTILISATION
from hastune.errors import InputError
from hastune.evaluators.profile import resolve_profile
from hastune.model_ref import Engine, Precision
from hastune.models import load_model
from hastune.profile import load_profile
from hastune.recipe import Recipe, load_recipe

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
NINE = sorted(p.name for p in MODELS.iterdir() if (p / "config.json").is_file())
GPUS = {"h100-80gb": 80 * 2**30, "h200-141gb": 151397597184}   # the systems' mem_capacity
QUICK = {"min_span": 5.0, "min_requests": 300, "extend": 2.0}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """Every test caches in a folder of its session, never in ~/.cache."""
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def write_recipe(tmp: Path, model: str | Path, **over) -> Path:
    data = {"kind": "recipe", "name": "t", "model": str(model),
            "cluster": {"gpu": "h100-80gb", "gpus": 2, "gpus_per_node": 8,
                        "intra_node": "nvlink-h100"},
            "workload": {"requests": 200, "prompt_tokens": 256, "output_tokens": 64},
            "slo": {"ttft_s": 2.0, "tpot_s": 0.1}, "architecture": "nodg",
            "evaluator": dict(QUICK)}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    p = tmp / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


# --- the matrix: nine configs x two GPUs x two precisions ----------------------------------

@pytest.mark.parametrize("gpu", list(GPUS))
@pytest.mark.parametrize("model", NINE)
def test_every_config_builds_or_says_why_it_cannot(model, gpu):
    """Each (config, GPU, precision) builds a profile that validates, or is refused with one
    InputError naming the weight bytes and the memory. Refused exactly where the weights per
    GPU at TP 8 leave no room (checked against the architecture's own byte count, not the
    builder's): never refused when they take under half the usable memory, never built
    when they exceed it."""
    arch = load_model(MODELS / model)
    usable = GPUS[gpu] * UTILISATION
    weights = {}
    for prec in ("bf16", "fp8"):
        p = Precision(weights=prec, kv_cache=prec)
        per_gpu = arch.llm.weight_bytes(max(TP_DEGREES), prec)
        try:
            got = ondemand.ensure(ondemand.Request(arch, gpu, p))
        except InputError as exc:
            assert "does not fit" in exc.problem and f"its {prec} weights are" in exc.problem
            assert "GB usable" in exc.problem and exc.fix
            assert per_gpu > 0.5 * usable, (model, gpu, prec, per_gpu / usable)
            continue
        prof = load_profile(got.path)
        # a model larger than one node is profiled over the fewest pipeline stages that hold
        # it: 1 exactly when TP 8 alone leaves room
        assert (prof.min_pp > 1) == (per_gpu >= usable), (model, gpu, prec, prof.min_pp)
        assert per_gpu / prof.min_pp < usable, (model, gpu, prec, prof.min_pp)
        assert prof == got.profile and prof.gpu == gpu and prof.model == arch.name
        assert prof.name == arch.name + f"@{gpu}" + ("" if prec == "bf16" else "+fp8-kvfp8")
        assert (prof.encode.per_token_s > 0) == (arch.encoder is not None)
        weights[prec] = prof
    if len(weights) == 2:   # fp8 weights take fewer bytes (embeddings and norms stay bf16)
        tp = max(set(weights["fp8"].tp_degrees) & set(weights["bf16"].tp_degrees))
        w8, w16 = (weights[p].memory_at(tp).weight_bytes for p in ("fp8", "bf16"))
        assert w8 < 0.75 * w16, (model, gpu, w8 / w16)


def test_deepseek_v3_in_bf16_on_h100_is_refused_naming_why(tmp_path):
    """1,342 GB of bf16 weights: one node of 8 H100 cannot hold them; the refusal names the
    GPUs it needs (tp 8 × the pipeline stages that hold it)."""
    rec = load_recipe(write_recipe(tmp_path, MODELS / "deepseek-v3",
                                   precision={"weights": "bf16"}))
    with pytest.raises(InputError) as e:
        resolve_profile(rec)
    assert e.value.file == str(tmp_path / "recipe.yaml") and e.value.field == "cluster.gpus"
    assert "deepseek-v3" in e.value.problem and "does not fit on" in e.value.problem
    assert "pipeline stages" in e.value.problem and "cluster.gpus" in e.value.fix


def test_a_model_larger_than_a_node_runs_over_pipeline_stages(tmp_path):
    """DeepSeek-V3 bf16 on 16 H200 (examples/deepseek-v3-16xh200-bf16.yaml): the profile
    needs 2 stages; every configuration with fewer is removed by the memory rule, and the
    simulator runs the tp 8 × pp 2 one."""
    from hastune.config import parse_config
    from hastune.evaluators.sim import Evaluation
    from hastune.prune import Bounds

    rec = load_recipe(ROOT / "examples" / "deepseek-v3-16xh200-bf16.yaml")
    ev = Evaluation(rec, requests=300)
    assert ev.profile.min_pp == 2
    two = parse_config({"architecture": "nodg", "tp": 8, "pp": 2, "replicas": 1})
    one = parse_config({"architecture": "nodg", "tp": 8, "pp": 1, "replicas": 2})
    b = Bounds(rec, ev.profile, ev.requests)
    assert b.memory_ok(two) and not b.memory_ok(one)
    run = ev.run(two, 1.0)
    assert run.summary(rec.slo)["completed"] > 0


# --- tune end to end ------------------------------------------------------------------------

def _tune(recipe: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-m", "hastune", "tune", str(recipe), "--trials", "3",
                        "--json", "--no-plots", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env=os.environ.copy())
    assert r.returncode in (0, 3), r.stderr
    return r, json.loads(r.stdout)


TUNES = [  # (config, gpu, precision, architecture, GPUs, modality payload)
    ("llama-3.1-8b", "h100-80gb", {"weights": "fp8", "kv_cache": "fp8"}, "nodg", 2, None),
    ("mixtral-8x7b", "h200-141gb", "fp8", "padg", 2, None),
    ("qwen2.5-vl-7b", "h200-141gb", None, "epd", 3,
     {"scheme": "patch-14-merge-2", "resolution": [448, 448]}),
]


@pytest.mark.parametrize("model,gpu,precision,arch,gpus,image", TUNES)
def test_tune_runs_end_to_end_building_the_profile(tmp_path, monkeypatch, model, gpu,
                                                   precision, arch, gpus, image):
    over: dict = {"cluster": {"gpu": gpu, "gpus": gpus}, "architecture": arch}
    if precision is not None:
        over["precision"] = precision
    if image is not None:
        over["workload"] = {"requests": 200, "prompt_tokens": 32, "output_tokens": 64,
                            "mix": {"image": 1.0}, "modalities": {"image": image}}
    terms = model == "llama-3.1-8b"  # the engine terms on for one: its summary records them
    over["engine"] = {"name": "vllm", "terms": terms}
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "cache"))   # a fresh cache
    r, s = _tune(write_recipe(tmp_path, MODELS / model, **over), tmp_path / "out")
    assert "hastune: built profile" in r.stderr and str(tmp_path / "cache") in r.stderr
    src = s["profile_source"]
    assert src["kind"] == "built" and Path(src["path"]).is_file()
    assert src["kernels"].startswith("aiconfigurator-core")
    assert s["engine_terms"]["on"] == terms
    # the caveats go into the deployment file's header too (terms off: the kernels alone;
    # on, vLLM's own: at most the front end's wait past the clients it was fitted on)
    head = (tmp_path / "out" / "best_config.yaml").read_text()
    said = [ln[len("# caveat: "):] for ln in head.splitlines() if ln.startswith("# caveat: ")]
    assert said == s["caveats"]
    assert any(c.startswith("engine terms off") for c in said) == (not terms)
    # the terms' measured error in this result's regime (hastune.regimes), with them on
    assert any(c.startswith("measured error, vLLM") for c in said) == terms
    if terms:
        assert all("in flight per instance" in c for c in said
                   if not c.startswith("measured error"))
    if terms:  # vLLM's own H100 terms
        assert s["engine_terms"]["fitted_for"] == gpu
    assert s["evaluations"] >= 1 and s["best_config"]["architecture"] == arch
    assert s["goodput_rps"] > 0
    again = _cli("validate", str(tmp_path / "recipe.yaml"))   # the same profile, cached
    assert again.returncode == 0 and "built profile" not in again.stderr, again.stderr
    assert Path(src["path"]).name in os.listdir(tmp_path / "cache" / "profiles")


EXAMPLES = ("llama31-8b-h100-fp8.yaml", "qwen25vl-7b-h200.yaml", "mixtral-8x7b-h100.yaml",
            "deepseek-v3-h200-fp8.yaml")


def test_shipped_examples_with_config_paths_validate(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hastune", "validate", "--json",
                        *(f"examples/{n}" for n in EXAMPLES)],
                       capture_output=True, text=True, cwd=ROOT, env=os.environ.copy())
    assert r.returncode == 0, r.stderr + r.stdout
    for name in EXAMPLES:
        rec = load_recipe(ROOT / "examples" / name)
        assert not Path(rec.model).is_absolute() and (rec.base_dir / rec.model).is_dir()


# --- the cache ------------------------------------------------------------------------------

def _llama_recipe(tmp: Path, **over) -> Recipe:
    return load_recipe(write_recipe(tmp, MODELS / "llama-3.1-8b", **over))


def test_second_use_reads_the_cache_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "c"))
    rec = _llama_recipe(tmp_path, precision="fp8")
    prof, src = resolve_profile(rec, quiet=True)
    assert src.kind == "built" and Path(src.path).parent == tmp_path / "c" / "profiles"

    def no_build(*a, **k):
        raise AssertionError("rebuilt")

    monkeypatch.setattr(ondemand, "build", no_build)
    prof2, src2 = resolve_profile(rec)
    assert src2.kind == "cache" and src2.path == src.path and prof2 == prof


def test_a_corrupt_cache_file_is_rebuilt_never_executed(tmp_path, monkeypatch):
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "c"))
    rec = _llama_recipe(tmp_path)
    _, src = resolve_profile(rec, quiet=True)
    marker = tmp_path / "pwned"
    for bad in (f"!!python/object/apply:os.system ['touch {marker}']\n",
                "kind: profile\nname: [unclosed\n", "", "\x00\x01binary"):
        Path(src.path).write_text(bad)
        _, again = resolve_profile(rec, quiet=True)
        assert again.kind == "built" and not marker.exists()
        assert load_profile(src.path).name == "llama-3.1-8b@h100-80gb"


def _ensure_in_child(args):
    cache, model = args
    os.environ["HASTUNE_CACHE"] = cache
    got = ondemand.ensure(ondemand.Request(load_model(model), "h200-141gb",
                                           Precision(weights="fp8")))
    return got.built, str(got.path), got.profile.model_dump_json()


def test_concurrent_writers_build_once_and_leave_one_whole_file(tmp_path):
    cache = str(tmp_path / "c")
    with mp.get_context("spawn").Pool(4) as pool:
        res = pool.map(_ensure_in_child, [(cache, str(MODELS / "gemma-2-9b"))] * 4)
    assert sum(built for built, _, _ in res) == 1        # the lock: one builds, three read
    assert len({p for _, p, _ in res}) == 1 and len({d for _, _, d in res}) == 1
    files = sorted(x.name for x in (tmp_path / "c" / "profiles").iterdir())
    assert [f for f in files if f.endswith(".yaml")] == [Path(res[0][1]).name]
    assert not [f for f in files if f.endswith(".tmp")]


def test_write_atomic_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "p.yaml"
    target.write_text("old")

    def boom(*a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        ondemand.write_atomic(target, "new" * 1000)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["p.yaml"]


def test_hastune_cache_is_honoured_and_the_default_is_under_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "mine"))
    assert ondemand.cache_dir() == tmp_path / "mine" / "profiles"
    monkeypatch.delenv("HASTUNE_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert ondemand.cache_dir() == Path.home() / ".cache" / "hastune" / "profiles"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ondemand.cache_dir() == tmp_path / "xdg" / "hastune" / "profiles"


def test_an_unwritable_cache_is_one_input_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "file"))
    with pytest.raises(InputError) as e:
        resolve_profile(_llama_recipe(tmp_path), quiet=True)
    assert e.value.field == "$HASTUNE_CACHE"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["hidden_size", "num_hidden_layers", "intermediate_size",
                        "num_key_value_heads", "vocab_size"]),
       st.sampled_from([2, 4]), st.booleans())
def test_the_key_follows_what_the_profile_depends_on(key, factor, reformat):
    """A changed figure of the config, GPU, precision or engine is another key; the same
    config written differently (indentation, key order) or elsewhere is the same key."""
    import tempfile

    cfg = json.loads((MODELS / "llama-3.1-8b" / "config.json").read_text())
    with tempfile.TemporaryDirectory() as d:
        a = Path(d) / "a" / "llama-3.1-8b" / "config.json"   # the same name, elsewhere
        a.parent.mkdir(parents=True)
        a.write_text(json.dumps(dict(reversed(cfg.items())) if reformat else cfg,
                                indent=4 if reformat else 2))
        base = ondemand.Request(load_model(MODELS / "llama-3.1-8b"), "h100-80gb")
        same = ondemand.Request(load_model(a.parent), "h100-80gb")
        assert same.key() == base.key() and same.filename() == base.filename()
        changed = {**cfg, key: cfg[key] * factor if key != "num_key_value_heads" else 4}
        b = Path(d) / "b" / "llama-3.1-8b" / "config.json"
        b.parent.mkdir(parents=True)
        b.write_text(json.dumps(changed))
        other = ondemand.Request(load_model(b), "h100-80gb")
        keys = {other.key(), same.key(),
                ondemand.Request(same.arch, "h200-141gb").key(),
                ondemand.Request(same.arch, "h100-80gb", Precision(weights="fp8")).key(),
                ondemand.Request(same.arch, "h100-80gb", Precision(kv_cache="fp8")).key(),
                ondemand.Request(same.arch, "h100-80gb", engine=Engine(name="sglang")).key()}
        assert len(keys) == 6


# --- refusals -------------------------------------------------------------------------------

def test_without_the_kernels_extra_one_input_error_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "aiconfigurator_core" else real(n, *a))
    monkeypatch.setenv("HASTUNE_CACHE", str(tmp_path / "empty"))
    with pytest.raises(InputError) as e:
        resolve_profile(_llama_recipe(tmp_path), quiet=True)
    assert e.value.file == str(tmp_path / "recipe.yaml") and e.value.field == "model"
    assert e.value.fix == "pip install 'hastune[kernels]'"
    assert "no shipped profile for llama-3.1-8b on h100-80gb" in e.value.problem


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hastune", *args], capture_output=True,
                          text=True, cwd=ROOT, env=os.environ.copy())


@pytest.mark.parametrize("edit,key", [
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "quant_method"),
    ({"hidden_act": "relu"}, "hidden_act"),
    ({"model_type": "mamba"}, "model_type"),
    ({"num_hidden_layers": "32"}, "num_hidden_layers"),
])
def test_a_config_with_an_unsupported_key_exits_2_naming_recipe_field_and_key(tmp_path, edit,
                                                                               key):
    cfg = json.loads((MODELS / "llama-3.1-8b" / "config.json").read_text())
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({**cfg, **edit}))
    rec = write_recipe(tmp_path, "m")   # relative to the recipe
    r = _cli("validate", str(rec))
    assert r.returncode == 2, r.stderr
    assert f"{rec}: model: " in r.stderr and key in r.stderr, r.stderr
    assert str(tmp_path / "m" / "config.json") in r.stderr
    if key != "quant_method":
        return   # tune goes the same way (Evaluation): once is enough
    t = _cli("tune", str(rec), "--trials", "1", "--json", "--out", str(tmp_path / "o"))
    out = json.loads(t.stdout)
    assert t.returncode == 2 and out["file"] == str(rec) and out["field"] == "model"
    assert key in out["error"]


@pytest.mark.parametrize("field,value,where", [
    ("precision", "fp4", "precision"), ("precision", {"weights": "int8"}, "precision.weights"),
    ("precision", {"kv": "fp8"}, "precision.kv"), ("engine", "tensorrt", "engine"),
    ("engine", {"name": "vllm", "version": "../x"}, "engine.version"),
])
def test_bad_precision_or_engine_is_refused_naming_the_field(tmp_path, field, value, where):
    r = _cli("validate", str(write_recipe(tmp_path, MODELS / "llama-3.1-8b",
                                          **{field: value})))
    assert r.returncode == 2 and where in r.stderr, r.stderr


def test_image_requests_for_a_text_only_config_are_refused(tmp_path):
    rec = _llama_recipe(tmp_path, architecture="epd", workload={
        "mix": {"image": 0.5, "text": 0.5},
        "modalities": {"image": {"scheme": "tokens", "encoder_tokens": 576}}})
    with pytest.raises(InputError) as e:
        resolve_profile(rec, quiet=True)
    assert e.value.field == "workload.mix" and "text-only" in e.value.problem
    assert "image" in e.value.problem


def test_unknown_gpu_names_cluster_gpu_and_the_names_there_are(tmp_path):
    with pytest.raises(InputError) as e:
        resolve_profile(_llama_recipe(tmp_path, cluster={"gpu": "h300-1tb"}), quiet=True)
    assert e.value.field == "cluster.gpu" and "b200-180gb" in e.value.fix
    assert "gb200" in e.value.fix and "h100-80gb" in e.value.fix


# --- recipe fields and the shipped profiles -------------------------------------------------

def test_precision_and_engine_short_forms_and_defaults(tmp_path):
    rec = _llama_recipe(tmp_path, precision="fp8", engine="sglang")
    assert rec.precision == Precision(weights="fp8", kv_cache="bf16")
    assert rec.engine == Engine(name="sglang")
    plain = _llama_recipe(tmp_path)
    dump = plain.model_dump(mode="json")
    assert "precision" not in dump and "engine" not in dump   # old recipes hash as before
    assert "precision" in rec.model_dump(mode="json")


def test_checkpoint_precision_is_the_default(tmp_path):
    """DeepSeek-V3's config is an fp8 checkpoint: without precision its fp8 weights are used
    (and so it fits 8 H200), with precision bf16 it does not fit."""
    rec = load_recipe(write_recipe(tmp_path, MODELS / "deepseek-v3",
                                   cluster={"gpu": "h200-141gb", "gpus": 8}))
    _, src = resolve_profile(rec, quiet=True)
    assert src.precision == Precision(weights="fp8")


def test_shipped_names_keep_their_shipped_profiles_and_build_the_rest(tmp_path):
    rec = load_recipe(ROOT / "examples" / "image-llava-8xa100.yaml")
    prof, src = resolve_profile(rec)
    assert src.kind == "shipped" and prof.path == str(ROOT / "profiles/a100-80gb/"
                                                       "llava-v1.6-34b.yaml")
    h100 = rec.model_copy(update={"cluster": rec.cluster.model_copy(
        update={"gpu": "h100-80gb"})})
    assert resolve_profile(h100)[1].kind == "shipped"
    fp8 = h100.model_copy(update={"precision": Precision(weights="fp8")})
    prof8, src8 = resolve_profile(fp8, quiet=True)
    assert src8.kind in ("built", "cache") and prof8.name == "llava-v1.6-34b@h100-80gb+fp8"
    assert prof8.memory.weight_bytes < resolve_profile(h100)[0].memory.weight_bytes
    # A100's tables have no fp8 GEMM: a clear refusal naming what there is
    with pytest.raises(InputError) as e:
        resolve_profile(rec.model_copy(update={"precision": Precision(weights="fp8")}))
    assert e.value.field == "model" and "fp8" in e.value.problem and "bf16" in e.value.fix


def test_system_names_and_their_hastune_names_build_the_same_profile(tmp_path):
    arch = load_model(MODELS / "mistral-7b-v0.3")
    a = ondemand.ensure(ondemand.Request(arch, "b200-180gb", Precision(weights="fp8")))
    b = ondemand.ensure(ondemand.Request(arch, "b200_sxm", Precision(weights="fp8")))
    assert a.path == b.path and a.profile.gpu == "b200-180gb"
    assert a.profile.fit.calibration == "b200_sxm"
    assert a.profile.memory.gpu_bytes == 193273528320     # systems/b200_sxm.yaml


def test_profile_build_writes_a_profile_that_profile_check_reads(tmp_path):
    out = tmp_path / "p.yaml"
    r = _cli("profile", "build", "--model", str(MODELS / "mistral-7b-v0.3"), "--gpu",
             "h100-80gb", "--precision", "fp8", "--kv-cache", "fp8", "--engine", "sglang",
             "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    prof = load_profile(out)
    assert s["name"] == prof.name == "mistral-7b-v0.3@h100-80gb+fp8-kvfp8+sglang"
    assert s["tp_degrees"] == prof.tp_degrees and "SGLang" in prof.source
    c = _cli("profile", "check", str(out), "--json")
    assert c.returncode in (0, 4), c.stderr
    assert json.loads(c.stdout)["profile"] == prof.name
    bad = _cli("profile", "build", "--model", str(MODELS / "deepseek-v3"), "--gpu",
               "h100-80gb", "--precision", "bf16", "--out", str(tmp_path / "d.yaml"))
    # larger than a node: built over the pipeline stages that hold it, and said so
    assert bad.returncode == 0 and "pipeline stages" in bad.stdout, bad.stderr
    assert yaml.safe_load((tmp_path / "d.yaml").read_text())["min_pp"] == 4
