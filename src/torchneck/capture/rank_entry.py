"""What each rank runs under torchrun for `torchneck run --nproc-per-node N`:

    python -m torch.distributed.run [torchrun options] -m torchneck.capture.rank_entry \\
        RUN_DIR OPTIONS_JSON (SCRIPT | -m MODULE) [ARGS...]

The rank captures exactly as `torchneck run` does for one process, into RUN_DIR/rank-<RANK>/,
and exits with the script's exit code; the launching `torchneck run` analyses all ranks after
the job ends. torchrun's own environment (RANK, WORLD_SIZE, MASTER_ADDR...) reaches the script
unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..errors import TorchneckError
from .runner import Target
from .session import capture_run
from .window import WindowOptions


def rank_dir(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / f"rank-{rank}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3:
        print("usage: python -m torchneck.capture.rank_entry RUN_DIR OPTIONS_JSON (SCRIPT | -m MODULE) [ARGS...]",
              file=sys.stderr)
        return 2
    run_dir, options, rest = Path(argv[0]), json.loads(argv[1]), argv[2:]
    if rest[0] == "-m":
        target = Target(module=rest[1], args=tuple(rest[2:]))
    else:
        target = Target(script=Path(rest[0]), args=tuple(rest[1:]))
    rank = int(os.environ.get("RANK", "0"))
    try:
        result = capture_run(target, WindowOptions(**options["window"]), str(rank_dir(run_dir, rank)),
                             options.get("timeout"))
    except TorchneckError as exc:
        print(f"torchneck (rank {rank}): {exc}", file=sys.stderr)
        return 2
    outcome = result.outcome
    if outcome.traceback and outcome.status != "ok":
        sys.stderr.write(outcome.traceback)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
