"""Safe YAML reading with errors that name the file (never `yaml.load` on user input).

Limits (every recipe, deployment config, search space and profile goes through here):
- the file must be a regular file (not a directory, FIFO or device) of at most MAX_BYTES
  (10 MiB; the shipped ones are under 6 KB), checked with stat() before anything is read;
- at most MAX_NODES YAML nodes (100,000), an alias counting as every node it repeats, so an
  anchor bomb ("billion laughs") is refused as it is composed, long before it is expanded;
  an alias may not refer to a node that contains it;
- nesting at most MAX_DEPTH (64) levels deep.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.resolver import Resolver

from hastune.errors import InputError

MAX_BYTES = 10 * 1024 * 1024
MAX_NODES = 100_000
MAX_DEPTH = 64

try:  # libyaml parses (fast); composing stays in Python, where the limits are counted
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)


class TooLarge(yaml.MarkedYAMLError):
    """The document passes a limit of this module (nodes, alias expansion, depth)."""


class _UniqueKeyLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A SafeLoader (safe constructors, standard resolver) that refuses duplicate keys instead
    of silently keeping the last one, and counts what it composes (the module's limits)."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._expanded = 0                     # nodes so far, aliases expanded
        self._depth = 0
        self._sizes: dict[yaml.Node, int] = {}  # anchored node → nodes it stands for

    def _count(self, n: int, mark: Any) -> None:
        self._expanded += n
        if self._expanded > MAX_NODES:
            raise TooLarge(None, None, f"more than {MAX_NODES:,} YAML nodes, an alias counting "
                           "as all the nodes it repeats (an alias bomb, or not a hastune "
                           "input)", mark)

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(node)
            if size is None:
                raise TooLarge(None, None, f"the alias *{event.anchor} refers to a node that "
                               "contains it (a loop)", event.start_mark)
            self._count(size, event.start_mark)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise TooLarge(None, None, f"nested more than {MAX_DEPTH} levels deep",
                           event.start_mark)
        start = self._expanded
        self._count(1, event.start_mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if event.anchor is not None:
            self._sizes[node] = self._expanded - start
        return node


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def check_file(path: str | Path, what: str, limit: int = MAX_BYTES) -> None:
    """InputError unless `path` is a regular file of at most `limit` bytes (a missing path, a
    directory, a FIFO or device — whose reading would block or never end —, a larger file)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(p, None, f"{what} file not found", "check the path") from None
    except OSError as exc:
        raise InputError(p, None, f"cannot read the {what} file ({exc.strerror})",
                         "check the path and its permissions") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(p, None, f"expected a {what} file, got a directory",
                         f"give the path of a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(p, None, f"expected a {what} file, got a device, pipe or socket",
                         f"give the path of a regular {what} file")
    if st.st_size > limit:
        raise InputError(p, None, f"the {what} file is {st.st_size / 2**20:.1f} MiB, over the "
                         f"{limit / 2**20:g} MiB limit", f"give a {what} file under "
                         f"{limit / 2**20:g} MiB")


def read_text(path: str | Path, what: str, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes; InputError otherwise (see
    check_file; and bytes that are not UTF-8)."""
    p = Path(path)
    check_file(p, what, limit)
    try:
        with p.open("rb") as fh:
            raw = fh.read(limit + 1)  # the file may have grown since stat()
    except OSError as exc:
        raise InputError(p, None, f"cannot read the {what} file ({exc.strerror})",
                         "check the path and its permissions") from None
    if len(raw) > limit:
        raise InputError(p, None, f"the {what} file is over the {limit / 2**20:g} MiB limit",
                         f"give a {what} file under {limit / 2**20:g} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(p, None, "not a UTF-8 text file", f"give a YAML {what} file") from None


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping; `what` names the kind of file."""
    p = Path(path)
    text = read_text(p, what)
    try:
        loader = _UniqueKeyLoader(text)
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except TooLarge as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(p, None, f"refused{where}: {exc.problem}",
                         f"write the {what} out plainly (aliases for small parts only)"
                         ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        problem = exc.problem or exc.context or "invalid YAML"
        fix = "correct the YAML syntax there"
        if problem.startswith("duplicate key"):
            fix = "keep only one of the two entries for that key"
        elif problem.startswith("could not determine a constructor"):
            fix = "remove the tag: only plain YAML (no !!python or custom tags) is read"
        raise InputError(p, None, f"invalid YAML at {where}: {problem}", fix) from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())  # one line
        raise InputError(p, None, f"invalid YAML: {problem}", "correct the YAML syntax") from None
    except RecursionError:  # a constructor's own recursion (depth is capped above it)
        raise InputError(p, None, "invalid YAML: nested too deeply",
                         "write the file out plainly") from None
    if data is None:
        raise InputError(p, None, f"the {what} file is empty", f"write a {what} in it")
    if not isinstance(data, dict):
        raise InputError(
            p, None, f"a {what} must be a YAML mapping, got a {type(data).__name__}",
            "write key: value lines at the top level",
        )
    return data
