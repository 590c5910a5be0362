"""Every field of every shipped example, and every file argument, made hostile.

Generated, deterministic cases (no randomness: the same list on every run):
- each leaf (and each inner mapping) of each shipped recipe (examples/*.yaml,
  examples/ecoserve/*.yaml), deployment config (examples/configs/*.yaml,
  examples/ecoserve/configs/*.yaml) and model config (examples/models/**/config.json) set to
  hostile values — 0, -1, NaN, ±inf, 1e308, 2**63, a value of the wrong type (string, list,
  mapping, null, bool) and a 100,000-character string —, a few per leaf in rotation so every
  value meets every file;
- each of those files replaced whole by binary bytes, non-UTF-8 text, 10,000 levels of
  nesting, an empty file;
- each file argument of the commands (recipe, --config, profile, model, and the files a recipe
  names: profile, trace, search space) given as a directory, a FIFO, /dev/zero, a symlink loop,
  an unreadable file, a binary file.

Each case runs the command that reads the file, in this process (hastune_here; a few through a
subprocess), and must answer within 5 s with exit 0 (a hostile value may be valid; 3 for
simulate's SLO miss) or exit 2 with one `error:` line naming the file; with `--json`, exactly
one JSON object on stdout with a non-null `file`, and for a field's mutation a non-null
`field`, the mutated key named in the field or the message. Never a traceback, never exit 1.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.robustness.inputs import LIMIT_S, REPO, Result, hastune, hastune_here

EX = REPO / "examples"
RECIPES = sorted([*EX.glob("*.yaml"), *(EX / "ecoserve").glob("*.yaml")])
CONFIGS = sorted([*(EX / "configs").glob("*.yaml"), *(EX / "ecoserve" / "configs").glob("*.yaml")])
MODELS = sorted((EX / "models").glob("**/config.json"))
PROFILE = REPO / "profiles" / "cpu" / "ref-small-1core.yaml"

# a deployment each recipe runs (simulate), and a recipe each config runs in
RUNS = {
    "audio-ultravox-8xa100": "configs/epd-2-2-4", "image-llava-8xa100":
    "configs/epd-static-2-2-4", "video-qwen-8xa100": "configs/audio-epd-4-0-4",
    "qwen25vl-7b-h200": "configs/epd-2-2-4", "reference-cpu": "configs/reference-cpu-epd",
    "llama31-8b-h100-fp8": "configs/reference-cpu-nodg",
    "a800-codellama-closed": "configs/reference-cpu-nodg",
    "a800-llama-sharegpt": "ecoserve/configs/nodg-tp2x8",
    "h100-qwen-longbench": "ecoserve/configs/fudg-2p6d-tp2",
    "l20-codellama-burst": "ecoserve/configs/padg-mitosis",
    "l20-codellama-sharegpt": "ecoserve/configs/padg-tp2x8",
}
RUN_IN = {
    "audio-epd-4-0-4": "audio-ultravox-8xa100", "epd-2-2-4": "audio-ultravox-8xa100",
    "epd-static-2-2-4": "audio-ultravox-8xa100", "reference-cpu-epd": "reference-cpu",
    "reference-cpu-nodg": "reference-cpu", "reference-cpu-padg": "reference-cpu",
    "fudg-2p6d-tp2": "ecoserve/h100-qwen-longbench", "nodg-tp2x8":
    "ecoserve/l20-codellama-sharegpt", "padg-mitosis": "ecoserve/l20-codellama-burst",
    "padg-tp2x8": "ecoserve/l20-codellama-sharegpt",
}
SIM = ("--rate", "1", "-n", "50")

VALUES: list[tuple[str, Any]] = [
    ("0", 0), ("-1", -1), ("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf),
    ("1e308", 1e308), ("2^63", 2**63), ("str", "x"), ("list", [1, 2]), ("map", {"a": 1}),
    ("null", None), ("bool", True), ("100k-str", "x" * 100_000),
]
MAPPING_VALUES = [("null", None), ("0", 0), ("str", "x"), ("list", [1, 2])]
WHOLE: list[tuple[str, bytes]] = [
    ("binary", bytes(range(256)) * 16),
    ("not-utf8", b"kind: recipe\nname: \xff\xfe\xc3\x28 caf\xe9\n"),
    ("deep-10000", b"[" * 10_000 + b"]" * 10_000 + b"\n"),
    ("deep-10000-open", b"a: " + b"[" * 10_000 + b"\n"),
    ("empty", b""),
]
# what each kind of file's leaves get: (values per leaf, how often a case also simulates)
PER_LEAF = {"recipe": 2, "config": 4, "model": 2}
SIMULATE_EVERY = 11
PLAIN_EVERY = 7  # every so many cases also run without --json (the plain error line)


@dataclass(frozen=True)
class Case:
    id: str
    kind: str                     # recipe | config | model | profile | arg
    src: Path | None              # the shipped file mutated
    path: tuple = ()              # the mutated leaf (keys / indices); () for the whole file
    value: Any = None
    raw: bytes | None = None      # the whole file's bytes instead
    extra: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def key(self) -> str | None:
        """The mutated key's name (the nearest key above an index)."""
        return next((str(k) for k in reversed(self.path) if isinstance(k, str)), None)


def _load(src: Path) -> Any:
    if src.suffix == ".json":
        return json.loads(src.read_text(encoding="utf-8"))
    return yaml.safe_load(src.read_text(encoding="utf-8"))


def _nodes(d: Any, path: tuple = ()) -> Iterator[tuple[tuple, bool]]:
    """(path, is a leaf) of every node below the root, depth first."""
    items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
    for k, v in items:
        leaf = not isinstance(v, (dict, list)) or not v
        yield (*path, k), leaf
        if not leaf:
            yield from _nodes(v, (*path, k))


def _rel(p: Path) -> str:
    return p.relative_to(EX).as_posix().removesuffix(".yaml").removesuffix("/config.json")


def _field_cases(kind: str, src: Path, start: int) -> Iterator[Case]:
    """Each leaf of `src` with PER_LEAF[kind] values, rotating through VALUES so that every
    value reaches every file; each inner mapping (or list) with one of MAPPING_VALUES."""
    slot = start  # the next value of VALUES, one after another over the file's leaves
    for i, (path, leaf) in enumerate(_nodes(_load(src))):
        where = ".".join(map(str, path))
        if leaf:
            for _ in range(PER_LEAF[kind]):
                name, value = VALUES[slot % len(VALUES)]
                slot += 1
                yield Case(f"{kind}:{_rel(src)}:{where}={name}", kind, src, path, value)
        else:
            name, value = MAPPING_VALUES[(start + i) % len(MAPPING_VALUES)]
            yield Case(f"{kind}:{_rel(src)}:{where}={name}", kind, src, path, value)


def _cases() -> list[Case]:
    out: list[Case] = []
    for kind, files in (("recipe", RECIPES), ("config", CONFIGS), ("model", MODELS)):
        for n, src in enumerate(files):
            out += _field_cases(kind, src, n)
            out += [Case(f"{kind}:{_rel(src)}:whole={w}", kind, src, raw=b) for w, b in WHOLE]
    out += [Case(f"profile:{PROFILE.name}:whole={w}", "profile", PROFILE, raw=b)
            for w, b in WHOLE]
    out += [Case(f"profile:{PROFILE.name}:{'.'.join(map(str, p))}={name}", "profile", PROFILE,
                 p, v) for i, (p, leaf) in enumerate(_nodes(_load(PROFILE)))
            if leaf and i % 3 == 0 for name, v in [VALUES[i % len(VALUES)]]]
    return out


CASES = _cases()


# -- writing the mutated files ---------------------------------------------------------------

def _absolute(data: Any, src: Path) -> Any:
    """A recipe's relative paths (model, profile, search space, trace) made absolute, so the
    copy written elsewhere names the same files."""
    if not isinstance(data, dict):
        return data
    for key in ("model", "profile", "search_space"):
        v = data.get(key)
        if isinstance(v, str) and (src.parent / v).exists():
            data[key] = str((src.parent / v).resolve())
    return data


def _set(data: Any, path: tuple, value: Any) -> Any:
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = copy.deepcopy(value)
    return data


def _dump(data: Any, json_file: bool) -> bytes:
    if json_file:
        return json.dumps(data, indent=1).encode()  # NaN and Infinity as JavaScript writes them
    return yaml.safe_dump(data, sort_keys=False, width=1 << 30).encode()


def _write(case: Case, d: Path) -> Path:
    assert case.src is not None
    target = d / case.src.name
    if case.raw is not None:
        body = case.raw
    else:
        data = _absolute(_load(case.src), case.src) if case.kind == "recipe" else _load(case.src)
        body = _dump(_set(data, case.path, case.value), case.src.suffix == ".json")
    target.write_bytes(body)
    return target


def _partner(case: Case) -> Path | None:
    """The shipped file the mutated one simulates with (recipes: a config; configs: a
    recipe), or None."""
    assert case.src is not None
    name = case.src.stem
    if case.kind == "recipe" and name in RUNS:
        return EX / f"{RUNS[name]}.yaml"
    if case.kind == "config" and name in RUN_IN:
        return EX / f"{RUN_IN[name]}.yaml"
    return None


def _commands(case: Case, i: int, p: Path) -> list[list[Any]]:
    """What reads the mutated file `p`: validate for recipes, configs and profiles (and for
    some cases simulate), model inspect for model configs, profile check for profiles."""
    if case.kind == "model":
        return [["model", "inspect", p.parent]]
    if case.kind == "profile":
        return [["validate", p], ["profile", "check", p]]
    cmds: list[list[Any]] = [["validate", p]]
    other = _partner(case)
    if other is not None and (i % SIMULATE_EVERY == 0 or case.raw is not None):
        rec, cfg = (p, other) if case.kind == "recipe" else (other, p)
        cmds.append(["simulate", rec, "--config", cfg, *SIM])
    return cmds


# -- running and judging ---------------------------------------------------------------------

class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def run(*args: Any) -> Result:
    """hastune_here, failing the test (instead of hanging it) past twice the limit."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 2 * LIMIT_S)
    try:
        return hastune_here(*args)
    except _Hang:
        pytest.fail(f"hastune {' '.join(map(str, args))}: no answer in {2 * LIMIT_S:g} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def judge(r: Result, args: list, file: Path | str, key: str | None,
          codes: tuple[int, ...] = (0, 2)) -> dict | None:
    """The contract for one run with --json; the error object when it failed."""
    what = " ".join(map(str, args))[-300:]
    assert "Traceback" not in r.stderr + r.stdout, f"{what}: {r.stderr[-3000:]}"
    assert r.code in codes, f"{what}: exit {r.code}: {r.stderr[-2000:]} {r.stdout[-500:]}"
    assert r.cpu_s < LIMIT_S, f"{what}: answered in {r.cpu_s:.1f} CPU-s"
    obj = json.loads(r.stdout)  # the whole of stdout: one JSON object
    assert isinstance(obj, dict), obj
    if r.code != 2:
        return None
    assert obj.get("exit_code") == 2, obj
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: {r.stderr[-3000:]}"
    assert "Fix:" in lines[0], lines[0][:2000]
    for k in ("error", "file", "field", "fix", "message", "exit_code"):
        assert k in obj, (k, obj)
    name = Path(file).name
    assert obj["file"] and name in lines[0], f"{what}: file {file} not named: {lines[0][:2000]}"
    if key is not None:
        assert obj["field"], f"{what}: no field for a mutation of {key!r}: {lines[0][:2000]}"
        assert key in obj["field"] or key in obj["message"], \
            f"{what}: {key!r} not named: {lines[0][:2000]}"
    return obj


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """One folder for the module's files, and the shipped examples read once (built profiles
    cached), so a case's time is its own."""
    for rec in RECIPES:
        hastune_here("validate", rec)
    return tmp_path_factory.mktemp("hostile")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_file_is_answered(case: Case, work: Path) -> None:
    i = CASES.index(case)
    d = work / f"c{i}"
    d.mkdir()
    p = _write(case, d)
    whole = case.raw is not None
    for args in _commands(case, i, p):
        codes = (2,) if whole else (0, 2, 3) if args[0] == "simulate" else (0, 2)
        judge(run(*args, "--json"), args, p, case.key, codes)
        if i % PLAIN_EVERY == 0:  # the plain form: the same line, nothing on stdout about it
            r = run(*args)
            assert r.code in codes and "Traceback" not in r.stderr + r.stdout, r.stderr[-2000:]
            if r.code == 2:
                lines = r.stderr.strip().splitlines()
                assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr[-2000:]


# -- every file argument given as something that is not a readable file ----------------------

RECIPE = EX / "audio-ultravox-8xa100.yaml"
CONFIG = EX / "configs" / "epd-2-2-4.yaml"
ROOT_READS_ANYTHING = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def _not_a_file(kind: str, d: Path) -> Path:
    """A path of this kind under `d` (or a system one)."""
    p = d / f"{kind}.yaml"
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)  # reading it would block until a writer comes: never
    elif kind == "dev-zero":
        return Path("/dev/zero")  # endless
    elif kind == "symlink-loop":
        (d / "other.yaml").symlink_to(p)
        p.symlink_to(d / "other.yaml")
    elif kind == "unreadable":
        if ROOT_READS_ANYTHING:
            pytest.skip("root reads a file whatever its mode (proc-mem is the unreadable case "
                        "that holds as root)")
        p.write_text("kind: recipe\n", encoding="utf-8")
        p.chmod(0)
    elif kind == "proc-mem":
        return Path("/proc/self/mem")  # a regular file by stat() whose read fails (EIO)
    elif kind == "binary":
        p.write_bytes(bytes(range(256)) * 64)
    elif kind == "missing":
        pass
    return p


def _recipe_naming(key: str, value: Path, d: Path) -> Path:
    data = _absolute(_load(RECIPE), RECIPE)
    if key == "trace":
        data["workload"]["trace"] = str(value)
    else:
        data[key] = str(value)
    out = d / f"names-{key}.yaml"
    out.write_bytes(_dump(data, False))
    return out


# (command, the field that names the file where it is named inside a recipe)
ARG_FORMS: dict[str, tuple[Any, str | None]] = {
    "validate": (lambda f, d: ["validate", f], None),
    "simulate-recipe": (lambda f, d: ["simulate", f, "--config", CONFIG, *SIM], None),
    "simulate-config": (lambda f, d: ["simulate", RECIPE, "--config", f, *SIM], None),
    "profile-check": (lambda f, d: ["profile", "check", f], None),
    "model-inspect": (lambda f, d: ["model", "inspect", f], None),
    "recipe-profile": (lambda f, d: ["validate", _recipe_naming("profile", f, d)], "profile"),
    "recipe-trace": (lambda f, d: ["validate", _recipe_naming("trace", f, d)], "trace"),
    "recipe-space": (lambda f, d: ["validate", _recipe_naming("search_space", f, d)],
                     "search_space"),
    "recipe-model": (lambda f, d: ["validate", _recipe_naming("model", f, d)], "model"),
}
ARG_KINDS = ("directory", "fifo", "dev-zero", "symlink-loop", "unreadable", "proc-mem",
             "binary", "missing")
ARG_CASES = [(form, kind) for form in ARG_FORMS for kind in ARG_KINDS]
# through a subprocess (what a user runs), once per kind of path
SUBPROCESS = {("validate", k) for k in ("fifo", "dev-zero", "symlink-loop", "proc-mem")}


@pytest.mark.parametrize("form, kind", ARG_CASES, ids=[f"{f}:{k}" for f, k in ARG_CASES])
def test_a_file_argument_that_is_not_a_readable_file(form: str, kind: str, work: Path) -> None:
    d = work / f"arg-{form}-{kind}"
    d.mkdir()
    bad = _not_a_file(kind, d)
    build, key = ARG_FORMS[form]
    args = build(bad, d)
    r = hastune(*args, "--json", timeout=4 * LIMIT_S) if (form, kind) in SUBPROCESS \
        else run(*args, "--json")
    judge(r, args, bad, key, codes=(2,))


def test_the_cases_are_many_and_cover_every_file_and_value() -> None:
    assert len(CASES) + len(ARG_CASES) >= 500, len(CASES) + len(ARG_CASES)
    mutated = {c.src for c in CASES if c.path}
    assert set(RECIPES) | set(CONFIGS) | set(MODELS) <= mutated
    for src in (*RECIPES, *CONFIGS, *MODELS):  # every value reaches every file
        got = {repr(c.value)[:20] for c in CASES if c.src == src and c.path}
        assert all(repr(v)[:20] in got for _, v in VALUES), src
        assert {w for w, _ in WHOLE} <= {c.id.rsplit("=", 1)[1] for c in CASES
                                         if c.src == src and c.raw is not None}


# -- what the messages say: the tester's cases ------------------------------------------------

def _edited(src: Path, d: Path, change) -> Path:
    data = _absolute(_load(src), src) if src in RECIPES else _load(src)
    change(data)
    out = d / src.name
    out.write_bytes(_dump(data, False))
    return out


def _error(*args: Any) -> dict:
    r = run(*args, "--json")
    obj = judge(r, list(args), args[-1] if args[0] != "simulate" else args[3], None, codes=(2,))
    assert obj is not None
    return obj


def test_an_unknown_gpu_names_the_recipe_and_the_closest_gpu(tmp_path: Path) -> None:
    rec = _edited(RECIPE, tmp_path, lambda d: d["cluster"].update(gpu="a100-80gbx"))
    e = _error("validate", rec)
    assert e["file"] == str(rec) and e["field"] == "cluster.gpu", e
    assert "did you mean a100-80gb?" in e["error"], e


@pytest.mark.parametrize("kind", ["directory", "dev-zero", "bomb", "bad-field"])
def test_a_bad_profile_names_the_profile_and_the_recipe_that_names_it(kind: str,
                                                                       tmp_path: Path) -> None:
    """The error is about the profile file (`file`), its own field where one is wrong, else
    `profile` (the recipe's field that named it); the message names the recipe too."""
    if kind == "bomb":
        from tests.robustness.inputs import bomb
        prof = tmp_path / "bomb.yaml"
        prof.write_text(bomb(), encoding="utf-8")
    elif kind == "bad-field":
        prof = _edited(PROFILE, tmp_path, lambda d: d["decode"].update(fixed_s=-1))
    else:
        prof = _not_a_file(kind, tmp_path)
    rec = _edited(RECIPE, tmp_path, lambda d: d.update(profile=str(prof)))
    e = _error("validate", rec)
    assert e["file"] == str(prof), e
    assert e["field"] == ("decode.fixed_s" if kind == "bad-field" else "profile"), e
    assert str(rec) in e["message"], e


def test_a_config_over_any_budget_names_its_pool(tmp_path: Path) -> None:
    cfg = _edited(CONFIG, tmp_path, lambda d: d.update(n_E=1_000_000))
    assert _error("validate", cfg)["field"] == "n_E"
    cfg = _edited(CONFIG, tmp_path, lambda d: d.update(n_E=1000))  # a valid file, 8 GPUs
    e = _error("simulate", RECIPE, "--config", cfg, *SIM)
    assert e["file"] == str(cfg) and e["field"] == "n_E", e


def _rename(path: tuple, new: str):
    def change(d: dict) -> None:
        node = d
        for k in path[:-1]:
            node = node[k]
        node[new] = node.pop(path[-1])
    return change


@pytest.mark.parametrize("src, path, typo, field", [
    (RECIPE, ("slo", "ttft_s"), "tfft_s", "slo.tfft_s"),
    (RECIPE, ("cluster", "gpus_per_node"), "gpus_per_nod", "cluster.gpus_per_nod"),
    (RECIPE, ("seed",), "Seed", "Seed"),
    (CONFIG, ("n_D",), "n_d", "n_d"),
    (PROFILE, ("decode", "per_seq_s"), "per_sequence_s", "decode.per_sequence_s"),
    (REPO / "search_spaces" / "epd.yaml", ("budget",), "budegt", "budegt"),
])
def test_a_misspelt_key_is_named_with_the_closest_valid_one(
        src: Path, path: tuple, typo: str, field: str, tmp_path: Path) -> None:
    changed = _edited(src, tmp_path, _rename(path, typo))
    if src.parent.name == "search_spaces":  # read through a recipe that names it
        rec = _edited(RECIPE, tmp_path, lambda d: d.update(search_space=str(changed)))
        e = judge(run("validate", rec, "--json"), ["validate"], changed, None, codes=(2,))
    else:
        e = _error("validate", changed)
    assert e is not None and e["file"] == str(changed) and e["field"] == field, e
    assert e["error"].startswith(f"unknown key {field}; did you mean {path[-1]}?"), e
    assert e["fix"] == f"rename {typo} to {path[-1]}", e
