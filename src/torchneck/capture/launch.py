"""`torchneck run --nproc-per-node N`: launch the job on PyTorch's own launcher (torchrun,
`torch.distributed.run`), each rank under `capture/rank_entry.py`, then record how it ended."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .runner import Target
from .window import WindowOptions


@dataclass
class TorchrunOptions:
    nproc_per_node: int
    nnodes: str | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None

    def argv(self) -> list[str]:
        out = [f"--nproc-per-node={self.nproc_per_node}"]
        named = {"nnodes": self.nnodes, "node-rank": self.node_rank, "master-addr": self.master_addr,
                 "master-port": self.master_port, "rdzv-backend": self.rdzv_backend,
                 "rdzv-endpoint": self.rdzv_endpoint, "rdzv-id": self.rdzv_id}
        out += [f"--{k}={v}" for k, v in named.items() if v is not None]
        single_node = self.nnodes in (None, "1", "1:1")
        if single_node and not any((self.master_addr, self.master_port, self.rdzv_endpoint)):
            out.append("--standalone")  # a free port on localhost: no clash with other jobs
        return out


def launch_job(target: Target, options: WindowOptions, run_dir: Path, torchrun: TorchrunOptions,
               timeout: float | None = None) -> int:
    """Run the job under torchrun; the ranks write RUN_DIR/rank-<R>/, this writes RUN_DIR/job.json.
    Returns torchrun's exit code (non-zero when a rank failed)."""
    payload = json.dumps({"window": asdict(options), "timeout": timeout})
    what = ["-m", target.module] if target.module else [str(target.script)]
    cmd = [sys.executable, "-m", "torch.distributed.run", *torchrun.argv(), "-m", "torchneck.capture.rank_entry",
           str(run_dir), payload, *what, *target.args]
    started = time.time()
    try:
        code = subprocess.run(cmd).returncode
    except KeyboardInterrupt:
        code = 130
    job = {"launcher": "torch.distributed.run", "command": cmd, "torchrun": asdict(torchrun),
           "exit_code": code, "wall_s": time.time() - started,
           "target": {"script": str(target.script) if target.script else None, "module": target.module,
                      "args": list(target.args)}}
    (run_dir / "job.json").write_text(json.dumps(job, indent=1))
    return code
