"""`python -m torchneck script.py [args]`: the drop-in for `python -m torch.utils.bottleneck`."""

import sys

from .cli import bottleneck_main

if __name__ == "__main__":
    sys.exit(bottleneck_main())
