"""The package layering of hastune/ and runners/, read from the source with ast.

Every import counts, at module level or inside a function (a lazy import is still a
dependency), except those under `if TYPE_CHECKING:` (annotations only, never run). A group may
import itself and the groups of a lower layer, nothing above and nothing beside it: LAYERS
below is the intended order, lowest first. The group graph must also have no cycle, and the
rules the refactor of issue 10 set are spelled out once more in FORBIDDEN, so that an edit of
the table cannot quietly allow them. Inside a group the modules must not import each other in
a loop either (the module graph has no cycle). Every module is named by its group: a prefix
matches a module and its submodules, a name ending in `$` that module alone, so a new module
outside every listed prefix fails test_every_module_is_in_a_group until it is placed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hastune", "runners")

# (layer, group, module prefixes). A module belongs to the group of its longest matching
# prefix. Lowest layer first; groups of one layer must not import each other.
LAYERS: list[tuple[int, str, tuple[str, ...]]] = [
    # the lowest ground: inputs and their validation — recipes, configs and the architecture
    # registry they are checked against (hastune.archs names its simulators as strings and
    # receives timing and bounds objects, so it imports nothing above) — the run record,
    # goodput's search, JSON
    (0, "hastune core", ("hastune$", "hastune.errors", "hastune.schema", "hastune.yamlio",
                         "hastune.jsonio", "hastune.interrupt", "hastune.procs",
                         "hastune.cluster", "hastune.archs", "hastune.config",
                         "hastune.models",  # models: configs → shapes (issue 12)
                         "hastune.data", "hastune.model_ref", "hastune.profile",
                         "hastune.recipe", "hastune.workload", "hastune.space", "hastune.runs",
                         "hastune.goodput", "hastune.repeats", "hastune.stability",
                         "hastune.engine_fitted", "hastune.engine_terms", "hastune.caveats",
                         "hastune.regimes",  # a result's measured error by regime (issue 36)
                         "hastune.speculative",  # MTP's decode step per token (issue 36)
                         "hastune.worklimit", "hastune.standin",
                         "hastune.cost")),  # prices and the objective (issue 37)
    # device primitives with torch passed in (green contexts): nothing of hastune
    (0, "runners.device", ("runners$", "runners.device")),
    # a tuned config as the launch files of vLLM, SGLang, Dynamo or the bundled engine
    (1, "hastune.export", ("hastune.export",)),
    # pure, clock-agnostic scheduling policies (simulator and engine share them)
    (2, "hastune.policies", ("hastune.policies",)),
    # the reference model (torch): nothing of hastune
    (2, "runners.model", ("runners.model",)),
    # the simulators and the engine: beside each other, never importing each other
    (3, "hastune.sim", ("hastune.sim",)),
    (3, "runners.engine", ("runners.engine",)),
    # measuring a real model on a real device (uses runners.model and runners.device)
    (4, "hastune.calibrate", ("hastune.calibrate",)),
    # EAServe's runtime over real engine servers (the policies, the engine's admission gate)
    (4, "runners.gateway", ("runners.gateway",)),
    # evaluators: goodput of a config by simulation or on the engine, and pruning's bounds
    (5, "hastune evaluators", ("hastune.evaluators", "hastune.prune")),
    # the tuner (HAS: pruning + Bayesian optimisation) and planning on it (fewest GPUs)
    (6, "hastune.tune", ("hastune.tune", "hastune.plan", "hastune.plan_outputs")),
    # the simulator scored against measured runs of real engines (issue 13)
    (6, "hastune.fidelity", ("hastune.fidelity",)),
    # the command line, on top of everything
    (7, "hastune.cli", ("hastune.cli", "hastune.__main__")),
]

# Imports that must never exist whatever LAYERS says: (from group, to group, why).
FORBIDDEN: list[tuple[str, str, str]] = [
    ("hastune.tune", "hastune.cli", "the tuner is a library; the CLI wraps it"),
    *[(low, high, "a lower layer imports the tuner or the CLI")
      for low in ("hastune core", "hastune.export", "hastune.policies", "hastune.sim",
                  "hastune.calibrate", "hastune evaluators", "runners.device",
                  "runners.model", "runners.engine", "runners.gateway")
      for high in ("hastune.cli", "hastune.tune")],
    *[(r, h, "runners run deployments; they do not simulate, calibrate or tune")
      for r in ("runners.device", "runners.model", "runners.engine")
      for h in ("hastune.sim", "hastune.calibrate", "hastune.tune", "hastune.cli",
                "hastune evaluators")],
    ("hastune.policies", "hastune.sim", "policies are shared by simulator and engine"),
    ("hastune.policies", "runners.engine", "policies are shared by simulator and engine"),
    ("hastune.policies", "runners.model", "policies are shared by simulator and engine"),
    ("hastune core", "runners.engine", "the core must stay light (no torch)"),
    ("hastune core", "runners.model", "the core must stay light (no torch)"),
]

LAYER = {g: layer for layer, g, _ in LAYERS}
PREFIXES = sorted(((p, g) for _, g, ps in LAYERS for p in ps), key=lambda x: -len(x[0]))


def group_of(module: str) -> str:
    for p, g in PREFIXES:
        if module == p.rstrip("$") or (not p.endswith("$") and module.startswith(p + ".")):
            return g
    raise KeyError(f"{module} is in no group of LAYERS: add it to the table")


@dataclass(frozen=True)
class Import:
    file: str   # relative to the repository root
    line: int
    source: str  # the importing module
    target: str  # the imported module
    text: str    # the statement as written

    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    p = ROOT.joinpath(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under `body` except the bodies of `if TYPE_CHECKING:`."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(reversed(node.orelse))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def imports_in(src: str, rel: str) -> Iterator[Import]:
    """The imports of hastune/runners modules in the source of file `rel` (a path relative to
    the repository root), at module or function level."""
    path = ROOT / rel
    tree = ast.parse(src, filename=rel)
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in _nodes(tree.body):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            # `from hastune import archs` depends on hastune.archs, not on hastune/__init__
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base
                       for a in node.names]
        else:
            continue
        text = " ".join((ast.get_source_segment(src, node) or "").split())
        for t in dict.fromkeys(targets):
            if t.split(".")[0] in PACKAGES:
                yield Import(rel, node.lineno, me, t, text)


def all_imports() -> list[Import]:
    out: list[Import] = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out.extend(imports_in(path.read_text(), str(path.relative_to(ROOT))))
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as [a, b, ..., a] (no self-loops count), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node:
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n, [])
            if found:
                return found
    return None


def violations(imports: list[Import]) -> list[str]:
    forbidden = {(a, b): why for a, b, why in FORBIDDEN}
    out = []
    for imp in imports:
        a, b = group_of(imp.source), group_of(imp.target)
        if a == b:
            continue
        why = forbidden.get((a, b))
        if why is None and LAYER[b] >= LAYER[a]:
            why = (f"layer {LAYER[a]} imports layer {LAYER[b]}"
                   + (" beside it" if LAYER[b] == LAYER[a] else " above it"))
        if why is not None:
            out.append(f"{imp.where()}  [{a} → {b}: {why}]")
    return out


def group_graph(imports: list[Import]) -> tuple[dict[str, set[str]], dict[tuple, Import]]:
    graph: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for imp in imports:
        a, b = group_of(imp.source), group_of(imp.target)
        if a != b:
            graph.setdefault(a, set()).add(b)
            witness.setdefault((a, b), imp)
    return graph, witness


def test_every_module_is_in_a_group():
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            group_of(module_name(path))


def test_forbidden_pairs_are_also_excluded_by_the_layers():
    # the table and the explicit rules agree: every forbidden import goes up or sideways
    for a, b, _ in FORBIDDEN:
        assert LAYER[b] >= LAYER[a], (a, b)


def test_imports_follow_the_layers():
    bad = violations(all_imports())
    assert not bad, "imports against the layering (tests/test_layering.py LAYERS):\n" + \
        "\n".join(bad)


def test_groups_have_no_import_cycle():
    graph, witness = group_graph(all_imports())
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"  {a} → {b}: {witness[(a, b)].where()}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle between groups:\n" + "\n".join(steps))


def test_a_bad_import_is_caught():
    """The checker itself: the engine's load.py with a lazy import of the simulator added is
    reported with its file and line; one under `if TYPE_CHECKING:` is not."""
    rel = "runners/engine/load.py"
    src = (ROOT / rel).read_text()
    n = src.count("\n")
    src += ("\n\ndef _probe():\n    from hastune.sim.common import EventLoop\n"
            "    return EventLoop\n\n\nif TYPE_CHECKING:\n    from hastune.cli import app\n")
    assert violations(list(imports_in((ROOT / rel).read_text(), rel))) == []
    bad = violations(list(imports_in(src, rel)))
    assert bad == [f"{rel}:{n + 4}: from hastune.sim.common import EventLoop  "
                   "[runners.engine → hastune.sim: runners run deployments; they do not "
                   "simulate, calibrate or tune]"]


def module_graph(imports: list[Import]) -> tuple[dict[str, set[str]], dict[tuple, Import]]:
    graph: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for imp in imports:
        if imp.source != imp.target:
            graph.setdefault(imp.source, set()).add(imp.target)
            witness.setdefault((imp.source, imp.target), imp)
    return graph, witness


def _cycle_text(imports: list[Import]) -> str | None:
    graph, witness = module_graph(imports)
    cycle = find_cycle(graph)
    if not cycle:
        return None
    return "\n".join(f"  {a} → {b}: {witness[(a, b)].where()}"
                     for a, b in zip(cycle, cycle[1:]))


def test_modules_have_no_import_cycle():
    """No module of hastune/ or runners/ reaches itself through imports, those inside
    functions included: a lazy import hides a dependency from the reader, not from the
    loop."""
    found = _cycle_text(all_imports())
    assert found is None, "import cycle between modules:\n" + found


def test_a_planted_back_import_is_caught():
    """The module check itself: tune/search.py importing the runner that imports it, inside
    a function, is a cycle (named with its file and line); the same under TYPE_CHECKING is
    not. A core module importing the tuner lazily is a layering violation."""
    imports = all_imports()
    rel = "hastune/tune/search.py"
    src = (ROOT / rel).read_text()
    n = src.count("\n")
    planted = src + ("\n\ndef _back():\n    from hastune.tune.runner import Tuner\n"
                     "    return Tuner\n")
    others = [i for i in imports if i.file != rel]
    assert _cycle_text(others + list(imports_in(src, rel))) is None
    found = _cycle_text(others + list(imports_in(planted, rel)))
    assert found is not None and f"{rel}:{n + 4}: from hastune.tune.runner import Tuner" in found
    hidden = src + "\n\nif TYPE_CHECKING:\n    from hastune.tune.runner import Tuner\n"
    assert _cycle_text(others + list(imports_in(hidden, rel))) is None
    core = "hastune/config.py"
    lazy = (ROOT / core).read_text() + "\n\ndef _t():\n    from hastune.tune import api\n"
    bad = violations(list(imports_in(lazy, core)))
    assert len(bad) == 1 and "hastune core → hastune.tune" in bad[0]


def test_a_module_outside_every_group_is_refused():
    """No catch-all: a new top-level module must be placed in LAYERS."""
    import pytest

    with pytest.raises(KeyError, match="hastune.newthing is in no group"):
        group_of("hastune.newthing")
    assert group_of("hastune") == "hastune core" and group_of("runners") == "runners.device"


# -- the cycle finder on generated graphs ---------------------------------------------------

def _reaches(graph: dict[str, set[str]], a: str, b: str) -> bool:
    seen, todo = set(), [a]
    while todo:
        n = todo.pop()
        for m in graph.get(n, ()):
            if m == b:
                return True
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return False


NODES = st.sampled_from("abcdef")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NODES, NODES), max_size=12))
def test_find_cycle_finds_a_cycle_exactly_when_there_is_one(edges):
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    no_loops = {k: v - {k} for k, v in graph.items()}
    has_cycle = any(_reaches(no_loops, n, n) for n in no_loops)
    cycle = find_cycle(graph)
    assert (cycle is not None) == has_cycle
    if cycle:
        assert cycle[0] == cycle[-1] and len(cycle) >= 3
        assert len(set(cycle[:-1])) == len(cycle) - 1  # a simple cycle
        assert all(b in graph[a] for a, b in zip(cycle, cycle[1:]))
