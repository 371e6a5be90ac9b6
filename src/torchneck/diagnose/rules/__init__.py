"""The rule families. Importing this package registers every rule (diagnose/rule.py's `RULES`),
in this order."""

from . import autograd, calls, compile, config, dispatch, dtype, gpu, hooks, labels, ops, python, rebuilt, training  # noqa: F401
