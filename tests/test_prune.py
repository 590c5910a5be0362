"""Pruning is sound: on small budgets, exhaustive search finds no better config than the
best one pruning keeps."""

from __future__ import annotations

import pytest

from hastune.evaluators.sim import Evaluation
from hastune.prune import prune
from hastune.space import space_for
from tests.conftest import quick


def _small(recipe, gpus, **slo):
    cluster = recipe.cluster.model_copy(update={"gpus": gpus})
    upd = {"cluster": cluster}
    if slo:
        upd["slo"] = recipe.slo.model_copy(update=slo)
    return quick(recipe.model_copy(update=upd))


def _cached_goodput(ev):
    """ev's goodput of a config, simulated once per config."""
    cache: dict = {}

    def goodput(cfg):
        key = cfg.model_dump_json()
        if key not in cache:
            cache[key] = ev.goodput(cfg).goodput_rps
        return cache[key]

    return goodput


CASES = [
    ("audio", 4, {}),
    ("image", 4, {}),
    ("audio", 3, {"ttft_s": 0.4}),
    ("image", 3, {"tpot_s": 0.06}),
]


@pytest.mark.parametrize("which,gpus,slo", CASES)
def test_optimum_is_never_pruned(which, gpus, slo, audio_recipe, image_recipe):
    rec = _small(audio_recipe if which == "audio" else image_recipe, gpus, **slo)
    ev = Evaluation(rec, requests=300)
    goodput = _cached_goodput(ev)

    for arch in ("epd", "epd-static"):
        space = space_for(arch)
        exhaustive = max(goodput(c) for c in space.configs(gpus))
        report = prune(rec, ev.profile, ev.requests, space, evaluate=goodput)
        assert report.total >= space.size(gpus)
        assert sum(report.removed.values()) + len(report.kept) == report.total
        best_kept = max((goodput(c.config) for c in report.kept), default=0.0)
        assert best_kept == exhaustive, (arch, report.as_dict(top=3))
        # every kept candidate's bound really bounds its simulated goodput (with the margin)
        for c in report.kept:
            assert goodput(c.config) <= c.bound * report.margin + 1e-9


def test_rules_fire(audio_recipe):
    audio_recipe = quick(audio_recipe)
    ev = Evaluation(audio_recipe, requests=300)
    space = space_for("epd")
    rep = prune(audio_recipe, ev.profile, ev.requests, space,
                evaluate=lambda c: ev.goodput(c).goodput_rps)
    assert rep.removed["structural"] > 0  # s > 0 with n_P = 0
    assert rep.removed["capacity"] > 0
    assert rep.kept == sorted(rep.kept, key=lambda c: -c.bound)
    # an impossible TTFT SLO removes everything at zero load
    strict = audio_recipe.model_copy(update={"slo": audio_recipe.slo.model_copy(
        update={"ttft_s": 1e-4})})
    rep0 = prune(strict, ev.profile, ev.requests, space)
    assert not rep0.kept and rep0.removed["zero_load"] == rep0.total - rep0.removed["structural"]


def test_local_prefill_needs_memory(audio_recipe):
    ev = Evaluation(audio_recipe, requests=300)
    prof = ev.profile
    mem = prof.memory
    # room for the LLM's KV on a decode GPU, but not for the encoder beside it
    tight = prof.model_copy(update={"memory": mem.model_copy(update={
        "encoder_weight_bytes": mem.gpu_bytes * mem.utilisation - mem.weight_bytes
        - mem.activation_bytes - 10 * mem.kv_bytes_per_token})})
    rep = prune(audio_recipe, tight, ev.requests, space_for("epd"))
    assert rep.removed["memory"] > 0
    assert all(c.config.s == 1.0 for c in rep.kept)


@pytest.mark.parametrize("arch", ["padg", "nodg", "fudg"])
def test_optimum_is_never_pruned_replica_architectures(arch):
    """The same soundness check on the replica-based spaces (tp × pp × instances = G)."""
    from tests.sim.replica_recipes import recipe

    rec = quick(recipe("sharegpt", 300, cluster={"gpu": "a800-80gb", "gpus": 4,
                                                 "gpus_per_node": 4, "intra_node": "pcie4",
                                                 "inter_node": "25gbe-roce"}))
    ev = Evaluation(rec)
    goodput = _cached_goodput(ev)

    space = space_for(arch)
    exhaustive = max(goodput(c) for c in space.configs(4) if _runs(ev, c))
    report = prune(rec, ev.profile, ev.requests, space, evaluate=goodput)
    assert sum(report.removed.values()) + len(report.kept) == report.total
    best_kept = max((goodput(c.config) for c in report.kept), default=0.0)
    assert best_kept == exhaustive, report.as_dict(top=3)
    for c in report.kept:
        assert goodput(c.config) <= c.bound * report.margin + 1e-9, c.as_dict()
        # `hastune prune` prints the epd stage columns for every architecture
        assert {"encode", "prefill", "decode", "network"} <= set(c.stages)


def _runs(ev, cfg) -> bool:
    from hastune.errors import InputError

    try:
        ev.check(cfg)
    except InputError:
        return False
    return True


def test_engine_rule_removes_what_the_engine_cannot_run_before_any_probe():
    from pathlib import Path

    from hastune.evaluators import make_evaluator
    from hastune.recipe import load_recipe

    root = Path(__file__).resolve().parent.parent
    rec = quick(load_recipe(root / "examples" / "ecoserve" / "a800-codellama-closed.yaml"))
    ev = Evaluation(rec, requests=200)
    from hastune.evaluators import EvaluatorOptions

    # asked what it can run (tp/pp, not this machine's cores: oversubscribe); nothing starts
    engine = make_evaluator("real", rec, EvaluatorOptions(oversubscribe=True))
    probed = []

    def goodput(cfg):
        assert engine.runnable(cfg), f"probed a config the engine cannot run: {cfg}"
        probed.append(cfg)
        return ev.goodput(cfg).goodput_rps

    for arch in ("padg", "nodg"):
        space = space_for(arch, rec.path, rec.search_space)
        full = prune(rec, ev.profile, ev.requests, space)
        rep = prune(rec, ev.profile, ev.requests, space, evaluate=goodput, probe_top=1,
                    runnable=engine.runnable)
        multi = [c for c in full.kept if c.config.tp > 1 or c.config.pp > 1]
        assert multi, "the test needs tp or pp > 1 in the space"
        assert rep.removed["engine"] >= len(multi)
        assert all(c.config.tp == 1 and c.config.pp == 1 for c in rep.kept)
    assert probed


def test_a_lower_bound_from_elsewhere_prunes_by_capacity_and_keeps_the_probed(audio_recipe):
    rec = _small(audio_recipe, 4)
    ev = Evaluation(rec, requests=200)
    space = space_for("epd", rec.path, rec.search_space)
    calls = []

    def goodput(cfg):
        calls.append(cfg)
        return 1.0  # a poor probe: on its own it would prune almost nothing

    own = prune(rec, ev.profile, ev.requests, space, evaluate=goodput, probe_top=2)
    best_bound = max(c.bound for c in own.kept)
    shared = prune(rec, ev.profile, ev.requests, space, evaluate=goodput, probe_top=2,
                   lower_bound=best_bound * own.margin * 2)
    assert shared.lower_bound == best_bound * own.margin * 2
    assert [c.config for c in shared.kept] == [c.config for c in shared.kept if c.goodput]
    assert len(shared.kept) == 2 and shared.removed["capacity"] > own.removed["capacity"]
