"""Issue 34: does compiling the simulator as it stands make it faster? Copies HEAD into a
temporary folder, compiles every module of hastune/sim, hastune/policies and
hastune/stability.py with Cython (unchanged source, Cython's annotation typing on), and runs
benchmarks/sim_speed.py there and in this tree, one after the other, on the cases given.

    pip install 'cython>=3,<4'
    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/cython_plain.py [--only 2-2-4] [--repeat 3]

Measured 2026-12-06 (Cython 3.3.1, one core of the 2-core machine, `--only 2-2-4 --repeat
3`; simulated requests per second, best of 3, compiled / pure Python): audio epd-static 2-2-4
98.9k / 104.9k, image epd 2-2-4 65.3k / 78.2k, video epd 2-2-4 70.0k / 75.4k; one evaluate
1.215 / 1.165 s, 0.825 / 0.786 s, 0.595 / 0.550 s. Compiled is 5-16% slower: the per-event
work is attribute access on Python objects, heap tuples and bound-method calls, which Cython
leaves as Python C-API calls. A compiled core has to change the data layout (typed classes,
arrays), not just compile the modules: hastune/sim/_core.pyx does that for EPD runs (C event
records, workers and request numbers in C fields and arrays), 7-11x the Python path
(docs/simulator.md, Measured).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = """
import glob, sys
from setuptools import setup
from Cython.Build import cythonize
mods = [m for m in glob.glob("hastune/sim/**/*.py", recursive=True)
        + glob.glob("hastune/policies/*.py") + ["hastune/stability.py"]
        if not m.endswith("__init__.py")]
setup(name="plain", script_args=["build_ext", "--inplace"],
      ext_modules=cythonize(mods, compiler_directives={"language_level": 3, "binding": True},
                            quiet=True))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="2-2-4")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        import Cython  # noqa: F401
    except ImportError:
        sys.exit("pip install 'cython>=3,<4' first")
    speed = ["benchmarks/sim_speed.py", "--only", args.only, "--repeat", str(args.repeat)]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        (Path(tmp) / "build_plain.py").write_text(BUILD)
        subprocess.run([sys.executable, "build_plain.py"], cwd=tmp, check=True,
                       capture_output=True)
        built = glob.glob(f"{tmp}/hastune/**/*.so", recursive=True)
        print(f"compiled {len(built)} modules")
        for label, tree in (("compiled", tmp), ("pure Python", str(ROOT))):
            print(f"--- {label}")
            env = {**os.environ, "PYTHONPATH": tree}
            subprocess.run([sys.executable, *speed], cwd=tree, env=env, check=True)


if __name__ == "__main__":
    main()
