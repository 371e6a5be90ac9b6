"""Errors the user can fix. The CLI prints them as one line and exits with code 2."""


class TorchneckError(Exception):
    """A problem with the user's input or environment, worded as what to do."""


class TraceError(TorchneckError):
    """A trace file that cannot be read."""
