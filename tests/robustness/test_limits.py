"""The input limits and value checks, at the library functions the CLI calls."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from hastune.config import load_config
from hastune.errors import InputError
from hastune.evaluators.sim import Evaluation
from hastune.recipe import Workload, load_recipe
from hastune.space import MAX_ALLOCATION_COMBOS, load_space
from hastune.tune.grid import run_grid
from hastune.workload import load_trace
from hastune.yamlio import MAX_NODES, read_yaml_mapping
from tests.robustness.inputs import CONFIG, RECIPE, SPACE, bomb, text


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    p = text(tmp_path / "bomb.yaml", bomb(9))
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="100,000 YAML nodes") as e:
        read_yaml_mapping(p, "recipe")
    assert time.perf_counter() - t0 < 1.0
    assert e.value.file == str(p) and "line 7" in e.value.problem


def test_small_aliases_and_large_plain_files_within_the_limit_read(tmp_path: Path) -> None:
    p = text(tmp_path / "ok.yaml", "a: &a {x: 1, y: [1, 2]}\nb: *a\nc: *a\n")
    assert read_yaml_mapping(p, "recipe") == {"a": {"x": 1, "y": [1, 2]}} | {
        "b": {"x": 1, "y": [1, 2]}, "c": {"x": 1, "y": [1, 2]}}
    body = "a:\n" + "- 1\n" * (MAX_NODES - 10)
    assert len(read_yaml_mapping(text(tmp_path / "long.yaml", body), "x")["a"]) == MAX_NODES - 10
    with pytest.raises(InputError, match="YAML nodes"):
        read_yaml_mapping(text(tmp_path / "longer.yaml", body + "- 1\n" * 20), "x")


def test_files_that_are_not_regular_files_are_refused_without_reading(tmp_path: Path) -> None:
    for p, what in ((tmp_path, "directory"), (Path("/dev/zero"), "device")):
        with pytest.raises(InputError, match=what):
            read_yaml_mapping(p, "recipe")
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(11 * 2**20)
    with pytest.raises(InputError, match="10 MiB limit"):
        load_recipe(big)


@pytest.mark.parametrize("mix, ok", [
    ({"text": 1.0}, True), ({"text": 0.995}, True), ({"text": 0.3}, False),
    ({"text": 3.0}, False), ({"text": 0.0}, False), ({"text": -1.0}, False),
    ({"text": float("nan")}, False), ({"text": float("inf")}, False)])
def test_mix_shares_must_sum_to_one(mix: dict, ok: bool) -> None:
    if ok:
        assert Workload(mix=mix).mix == mix
    else:
        with pytest.raises(ValidationError, match="mix"):
            Workload(mix=mix)


@pytest.mark.parametrize("line, field", [
    ('{"prompt_tokens": NaN, "output_tokens": 5}', "line 2: prompt_tokens"),
    ('{"prompt_tokens": 5, "output_tokens": -Infinity}', "line 2: output_tokens"),
    ('{"prompt_tokens": 5, "output_tokens": 2e7}', "line 2: output_tokens"),
    ('{"prompt_tokens": 5, "output_tokens": 5, "encoder_tokens": 1e12}',
     "line 2: encoder_tokens"),
    ('{"prompt_tokens": 5, "output_tokens": 5, "arrival_s": NaN}', "line 2: arrival_s"),
    ('{"prompt_tokens": 5, "output_tokens": 5, "modality": {"a": 1}}', "line 2: modality"),
    ("[" * 100_000, "line 2")])
def test_trace_errors_name_the_line_and_the_field(tmp_path: Path, line: str, field: str) -> None:
    p = text(tmp_path / "t.jsonl", '{"prompt_tokens": 1, "output_tokens": 1}\n' + line + "\n")
    with pytest.raises(InputError) as e:
        load_trace(p, 10, 0)
    assert e.value.file == str(p) and e.value.field == field and e.value.fix


def test_a_binary_or_directory_trace_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="UTF-8"):
        load_trace(text(tmp_path / "b.jsonl", b"\xff\xfe\x00\x81" * 100), 10, 0)
    with pytest.raises(InputError, match="directory"):
        load_trace(tmp_path, 10, 0)


@pytest.fixture(scope="module")
def ev() -> Evaluation:
    return Evaluation(load_recipe(RECIPE), requests=50)


@pytest.mark.parametrize("rate", [float("nan"), float("inf"), -float("inf"), 0.0, -1.0])
def test_evaluation_run_refuses_a_rate_that_is_not_finite_and_positive(ev, rate) -> None:
    with pytest.raises(InputError, match="finite") as e:
        ev.run(load_config(CONFIG), rate)
    assert e.value.field == "--rate"


@pytest.mark.parametrize("requests", [0, -10, 10**11])
def test_evaluation_refuses_a_request_count_out_of_range(requests: int) -> None:
    with pytest.raises(InputError) as e:
        Evaluation(load_recipe(RECIPE), requests=requests)
    assert e.value.field == "--requests" and str(requests) in e.value.problem


def test_evaluation_refuses_a_negative_seed() -> None:
    with pytest.raises(InputError) as e:
        Evaluation(load_recipe(RECIPE), seed=-1)
    assert e.value.field == "--seed"


@pytest.mark.parametrize("workers", [0, -2, 10**6])
def test_grid_refuses_a_worker_count_out_of_range(workers: int) -> None:
    with pytest.raises(InputError) as e:
        run_grid(RECIPE, workers=workers)
    assert e.value.field == "--workers"


def test_a_space_too_wide_for_the_budget_is_refused_before_enumerating() -> None:
    space = load_space(SPACE)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=f"{MAX_ALLOCATION_COMBOS:,}") as e:
        next(space.configs(100_000))
    assert time.perf_counter() - t0 < 1.0
    assert e.value.file == str(SPACE.resolve()) and e.value.field == "params"
    assert space.size(8) == 448  # small budgets as before
