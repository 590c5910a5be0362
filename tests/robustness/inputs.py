"""What the robustness suite runs: the real CLI, in a subprocess or in this process, and
broken copies of the shipped examples (only files of this repository; nothing from outside it).
"""

from __future__ import annotations

import contextlib
import copy
import io
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "audio-ultravox-8xa100.yaml"   # epd, 8 GPUs, audio
CONFIG = REPO / "examples" / "configs" / "epd-2-2-4.yaml"
PROFILE = REPO / "profiles" / "a100-80gb" / "ultravox-v0.6-27b.yaml"
SPACE = REPO / "search_spaces" / "epd.yaml"
GOOD_LINE = '{"prompt_tokens": 100, "output_tokens": 50}\n'
LIMIT_S = 5.0  # every bad input is answered within this many CPU-seconds


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float = 0.0  # the command's own CPU time: what "answered promptly" is judged by,
    # not its wall time, which a loaded CI machine stretches (a hang is the timeout's)


def hastune(*args: str | Path, timeout: float = 60) -> Result:
    """`python -m hastune ARGS` in a subprocess (what a user runs)."""
    t0, c0 = time.perf_counter(), _children_cpu()
    p = subprocess.run([sys.executable, "-m", "hastune", *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, cwd=REPO)
    return Result(p.returncode, p.stdout, p.stderr, time.perf_counter() - t0,
                  _children_cpu() - c0)


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def hastune_here(*args: str | Path) -> Result:
    """The CLI's main() in this process (fast, for generated inputs). An exception other than
    the ones main() turns into an exit code propagates: that is a traceback for a user."""
    from hastune.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["hastune", *map(str, args)]
    t0, c0 = time.perf_counter(), time.process_time()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return Result(code, out.getvalue(), err.getvalue(), time.perf_counter() - t0,
                  time.process_time() - c0)


def load(src: Path) -> dict:
    return yaml.safe_load(src.read_text(encoding="utf-8"))


def write(dst: Path, data: object) -> Path:
    dst.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return dst


def edited(src: Path, dst: Path, change: Callable[[dict], object]) -> Path:
    """A copy of YAML `src` at `dst` with `change` applied to the mapping in place."""
    data = copy.deepcopy(load(src))
    change(data)
    return write(dst, data)


def put(dotted: str, value: object) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *head, last = dotted.split(".")
        for key in head:
            data = data.setdefault(key, {})
        data[last] = value
    return change


def text(path: Path, body: str | bytes) -> Path:
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body, encoding="utf-8")
    return path


def bomb(levels: int = 9) -> str:
    """A "billion laughs" recipe: each level lists the previous nine times (9**levels)."""
    lines = ["kind: recipe", 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", '
             '"lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"
