"""torchneck: why is my PyTorch program slow, and what should I change?"""

__version__ = "0.1.0"
