"""cluster.inventory, prices and the recipe's objective (issue 37, first increment): every
malformed inventory is one InputError naming its field; a one-type inventory is the old form;
old recipes dump (and so hash) as they did."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.cluster import Cluster
from hastune.errors import InputError
from hastune.recipe import Recipe, load_recipe
from tests.generated import GPUS

ROOT = Path(__file__).resolve().parents[1]
OLD_CLUSTER_KEYS = {"gpu", "gpus", "gpus_per_node", "intra_node", "inter_node"}


def _recipes() -> list[Path]:
    out = []
    for p in sorted((ROOT / "examples").rglob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        if isinstance(data, dict) and "cluster" in data and "inventory" not in data["cluster"]:
            out.append(p)  # the one-type form (an inventory example is new: nothing before)
    return out


@pytest.mark.parametrize("path", _recipes(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_recipes_dump_as_before(path):
    """The new fields are left out of an old recipe's dump (its study hash is unchanged), and
    the dump reads back to the same recipe."""
    rec = load_recipe(path)
    d = rec.model_dump(mode="json")
    assert set(d["cluster"]) == OLD_CLUSTER_KEYS
    assert "objective" not in d
    assert Recipe.model_validate(d) == rec.model_copy(update={"path": None})
    assert len(rec.cluster.types) == 1 and rec.cluster.types[0].gpu == rec.cluster.gpu


def _base(inventory: list[dict], **cluster) -> dict:
    return {"name": "inv", "model": "llama-30b", "workload": {"preset": "alpaca"},
            "architecture": "nodg", "cluster": {"inventory": inventory, **cluster}}


entries = st.lists(
    st.fixed_dictionaries({"gpu": st.sampled_from(GPUS), "nodes": st.integers(1, 3),
                           "gpus_per_node": st.sampled_from([1, 2, 4, 8]),
                           "price_per_gpu_hour": st.floats(0.1, 10.0)}),
    min_size=1, max_size=len(GPUS), unique_by=lambda e: e["gpu"])


def _load(data: dict) -> Recipe:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.yaml"
        p.write_text(yaml.safe_dump(data))
        return load_recipe(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inv=entries, data=st.data())
def test_valid_inventory(inv, data):
    cap = data.draw(st.one_of(st.none(), st.integers(1, sum(e["nodes"] * e["gpus_per_node"]
                                                            for e in inv))))
    rec = _load(_base(inv, **({} if cap is None else {"gpus": cap})))
    c = rec.cluster
    total = sum(e["nodes"] * e["gpus_per_node"] for e in inv)
    assert c.total_gpus == total and c.gpus == (total if cap is None else cap)
    assert c.gpu == inv[0]["gpu"] and c.gpus_per_node == inv[0]["gpus_per_node"]
    assert [t.gpu for t in c.types] == [e["gpu"] for e in inv]
    assert c.mixed == (len(inv) > 1)
    for e in inv:
        assert c.price(e["gpu"]) == e["price_per_gpu_hour"]
    again = Recipe.model_validate(rec.model_dump(mode="json"))  # the dump reads back
    assert again.cluster == c


# (mutation of a valid inventory recipe, the field its one error must name)
def _mutations(inv: list[dict], i: int) -> list[tuple[str, dict, str]]:
    out = [
        ("zero nodes", _base([*inv[:i], {**inv[i], "nodes": 0}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].nodes"),
        ("negative gpus_per_node", _base([*inv[:i], {**inv[i], "gpus_per_node": -1},
                                          *inv[i + 1:]]),
         f"cluster.inventory[{i}].gpus_per_node"),
        ("text nodes", _base([*inv[:i], {**inv[i], "nodes": "two"}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].nodes"),
        ("zero price", _base([*inv[:i], {**inv[i], "price_per_gpu_hour": 0}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].price_per_gpu_hour"),
        ("empty gpu", _base([*inv[:i], {**inv[i], "gpu": ""}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].gpu"),
        ("no gpu", _base([*inv[:i], {k: v for k, v in inv[i].items() if k != "gpu"},
                          *inv[i + 1:]]), f"cluster.inventory[{i}].gpu"),
        ("unknown key", _base([*inv[:i], {**inv[i], "gpus_per_nod": 8}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].gpus_per_nod"),
        ("bad link", _base([*inv[:i], {**inv[i], "intra_node": "nvlink-9"}, *inv[i + 1:]]),
         f"cluster.inventory[{i}].intra_node"),
        ("duplicate type", _base([*inv, dict(inv[i])]), "cluster.inventory"),
        ("gpu beside it", _base(inv, gpu=inv[0]["gpu"]), "cluster.inventory"),
        ("gpus_per_node beside it", _base(inv, gpus_per_node=8), "cluster.inventory"),
        ("price beside it", _base(inv, price_per_gpu_hour=1.0), "cluster.inventory"),
        ("empty", _base([]), "cluster.inventory"),
        ("not a list", _base({"gpu": "a100-80gb"}), "cluster.inventory"),  # type: ignore
        ("budget above it", _base(inv, gpus=sum(e["nodes"] * e["gpus_per_node"]
                                                for e in inv) + 1), "cluster.gpus"),
        ("no price, cost objective",
         {**_base([*inv[:i], {k: v for k, v in inv[i].items() if k != "price_per_gpu_hour"},
                   *inv[i + 1:]]), "objective": "goodput_per_dollar"},
         f"cluster.inventory[{i}].price_per_gpu_hour"),
        ("unknown objective", {**_base(inv), "objective": "cost"}, "objective"),
    ]
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inv=entries, data=st.data())
def test_malformed_inventory_is_one_error_naming_its_field(inv, data):
    i = data.draw(st.integers(0, len(inv) - 1))
    name, bad, field = data.draw(st.sampled_from(_mutations(copy.deepcopy(inv), i)))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.yaml"
        p.write_text(yaml.safe_dump(bad))
        with pytest.raises(InputError) as err:
            load_recipe(p)
    e = err.value
    assert e.field == field, (name, e.message)
    assert e.file == str(p) and e.fix, (name, e.message)
    assert "(and" not in e.problem, (name, e.message)  # the one problem, nothing beside it


def test_old_form_price():
    rec = _load({"name": "p", "model": "llama-30b", "workload": {"preset": "alpaca"},
                 "cluster": {"gpu": "a100-80gb", "gpus": 4, "price_per_gpu_hour": 1.5},
                 "objective": "goodput_per_dollar"})
    assert rec.cluster.price("a100-80gb") == 1.5
    assert rec.model_dump()["cluster"]["price_per_gpu_hour"] == 1.5
    assert rec.model_dump()["objective"] == "goodput_per_dollar"
    with pytest.raises(InputError) as err:
        _load({"name": "p", "model": "llama-30b", "workload": {"preset": "alpaca"},
               "cluster": {"gpu": "a100-80gb", "gpus": 4}, "objective": "goodput_per_dollar"})
    assert err.value.field == "cluster.price_per_gpu_hour"


def test_one_type_inventory_is_the_old_form():
    """A one-type inventory fills gpu / gpus / gpus_per_node / intra_node as the old form
    gives them: the same Cluster the simulator reads."""
    old = Cluster.model_validate({"gpu": "h100-80gb", "gpus": 8, "gpus_per_node": 4,
                                  "intra_node": "nvlink-h100", "inter_node": "ib-400g"})
    inv = Cluster.model_validate({"inventory": [{"gpu": "h100-80gb", "nodes": 2,
                                                 "gpus_per_node": 4,
                                                 "intra_node": "nvlink-h100"}],
                                  "inter_node": "ib-400g"})
    for k in OLD_CLUSTER_KEYS:
        assert getattr(inv, k) == getattr(old, k), k
    assert old.types[0].gpus == inv.types[0].gpus == 8


def test_several_types_are_simulated_and_refused_on_an_engine(tmp_path):
    from hastune.evaluators.engine import RealEvaluation
    from hastune.evaluators.sim import Evaluation

    p = tmp_path / "mixed.yaml"
    p.write_text(yaml.safe_dump(_base([
        {"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 2},
        {"gpu": "h100-80gb", "nodes": 1, "gpus_per_node": 2}])))
    rec = load_recipe(p)
    assert Evaluation(rec).multi  # pools on several types: simulated
    with pytest.raises(InputError) as err:
        RealEvaluation(rec)
    assert err.value.field == "cluster.inventory" and err.value.file == str(p)
    assert "an engine's trials run on one" in err.value.problem and "one entry" in err.value.fix
    from hastune.cli.validate import validate_file

    kind, desc = validate_file(p)  # validate checks each type on its own
    assert kind == "recipe" and "a100-80gb" in desc and "h100-80gb" in desc
