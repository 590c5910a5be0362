"""All five architectures through the library and the CLI; their spaces; their input errors."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

import hastune.cli.evaluate  # noqa: F401  (registers the commands under test)
import hastune.cli.simulate  # noqa: F401
from hastune.cli import app
from hastune.config import parse_config
from hastune.errors import InputError
from hastune.evaluators.sim import Evaluation
from hastune.space import space_for
from hastune.tune.params import Parametrization
from tests.sim.replica_recipes import recipe

CONFIGS = {
    "epd": {"n_E": 2, "n_P": 2, "n_D": 4, "B": 4, "s": 0.5},
    "epd-static": {"n_E": 2, "n_P": 2, "n_D": 4},
    "padg": {"tp": 2, "instances": 4},
    "nodg": {"tp": 1, "replicas": 8, "chunk_tokens": 512},
    "fudg": {"prefill_instances": 3, "decode_instances": 5},
}


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_evaluate_cli_runs_every_architecture(arch, tmp_path, root):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"kind": "deployment", "architecture": arch,
                                   **CONFIGS[arch]}))
    r = CliRunner().invoke(app, ["evaluate", str(root / "examples/audio-ultravox-8xa100.yaml"),
                                 "--config", str(cfg), "-n", "200", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout[r.stdout.index("{"):])
    assert out["architecture"] == arch and out["goodput_rps"] > 0


def test_multi_gpu_profiles_run_as_tp_groups():
    # Qwen2-72B needs tp ≥ 2 on 80 GB: padg/nodg/fudg run it, epd is refused with a fix
    rec = recipe("sharegpt", 200, model="qwen2-72b")
    ev = Evaluation(rec)
    assert ev.run(parse_config({"architecture": "padg", "tp": 2, "instances": 4}), 2.0).completed
    with pytest.raises(InputError, match="tp") as e:
        ev.check(parse_config({"architecture": "nodg", "tp": 1, "replicas": 8}), "c.yaml")
    assert "2, 4, 8" in str(e.value) and "c.yaml: tp" in str(e.value)
    with pytest.raises(InputError, match="does not fit one GPU"):
        ev.check(parse_config({"architecture": "epd", **CONFIGS["epd"]}))
    with pytest.raises(InputError, match="spans nodes"):
        small = recipe("sharegpt", 200, model="qwen2-72b",
                       cluster={"gpu": "a800-80gb", "gpus": 8, "gpus_per_node": 4})
        Evaluation(small).check(parse_config({"architecture": "padg", "tp": 8, "instances": 1}))
    with pytest.raises(InputError, match="tp × pp × instances"):
        ev.check(parse_config({"architecture": "padg", "tp": 4, "pp": 2, "instances": 2}))


def test_spaces_count_gpus_as_products():
    padg = space_for("padg")
    cfgs = list(padg.configs(8))
    assert cfgs and all(c.tp * c.pp * c.instances == 8 for c in cfgs)
    fudg = list(space_for("fudg").configs(8))
    assert fudg and all(c.gpus == 8 for c in fudg)
    assert space_for("epd").size(8) == 448  # unchanged
    pz = Parametrization({"padg": padg, "fudg": space_for("fudg")}, 8)
    assert pz.build("padg", {"tp": 2, "pp": 2, "slack": "min"}).instances == 2
    assert pz.build("padg", {"tp": 4, "pp": 1, "slack": "mean"}).instances == 2
    assert pz.build("padg", {"tp": 8, "pp": 2, "slack": "mean"}) is None  # 16 > 8
    f = pz.build("fudg", {"prefill_tp": 2, "prefill_instances": 1, "decode_tp": 2,
                          "decode_pp": 1})
    assert f.decode_instances == 3 and f.gpus == 8
    assert pz.build("fudg", {"prefill_tp": 4, "prefill_instances": 1, "decode_tp": 4,
                             "decode_pp": 2}) is None  # 4 + 8k ≠ 8


def _name_comparisons(tree, names: set[str]) -> list[int]:
    """Lines of `tree` that compare something with an architecture's name (==, !=, in, not in
    a literal tuple/list/set of names)."""
    import ast

    def named(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        return False

    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
            and any(named(x) for x in (n.left, *n.comparators))]


def test_no_architecture_name_is_compared_outside_the_registry(root):
    """Per-architecture answers come from the registry (hastune/archs, issue 33): no module
    compares a config or an architecture with an architecture's name (the registry itself
    dispatches by its dict). The check itself finds a planted comparison."""
    import ast

    from hastune import archs

    names = set(archs.NAMES)
    assert _name_comparisons(ast.parse('if cfg.architecture in ("x", "nodg"): pass'), names)
    assert _name_comparisons(ast.parse('a = arch.name != "epd-static"'), names)
    found = []
    for base in ("hastune", "runners"):
        for f in sorted((root / base).rglob("*.py")):
            rel = f.relative_to(root).as_posix()
            found += [f"{rel}:{n}" for n in _name_comparisons(ast.parse(f.read_text()), names)]
    assert not found, found
