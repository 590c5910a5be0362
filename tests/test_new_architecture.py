"""What adding an architecture takes: one module, one search space, one registry line.

The module below is written to a temporary package and registered with `archs.register` (the
line MODULES in hastune/archs/__init__.py would hold); nothing else in hastune changes, and the
new architecture is parsed, validated in recipes, enumerated from its space, pruned,
simulated, tuned and refused by the engine like the shipped ones."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap

import optuna
import pytest
import yaml

from hastune import archs
from hastune.caveats import caveats
from hastune.config import parse_config
from hastune.errors import InputError
from hastune.evaluators import make_evaluator
from hastune.evaluators.sim import Evaluation
from hastune.export import export
from hastune.export.target import Pool, pools
from hastune.prune import prune
from hastune.recipe import load_recipe
from hastune.space import load_space
from hastune.tune.runner import TuneOptions, Tuner, evaluated_trials
from tests.conftest import EXAMPLES, QUICK
from tests.export.test_flags import check_dir, target_for

MODULE = '''
"""`whole` — replicas that prefill whole prompts: continuous batching without chunks."""

from typing import Literal

from pydantic import Field

from hastune.archs.base import ConfigBase, Parallel
from hastune.archs.replicas import Colocated


class WholeConfig(ConfigBase, Parallel):
    gpu_terms = (("tp", "pp", "replicas"),)
    architecture: Literal["whole"]
    replicas: int = Field(ge=1, le=1024)
    chunk_tokens: None = None


class Whole(Colocated):
    name = "whole"
    config = WholeConfig
    summary = "replicas that prefill whole prompts"
    simulator_class = "hastune.sim.nodg:NoDGSimulator"
    pool_word = "replicas"
    count_field = "replicas"
    not_runnable = "it is a demonstration"


ARCH = Whole()
'''
SPACE = {"architecture": "whole", "budget": "exact",
         "params": {"tp": [1, 2], "pp": [1], "replicas": {"low": 1}}}


@contextlib.contextmanager
def plugged(tmp_path, monkeypatch, files: dict[str, str], module: str):
    """`files` (path → text) written under tmp_path, importable, and `module`'s ARCH
    registered (the line MODULES would hold); the registry and sys.modules as before after."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = dict(archs.ARCHITECTURES)
    archs.register(importlib.import_module(module).ARCH)
    try:
        yield tmp_path
    finally:
        archs.ARCHITECTURES.clear()
        archs.ARCHITECTURES.update(before)
        archs.NAMES = tuple(before)
        tops = tuple({rel.split("/")[0] for rel in files if "/" in rel})
        for m in [m for m in sys.modules if m.startswith(tops)]:
            sys.modules.pop(m, None)


@pytest.fixture
def whole(tmp_path, monkeypatch):
    files = {"plugin_archs/__init__.py": "", "plugin_archs/whole.py": MODULE,  # one module
             "whole.yaml": yaml.safe_dump(SPACE)}                               # one space
    with plugged(tmp_path, monkeypatch, files, "plugin_archs.whole") as d:     # one line
        yield d


def prunes_and_tunes(rec, ev, space, name: str, out) -> None:
    """Pruning keeps some of `space` (all of architecture `name`) and a 2-trial tune evaluates
    only `name`'s configurations."""
    rep = prune(rec, ev.profile, ev.requests, space, evaluate=lambda c: ev.goodput(c).goodput_rps)
    assert rep.kept and all(c.config.architecture == name for c in rep.kept)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuner = Tuner(rec, TuneOptions(trials=2, out=str(out), storage="memory"))
    study = tuner.open_study()
    tuner.work(study)
    assert {parse_config(yaml.safe_load(t.user_attrs["key"])).architecture
            for t in evaluated_trials(study)} == {name}


def _recipe(tmp_path):
    data = yaml.safe_load((EXAMPLES / "audio-ultravox-8xa100.yaml").read_text())
    data.update({"architecture": "whole", "search_space": "whole.yaml",
                 "evaluator": {**QUICK, "max_probes": 30}})
    data["cluster"]["gpus"] = 4
    data["workload"]["requests"] = 300
    p = tmp_path / "recipe.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_recipe(p)


def test_a_new_architecture_is_one_module_one_space_one_line(whole):
    rec = _recipe(whole)
    assert rec.architectures == ["whole"]
    cfg = parse_config({"architecture": "whole", "tp": 1, "replicas": 4})
    assert cfg.gpus == 4 and archs.of(cfg).gpu_formula == "tp × pp × replicas"
    space = load_space(whole / "whole.yaml")
    assert {c.replicas for c in space.configs(4)} == {4, 2}

    ev = Evaluation(rec)
    # the same simulator as nodg without chunks: the same goodput
    nodg = parse_config({"architecture": "nodg", "tp": 1, "replicas": 4, "chunk_tokens": None})
    assert ev.goodput(cfg).goodput_rps == ev.goodput(nodg).goodput_rps > 0

    prunes_and_tunes(rec, ev, space, "whole", whole / "out")

    with pytest.raises(InputError, match="does not run whole"):
        make_evaluator("real", rec).check(cfg)


def test_a_new_architecture_exports_and_is_caveated_from_its_module(whole, tmp_path):
    """Export, the deployment block and the caveats read the registry: the new module's
    replicas (no chunk knob: whole prompts) deploy as vLLM replicas with chunking off, and
    its engine terms are said to be unchecked (its module does not claim them)."""
    cfg = parse_config({"architecture": "whole", "tp": 2, "pp": 1, "replicas": 3})
    assert pools(cfg) == [Pool(role="replica", instances=3, tp=2)]
    res = export(cfg, target_for(cfg), "vllm", tmp_path / "vllm")
    assert res.written and [i.role for i in res.plan.instances] == ["replica"] * 3
    assert [i.gpus for i in res.plan.instances] == [(0, 1), (2, 3), (4, 5)]
    assert (tmp_path / "vllm" / "replica.sh").read_text().count("--disable-chunked-prefill") == 3
    assert check_dir(tmp_path / "vllm") > 0
    said = caveats({"engine": "vllm", "on": True}, cfg, 1.0)
    assert any("whole with them has not been checked" in c and "(nodg)" in c for c in said)
    nodg = parse_config({"architecture": "nodg", "tp": 2, "replicas": 3})
    assert not any("has not been checked" in c for c in caveats({"engine": "vllm", "on": True},
                                                                 nodg, 1.0))


def test_an_unregistered_architecture_is_refused_by_name(tmp_path):
    with pytest.raises(InputError, match="unknown architecture 'whole'"):
        parse_config({"architecture": "whole", "tp": 1, "replicas": 4})
