"""Builds the simulator's compiled core (hastune/sim/_core.pyx, issue 34) with the
package; everything else is in pyproject.toml. Without a C compiler the build still succeeds
(the extension is optional) and the simulator runs its Python reference path, which gives
the same results more slowly (`hastune.sim.epd.core_name()` says which one runs)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

# -ffp-contract=off: no fused multiply-add, so every double is the one Python computes
EXT = Extension("hastune.sim._core", ["hastune/sim/_core.pyx"],
                extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
                optional=True)

setup(ext_modules=cythonize([EXT], language_level=3, quiet=True))
