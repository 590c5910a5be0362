"""Builds the simulator's compiled core (hastune/sim/_core.pyx, issue 34) with the
package; everything else is in pyproject.toml. Without a C compiler the build still succeeds
(the extension is optional) and the simulator runs its Python reference path, which gives
the same results more slowly (`hastune.sim.epd.core_name()` says which one runs)."""

import hashlib
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

SOURCE = "hastune/sim/_core.pyx"
# the source it was built from, so that a checkout whose _core.pyx changed since its last
# build runs the Python path rather than a stale core (hastune.sim.compiled)
SHA = hashlib.sha256(Path(__file__).with_name("hastune").joinpath("sim", "_core.pyx")
                     .read_bytes()).hexdigest()
# -ffp-contract=off: no fused multiply-add, so every double is the one Python computes
EXT = Extension("hastune.sim._core", [SOURCE],
                extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
                define_macros=[("HASTUNE_CORE_SHA", f'"{SHA}"')], optional=True)

setup(ext_modules=cythonize([EXT], language_level=3, quiet=True))
