"""The user docs stay user docs: each page in docs/ is short enough to read (≤ 450 lines), carries
no dated lab-notebook entries (those live in docs/notes/, linked from the page they left), and
every relative link in docs/ and docs/notes/ — and every docs/ page the README or the code
names — points at a file that exists, and at a heading of it where it names one."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
NOTES = DOCS / "notes"
USER_DOCS = sorted(DOCS.glob("*.md"))
NOTE_DOCS = sorted(NOTES.glob("*.md"))
MAX_LINES = 450
DATE = re.compile(r"20[0-9]{2}-[0-9]{2}-[0-9]{2}")

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_CODESPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def _unfenced(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def _prose(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, inline code spans blanked."""
    return [(n, _CODESPAN.sub(lambda m: " " * len(m.group(0)), line))
            for n, line in _unfenced(text)]


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every relative link or image in markdown text: inline `[x](t)` and
    reference definitions `[x]: t`; URLs with a scheme (http:, mailto:) are not relative."""
    out = []
    for n, line in _prose(text):
        targets = [m.group(1) for m in _INLINE.finditer(line)]
        ref = _REFDEF.match(line)
        if ref:
            targets.append(ref.group(1))
        out += [(n, t) for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t)]
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation but '-' and '_'
    removed, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _unfenced(text):  # a heading's code spans are part of its name
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken(page: Path) -> list[str]:
    """Every relative link of a markdown file whose file, or heading, is not there."""
    text = page.read_text(encoding="utf-8")
    bad = []
    for n, target in links(text):
        path, _, frag = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page.relative_to(REPO) if page.is_relative_to(REPO) else page}:{n}: {target}"
        if not dest.exists():
            bad.append(f"{where} (no such file)")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest.read_text("utf-8")):
            bad.append(f"{where} (no heading #{frag})")
    return bad


def test_the_link_checker_finds_links_and_misses(tmp_path: Path) -> None:
    text = ("# A `code` heading: (x) & y\n\n## Twice\n\n## Twice\n\n"
            "See [a](a.md#part-two), ![img](pic.png \"t\"), [web](https://x.org/y.md), "
            "[here](#a-code-heading-x--y) and [dup](#twice-1).\n"
            "`[not](a link.md)` in code\n```\n[nor](this.md)\n```\n[ref]: <refd.md>\n")
    assert links(text) == [(7, "a.md#part-two"), (7, "pic.png"), (7, "#a-code-heading-x--y"),
                           (7, "#twice-1"), (12, "refd.md")]
    assert anchors(text) == {"a-code-heading-x--y", "twice", "twice-1"}
    assert slug("Simulator proposes, engine confirms (`--recheck K`)") == \
        "simulator-proposes-engine-confirms---recheck-k"
    assert slug("SGLang's clients") == "sglangs-clients"
    page = tmp_path / "page.md"
    (tmp_path / "a.md").write_text("# Part one\n")
    (tmp_path / "refd.md").write_text("x\n")
    page.write_text(text)
    got = broken(page)
    assert len(got) == 2, got  # a.md has no "Part two"; pic.png is not there
    assert "no heading #part-two" in got[0] and "pic.png (no such file)" in got[1]
    (tmp_path / "a.md").write_text("# Part one\n\n## Part two\n")
    (tmp_path / "pic.png").write_bytes(b"")
    assert broken(page) == []


def test_there_are_docs_to_check() -> None:
    names = {p.name for p in USER_DOCS}
    assert {"fidelity.md", "engine-runtime.md", "simulator.md", "tuning.md"} <= names, names
    assert NOTES.is_dir() and NOTE_DOCS, "docs/notes/ holds the measurement history"


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: p.name)
def test_user_doc_is_short(page: Path) -> None:
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{page.name}: {n} lines; move history or derivations to docs/notes/"


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: p.name)
def test_user_doc_has_no_dated_entries(page: Path) -> None:
    dated = [f"{page.name}:{n}: {line.strip()}"
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if DATE.search(line)]
    assert not dated, "dated entries belong in docs/notes/:\n" + "\n".join(dated)


@pytest.mark.parametrize("page", USER_DOCS + NOTE_DOCS, ids=lambda p: str(p.relative_to(DOCS)))
def test_links_resolve(page: Path) -> None:
    assert not (bad := broken(page)), "\n".join(bad)


def test_every_note_is_linked_from_a_user_doc() -> None:
    linked = set()
    for page in USER_DOCS:
        for _, target in links(page.read_text(encoding="utf-8")):
            path = target.partition("#")[0]
            if path:
                linked.add((page.parent / unquote(path)).resolve())
    assert any(p.resolve() in linked for p in NOTE_DOCS), "no doc links docs/notes/"
    orphans = [p.name for p in NOTE_DOCS if p.resolve() not in linked]
    assert not orphans, f"notes no doc in docs/ links to: {orphans}"


_NAMED = re.compile(r"\bdocs/([\w.-]+\.md)(#[\w-]+)?")


def _naming_files() -> list[Path]:
    files = [REPO / "README.md"]
    for top, pattern in (("hastune", "*.py"), ("runners", "*.py"), ("benchmarks", "*.py"),
                         ("scripts", "*.py"), ("examples", "*.py"), ("examples", "*.yaml")):
        files += sorted((REPO / top).rglob(pattern))
    return [f for f in files if f.is_file()]


def test_docs_named_by_the_readme_and_the_code_exist() -> None:
    """`docs/x.md` and `docs/x.md#heading` in the README, code and examples name real pages."""
    bad = []
    for f in _naming_files():
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in _NAMED.finditer(line):
                page = DOCS / m.group(1)
                where = f"{f.relative_to(REPO)}:{n}: {m.group(0)}"
                if not page.is_file():
                    bad.append(f"{where} (no such page)")
                elif m.group(2) and m.group(2)[1:] not in anchors(page.read_text("utf-8")):
                    bad.append(f"{where} (no such heading)")
    assert not bad, "\n".join(bad)
