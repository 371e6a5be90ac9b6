"""Only the optional C accelerators live here; everything else is in pyproject.toml.

`torchneck.trace._scan` decodes trace slices straight into columns, `torchneck.trace._order`
sorts the table in place, `torchneck.trace._spill` maps the arrays of traces too large for memory
and keeps their resident pages under a ceiling, `torchneck.analysis._nest` walks the host call
stacks (see their sources). All are optional: where no C compiler is at hand the build goes on without them and
the loader and `host_nesting` use their Python/numpy paths, with the same results, only slower
(and, for the sort, with more memory).
"""

import sys

from setuptools import Extension, setup

flags = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"]
setup(ext_modules=[Extension(name, [source], extra_compile_args=flags, optional=True)
                   for name, source in (("torchneck.trace._scan", "src/torchneck/trace/_scan.c"),
                                        ("torchneck.trace._order", "src/torchneck/trace/_order.c"),
                                        ("torchneck.trace._spill", "src/torchneck/trace/_spill.c"),
                                        ("torchneck.analysis._nest", "src/torchneck/analysis/_nest.c"))])
