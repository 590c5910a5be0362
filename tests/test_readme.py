"""The README and the help say what the code does: every command in the README's table, every
package in its Layout, its two commands the ones .ci/run runs, and help text a user can read
(markup not eaten, no hard wraps mid-sentence, no placeholders)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.robustness.inputs import hastune_here

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _commands() -> list[list[str]]:
    """Every command and sub-command the CLI registers, as argv prefixes."""
    from typer.main import get_command

    from hastune.cli import _register, app

    _register()
    root = get_command(app)
    out = []
    for name, cmd in root.commands.items():
        out.append([name])
        for sub in getattr(cmd, "commands", {}) or {}:
            out.append([name, sub])
    return out


def test_every_command_is_in_the_readme_table() -> None:
    table = README[README.index("## Commands"):README.index("## Exit codes")]
    for argv in _commands():
        assert f"`hastune {' '.join(argv)}" in table, argv


def test_the_layout_names_every_package() -> None:
    layout = README[README.index("## Layout"):]
    for top in ("hastune", "runners"):
        for d in sorted((REPO / top).iterdir()):
            if (d / "__init__.py").is_file():
                assert f"`{d.name}/`" in layout or f"`{top}/{d.name}/`" in layout, d


def test_ci_runs_the_readmes_own_commands() -> None:
    spec = importlib.util.spec_from_file_location("readme_blocks",
                                                  REPO / ".ci" / "readme_blocks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    install = mod.block(README, mod.SECTIONS["install"])
    test = mod.block(README, mod.SECTIONS["test"])
    assert "pip install torch==2.13.0" in install and ".[test,ray,kernels,gateway]" in install
    assert "hastune tune examples/" in install and "scripts/test" in test
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_blocks.py install" in run and "readme_blocks.py test" in run
    assert "pip install" not in run  # everything it installs, the README's line installs


WIDTH = 78  # click fills help to min(terminal, 80) - 2 columns


def _help(*argv: str) -> str:
    r = subprocess.run([sys.executable, "-m", "hastune", *argv, "--help"], capture_output=True,
                       text=True, timeout=60, env={"COLUMNS": str(WIDTH + 2),
                                                   "PATH": "/usr/bin:/bin", "TERM": "dumb"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def _option_help(text: str, option: str) -> str:
    """The help of one option in click's plain listing: its line and the indented ones after."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(option))
    end = next((i for i in range(start + 1, len(lines))
                if re.match(r"\s{2}-", lines[i]) or not lines[i].strip()), len(lines))
    return " ".join(line.strip() for line in lines[start:end])


def _paragraphs(text: str) -> list[list[str]]:
    """The description's paragraphs (between Usage and the first listing) and the epilog's."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if re.match(r"^(Arguments|Options|Commands):", line)]
    desc = lines[1:heads[0]] if heads else lines[1:]
    last = lines[heads[-1]:] if heads else []
    epilog = [line for line in last if line.startswith("  Exit codes")]
    if epilog:
        last = last[last.index(epilog[0]):]
    out: list[list[str]] = []
    for block in (desc, last if epilog else []):
        para: list[str] = []
        for line in [*block, ""]:
            if line.strip():
                para.append(line)
            elif para:
                out.append(para)
                para = []
    return out


def test_profile_build_help_shows_the_install_line() -> None:
    assert "pip install 'hastune[kernels]'" in " ".join(_help("profile", "build").split())


def test_serve_backend_help_mentions_no_evaluator() -> None:
    backend = _option_help(_help("serve"), "--backend")
    assert "ray" in backend and "--evaluator" not in backend, backend
    assert "--evaluator real" in _option_help(_help("evaluate"), "--backend")


@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(a))
def test_help_has_no_bool_placeholders_or_hard_wraps(argv: list[str]) -> None:
    text = _help(*argv)
    assert "<bool>" not in text
    # a paragraph is filled: each line but the last is broken only where the next word would
    # not fit (a docstring's own line breaks, kept, end lines early, mid-sentence)
    for para in _paragraphs(text):
        for line, nxt in zip(para, para[1:]):
            if line.lstrip().startswith(("-", "*", "•")) or nxt.lstrip().startswith(("-", "•")):
                continue  # a list the docstring laid out on purpose
            word = nxt.split()[0]
            assert len(line) + 1 + len(word) > WIDTH, f"{line!r} / {nxt!r}"


def test_root_help_lists_every_exit_code_in_one_paragraph() -> None:
    from hastune.errors import EXIT_BRIEF

    paras = _paragraphs(_help())
    epilog = " ".join(" ".join(line.split()) for line in paras[-1])
    assert epilog.startswith("Exit codes:")
    for code, brief in EXIT_BRIEF.items():
        assert f"{code} {' '.join(brief.split())}" in epilog


def test_export_json_is_one_object_with_its_exit_code(tmp_path: Path) -> None:
    """`export --json` says its exit code, as errors do, and prints one object either way."""
    import json

    config = REPO / "examples" / "configs" / "audio-epd-4-0-4.yaml"  # co-resident prefill
    recipe = REPO / "examples" / "audio-ultravox-8xa100.yaml"
    for engine, code in (("runners", 0), ("vllm", 2)):
        r = hastune_here("export", config, "-r", recipe, "-e", engine, "-o", tmp_path / engine,
                         "--json")
        assert r.code == code, r.stderr
        out = json.loads(r.stdout)  # one object, nothing else on stdout
        assert out["exit_code"] == code
