"""Only the optional C accelerator lives here; everything else is in pyproject.toml.

`torchneck.trace._scan` decodes trace slices straight into columns (see its source). It is
optional: where no C compiler is at hand the build goes on without it and the loader uses the
pure-Python decoder, with the same results, only slower.
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]
setup(ext_modules=[Extension("torchneck.trace._scan", ["src/torchneck/trace/_scan.c"],
                             extra_compile_args=flags, optional=True)])
