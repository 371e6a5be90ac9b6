"""The zoo's manifests and planted places, shared by zoo_verify.py and zoo_score.py.

The zoo (`benchmarks/zoo/`) holds programs with one planted cause each, and clean programs.
Programs are described by every `manifest*.json` in that folder (one file per group of programs,
so groups written apart never edit the same file). An entry:

    {"script": "trainer_class.py",        # relative to benchmarks/zoo/ (run with that folder as cwd)
     "args": [],                          # the program's own arguments
     "fixed_args": ["--fixed"],           # what removes the plant (null for a clean program)
     "expect": "input_pipeline",          # the finding kind that must rank first (null: clean)
     "planted": "pipe/loader.py",         # the file holding the `# PLANTED` line (default: script)
     "shape": "Trainer class",            # how the program is written (free text)
     "fix_mentions": ["iterator once"],   # for "expect": "new:...": words a fitting fix contains
     "requires": "cuda",                  # runs only where torch sees a GPU (skipped elsewhere, unless
                                          # ZOO_IGNORE_REQUIRES=1: the GPU programs fall back to the CPU)
     "nproc_per_node": 2,                 # a multi-process job: run under torchrun with N ranks
     "measured": {...}}                   # written by zoo_verify.py --write

The planted line is the line of `planted` (or `script`) that carries the comment `# PLANTED`.
A cause no finding kind names ("expect": "new:<name>") is found when the top finding points at
the planted line and its fix says what to do: its text contains one of `fix_mentions`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"


@dataclass
class ZooProgram:
    script: str
    expect: str | None
    manifest: Path
    args: list[str] = field(default_factory=list)
    fixed_args: list[str] | None = None
    planted: str | None = None
    shape: str = ""
    measured: dict | None = None
    fix_mentions: list[str] = field(default_factory=list)
    requires: str | None = None
    """"cuda": the program needs a GPU; where torch sees none it is skipped, not scored."""
    nproc_per_node: int | None = None
    """A multi-process job: run under torchrun (`torchneck run --nproc-per-node N`)."""
    also: list[dict] = field(default_factory=list)
    """Other real causes found in the program besides its plant, each measured by removing it
    (`kind`, `about`, `measured`): a high finding of such a kind is not a false one."""

    @property
    def name(self) -> str:
        return self.script.removesuffix(".py").replace("/", ".")

    @property
    def path(self) -> Path:
        return ZOO / self.script

    @property
    def planted_file(self) -> Path:
        return ZOO / (self.planted or self.script)

    def command(self, python: str, fixed: bool = False) -> list[str]:
        """How to run the program by itself (as planted or fixed), from the zoo folder."""
        argv = [self.script, *self.args, *((self.fixed_args or []) if fixed else [])]
        if self.nproc_per_node:
            return [python, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc_per_node}", *argv]
        return [python, *argv]

    def torchneck_run_args(self) -> list[str]:
        """`torchneck run`'s options for this program (ranks for a multi-process job)."""
        return ["--nproc-per-node", str(self.nproc_per_node)] if self.nproc_per_node else []

    def unavailable(self) -> str | None:
        """Why this machine cannot run the program (None: it can)."""
        if self.requires == "cuda" and not os.environ.get("ZOO_IGNORE_REQUIRES"):
            import torch

            if not torch.cuda.is_available():
                return "needs a CUDA GPU"
        return None

    def planted_line(self) -> int | None:
        for i, line in enumerate(self.planted_file.read_text().splitlines(), 1):
            if "# PLANTED" in line:
                return i
        return None


def load_programs(only: list[str] | None = None) -> list[ZooProgram]:
    """Every program of every manifest, in manifest order (manifest.json first)."""
    out = []
    for manifest in sorted(ZOO.glob("manifest*.json"), key=lambda p: (p.name != "manifest.json", p.name)):
        for entry in json.loads(manifest.read_text())["scripts"]:
            fixed = entry.get("fixed_args", ["--fixed"] if entry.get("expect") else None)
            prog = ZooProgram(script=entry["script"], expect=entry.get("expect"), manifest=manifest,
                              args=list(entry.get("args") or []), fixed_args=fixed,
                              planted=entry.get("planted"), shape=entry.get("shape", ""),
                              measured=entry.get("measured"), fix_mentions=list(entry.get("fix_mentions") or []),
                              also=list(entry.get("also") or []), requires=entry.get("requires"),
                              nproc_per_node=entry.get("nproc_per_node"))
            if not only or prog.name in only or Path(prog.script).stem in only:
                out.append(prog)
    return out


def save_measurement(prog: ZooProgram, measured: dict) -> None:
    """Store `measured` in the program's manifest entry (the file keeps its other entries)."""
    data = json.loads(prog.manifest.read_text())
    for entry in data["scripts"]:
        if entry["script"] == prog.script:
            entry["measured"] = measured
    prog.manifest.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
