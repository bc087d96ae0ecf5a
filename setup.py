"""Builds shmq's compiled hot paths (shmq/_speedups/*.pyx, Cython) next to the pure-Python package.

Everything else is in pyproject.toml. The extension is optional at build time: where no C
compiler or Python headers exist, the build says so and installs the pure-Python package,
which works the same (slower). ``CFLAGS`` is honoured, so a sanitizer build is
``CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" pip install -e .`` (see
``make sanitize``).
"""

from __future__ import annotations

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning, not a failed install: shmq runs without its speedups. The
    modules compile in parallel, one per core (each is a large C file at -O3)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler, no headers: distutils raises several kinds
            self._warn(e)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - the build goes on without the compiled paths
            self._warn(e)

    @staticmethod
    def _warn(e: Exception) -> None:
        print(
            f"shmq: building the compiled paths failed ({e}); the pure-Python paths will be used "
            "(install a C compiler and the Python headers, then reinstall)",
            file=sys.stderr,
        )


def extensions() -> list[Extension]:
    sources = sorted(glob.glob(os.path.join("shmq", "_speedups", "*.pyx")))
    if not sources:
        return []
    from Cython.Build import cythonize  # a build requirement (pyproject.toml)

    exts = [
        Extension(
            f"shmq._speedups.{os.path.splitext(os.path.basename(s))[0]}",
            [s],
            extra_compile_args=["-O3", "-Wno-unreachable-code"],
        )
        for s in sources
    ]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={"boundscheck": False, "wraparound": False, "cdivision": True, "initializedcheck": False},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
