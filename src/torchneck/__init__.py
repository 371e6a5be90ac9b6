"""torchneck: why is my PyTorch program slow, and what should I change?"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`torchneck.profile` and `torchneck.analyze`, imported on first use (the CLI stays light)."""
    if name in ("profile", "analyze", "Report"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'torchneck' has no attribute {name!r}")
