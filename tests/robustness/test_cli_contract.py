"""What CI relies on: `--json` errors as one JSON object on stdout (and the line on stderr),
one exit-code table for every command, `--version`, `validate` of many files, and a study or
baseline of another recipe or sampler refused unless --force."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import __version__
from hastune.errors import EXIT_CODES
from tests.robustness.inputs import CONFIG, PROFILE, RECIPE, REPO, edited, hastune_here, put
from tests.robustness.test_bad_inputs import CASES

KEYS = ("error", "file", "field", "fix", "exit_code")


def _one_object(stdout: str) -> dict:
    obj = json.loads(stdout)  # the whole of stdout: one object, nothing before or after
    assert isinstance(obj, dict)
    return obj


@pytest.mark.parametrize("case", list(CASES))
def test_json_errors_are_one_object_on_stdout(case: str, tmp_path: Path) -> None:
    args, file, field = CASES[case](tmp_path)
    r = hastune_here(*args, "--json")
    assert r.code == 2, (r.code, r.stderr, r.stdout[-2000:])
    obj = _one_object(r.stdout)
    assert all(k in obj for k in KEYS), obj
    assert obj["exit_code"] == 2
    assert file in obj["message"] and field in obj["message"], obj
    assert obj["fix"], obj
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr


@pytest.mark.parametrize("args", [
    ["simulate", RECIPE, "--rate", "1"],          # a missing option
    ["evaluate", RECIPE, "--config", CONFIG, "--bogus"],  # an unknown one
    ["tune", RECIPE, "--trials", "many"],          # a value of the wrong type
])
def test_usage_errors_in_json_mode(args) -> None:
    r = hastune_here(*args, "--json")
    assert r.code == 2
    obj = _one_object(r.stdout)
    assert obj["exit_code"] == 2 and obj["error"] and obj["fix"]


def test_version() -> None:
    r = hastune_here("--version")
    assert r.code == 0 and r.stdout.strip() == f"hastune {__version__}"


def test_every_exit_code_is_in_the_readme_and_the_help() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Exit codes"):]
    documented = {int(m) for m in re.findall(r"^\| `?(\d+)`? \|", table, flags=re.M)}
    assert documented == set(EXIT_CODES), (documented, set(EXIT_CODES))
    helped = hastune_here("--help").stdout
    for code in EXIT_CODES:
        assert re.search(rf"\b{code}\b", helped.rsplit("Exit codes", 1)[1]), code


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(good=st.lists(st.booleans(), min_size=1, max_size=5))
def test_validate_checks_every_file(tmp_path_factory, good: list[bool]) -> None:
    """Good and bad files in any order: each one reported, exit 2 iff any is bad."""
    t = tmp_path_factory.mktemp("v")
    files = []
    for i, ok in enumerate(good):
        change = (lambda d: None) if ok else put("decode.fixed_s", -1.0)
        files.append(edited(PROFILE, t / f"p{i}.yaml", change))
    r = hastune_here("validate", *files, "--json")
    obj = _one_object(r.stdout)
    assert [f["ok"] for f in obj["files"]] == good
    assert obj["checked"] == len(good) and obj["bad"] == good.count(False)
    assert r.code == obj["exit_code"] == (0 if all(good) else 2)
    if not all(good):
        first_bad = good.index(False)
        assert obj["file"] == str(files[first_bad]) and obj["field"] == "decode.fixed_s"
        assert len(r.stderr.strip().splitlines()) == good.count(False)
    plain = hastune_here("validate", *files)
    assert plain.code == r.code
    assert plain.stdout.count(" ok ") + plain.stdout.count("ok ") >= good.count(True)


def test_unmeetable_slo_exits_3_from_every_command(tmp_path: Path) -> None:
    impossible = edited(RECIPE, tmp_path / "impossible.yaml", put("slo.tpot_s", 1e-4))
    for args in (["evaluate", impossible, "--config", CONFIG, "-n", "200"],
                 ["prune", impossible], ["simulate", impossible, "--config", CONFIG,
                                         "--rate", "0.5", "-n", "200"]):
        r = hastune_here(*args, "--json")
        assert r.code == 3, (args[0], r.code, r.stderr)
        obj = _one_object(r.stdout)
        assert obj["exit_code"] == 3
        if args[0] == "evaluate":
            assert "TPOT" in obj["no_rate_meets_slo"], obj["no_rate_meets_slo"]
        if args[0] == "prune":  # the rule that removed everything is named
            assert "zero_load" in obj["no_config_reason"], obj["no_config_reason"]
        plain = hastune_here(*args)
        assert plain.code == 3
