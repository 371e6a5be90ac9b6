"""The rule families. Importing this package registers every rule (diagnose/rule.py's `RULES`),
in this order."""

from . import (  # noqa: F401
    autograd,
    calls,
    compile,
    config,
    conv,
    dispatch,
    dtype,
    gpu,
    growth,
    hooks,
    ignored,
    labels,
    ops,
    periodic,
    polling,
    python,
    rebuilt,
    repeats,
    training,
)
