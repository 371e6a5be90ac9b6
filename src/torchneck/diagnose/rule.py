"""The one shape of a rule, and the registry of rules.

A rule is a small class in a family module of `diagnose/rules/`:

    @register
    class HostSync(Rule[HostSyncEvidence]):
        '''Why it matters, and how its time lost is estimated.'''

        kind = "host_sync"
        summary = "The CPU waits for the device: .item(), .cpu(), printing tensors inside the step."
        docs = DOCS["tuning"]
        evidence_type = HostSyncEvidence
        MIN_SHARE = 0.05
        '''Why this threshold (every threshold is a named constant with its reason).'''

        def check(self, facts: Facts) -> list[Finding]:
            ...detection only: figures into the evidence, then self.finding(...)

        def fix(self, evidence: HostSyncEvidence) -> str:
            ...the change to make, apart from detection

Adding a rule touches its family module and its test (tests/test_rules_<family>.py, where a
`fires` and a `silent` case are required for every registered rule: tests/rule_cases.py). The
rules' reference (docs/rules.md) is generated from these classes: `python -m torchneck.diagnose.docs`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from ..model.base import Record, numpy_scalar
from ..model.findings import SEVERITY_ORDER, Confidence, Finding, Severity, Where
from .facts import Facts

DOCS = {
    "profiler": "https://pytorch.org/tutorials/recipes/recipes/profiler_recipe.html",
    "tuning": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "dataloader": "https://pytorch.org/docs/stable/data.html#multi-process-data-loading",
    "compile": "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
    "cuda_graphs": "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "inference_mode": "https://pytorch.org/docs/stable/generated/torch.inference_mode.html",
    "anomaly": "https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
    "threads": "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
    "zero_grad": "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
    "memory": "https://pytorch.org/docs/stable/torch_cuda_memory.html",
    "optim": "https://pytorch.org/docs/stable/optim.html#algorithms",
    "pinned": "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
    "tf32": "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    "amp": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-mixed-precision-and-amp",
    "on_device": "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                 "#create-tensors-directly-on-the-target-device",
}
"""Where each fix is explained in PyTorch's own documentation."""

HIGH_SHARE = 0.25
"""A problem costing a quarter of the profiled time or more is `high`: fixing it alone is a
>1.33x speed-up."""
MEDIUM_SHARE = 0.08
"""8 % or more is `medium`: worth a change; below it a finding is `low`."""


def severity_for(share: float) -> Severity:
    """The severity of a measured cost, from its share of the profiled time."""
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    return "low"


E = TypeVar("E", bound=Record)


class Rule(Generic[E]):
    """Base of every rule: see the module docstring for the shape."""

    kind: ClassVar[str]
    """The finding kind this rule reports (one rule, one kind)."""
    summary: ClassVar[str]
    """What it detects, in one line (the docs' table)."""
    docs: ClassVar[str] = ""
    """PyTorch's page about the fix."""
    evidence_type: ClassVar[type[Record]]
    """The figures each finding carries as `evidence`."""
    confidence: ClassVar[Confidence] = "estimated"
    """How its findings' saving is known (model/findings.Confidence); a finding may say otherwise."""
    saving_basis: ClassVar[str] = ""
    """How its saving is estimated, in one line (shown with each finding)."""
    max_severity: ClassVar[Severity] = "high"
    """The worst severity its findings get, whatever their saving (a dominant op is where time
    goes, not a diagnosis; start-up is context)."""
    explains: ClassVar[tuple[str, ...]] = ()
    """The kinds of symptom this cause can explain (see `explained`)."""

    def check(self, facts: Facts) -> list[Finding]:
        """Findings from `facts`; [] when the rule does not apply or finds nothing."""
        raise NotImplementedError

    def fix(self, evidence: E) -> str:
        """What to change, for the finding with this evidence."""
        raise NotImplementedError

    def explained(self, cause: Finding, symptom: Finding, facts: Facts) -> Explanation | None:
        """How much of `symptom` (of a kind in `explains`) the finding `cause` of this rule
        explains, or None when it does not."""
        return None

    def least_severity(self, finding: Finding) -> Severity:
        """The severity `finding` keeps whatever its saving (a cost the rule knows matters but
        cannot put a number on)."""
        return "info"

    def finding(self, evidence: E, *, title: str, lost_s: float, pct: float, where: Iterable[Where] = (),
                ops: Iterable[str] = (), severity: Severity | None = None, rank: int | None = None,
                docs: str | None = None, confidence: Confidence | None = None) -> Finding:
        """A finding of this rule: `lost_s` the time it costs, `pct` that as a share of what it is
        measured against (the window, or the run for one-time costs); the severity follows the
        share unless the rule sets it (costs it cannot measure: give `confidence="unmeasured"`);
        `docs` replaces the rule's link when the fix depends on the evidence."""
        return Finding(kind=self.kind, title=title, time_lost_s=lost_s, time_lost_pct=pct, fix=self.fix(evidence),
                       severity=cap(severity or severity_for(pct / 100), self.max_severity), where=list(where),
                       ops=list(ops), evidence=evidence_dict(evidence), docs=self.docs if docs is None else docs,
                       rank=rank, confidence=confidence or self.confidence, saving_basis=self.saving_basis)


class Explanation(msgspec.Struct, frozen=True):
    """Part of a symptom's time that a cause explains. `adds` when that time is not already in
    the cause's own cost (the compile time a graph break causes adds to its eager cost; the GPU
    idle while the host waits for data is the same time as the wait, and does not)."""

    seconds: float
    adds: bool = False
    beyond_s: float = 0.0
    """Of `seconds`, the part beyond the cause's own cost, where the two overlap (a loop reading
    elements one by one is both the syncs and the tiny ops it issues): added to the cause's
    saving; of several such symptoms of one cause only the largest (they are the same loop)."""


def cap(severity: Severity, worst: Severity) -> Severity:
    """`severity`, but no worse than `worst`."""
    return severity if SEVERITY_ORDER[severity] >= SEVERITY_ORDER[worst] else worst


def worse(a: Severity, b: Severity) -> Severity:
    """The more severe of two severities."""
    return a if SEVERITY_ORDER[a] <= SEVERITY_ORDER[b] else b


def make_finding(*, severity: str | None = None, **fields: Any) -> Finding:
    """A finding built field by field (rules not yet in the `Rule` shape): an empty severity
    follows the share of time lost, as `Rule.finding` does."""
    return Finding(severity=severity or severity_for(fields["time_lost_pct"] / 100), **fields)  # type: ignore[arg-type]


def evidence_dict(evidence: Record) -> dict[str, Any]:
    """A rule's evidence as report.json holds it (numbers and strings; its type is in docs/rules.md)."""
    return msgspec.to_builtins(evidence, enc_hook=numpy_scalar)


RULES: list[Rule[Any]] = []
"""Every registered rule, in registration order (the family modules' order, then class order)."""


def register(cls: type[Rule[E]]) -> type[Rule[E]]:
    """Class decorator: add one instance of the rule to `RULES` (kinds stay unique)."""
    if any(r.kind == cls.kind for r in RULES):
        raise ValueError(f"two rules report kind {cls.kind!r}")
    RULES.append(cls())
    return cls
