"""Rules on GPU evidence: host-device copies, FP32 matrix products that skip the tensor cores."""

from __future__ import annotations

import re

from .findings import Finding

DOCS_PINNED = "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html"
DOCS_TF32 = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"


def _window_s(ev) -> float:
    return ev.analysis["steps"]["window_us"] / 1e6 if ev.analysis else 0.0


class MemcpyTime:
    """Host<->device copies take a large share of the GPU's time in the steps.

    Time lost: the copies' GPU time (HtoD + DtoH). Copies from pageable memory are flagged in the
    evidence: they run at a fraction of pinned bandwidth and cannot overlap compute."""

    kind = "memcpy"
    MIN_SHARE = 0.10
    """A tenth of the window spent copying is worth pinning and overlapping."""

    def check(self, ev) -> list[Finding]:
        a = ev.analysis
        if not a or not a["gpu"].get("present") or _window_s(ev) <= 0:
            return []
        copies = {k: v for k, v in (a["gpu"].get("memcpy") or {}).items() if k.startswith(("HtoD", "DtoH"))}
        time_s = sum(v["time_us"] for v in copies.values()) / 1e6
        share = time_s / _window_s(ev)
        if share < self.MIN_SHARE:
            return []
        pageable = any("pageable" in k for k in copies)
        evidence = {k: dict(v, gb_per_s=v["bytes"] / v["time_us"] / 1e3 if v["time_us"] else None)
                    for k, v in copies.items()}
        return [Finding(
            kind=self.kind,
            title=f"Host-device copies take {100 * share:.0f}% of the profiled time"
                  + (" (some from pageable memory)" if pageable else ""),
            time_lost_s=time_s, time_lost_pct=100 * share, ops=sorted(copies), evidence=evidence,
            fix=("Pin the host memory and copy asynchronously: DataLoader(pin_memory=True) and "
                 "tensor.to(device, non_blocking=True); keep tensors on the GPU between steps instead of "
                 "moving them back and forth; move results to the CPU only every N steps."),
            docs=DOCS_PINNED)]


_FP32_GEMM = re.compile(r"sgemm|gemm.*f32f32|gemm_f32|fp32.*gemm", re.IGNORECASE)
_TENSOR_CORE = re.compile(r"tf32|tensorop|s1688|s16816|hmma|bf16|f16|half|fp16|i8|xmma_gemm_f16|wgmma", re.IGNORECASE)


class TensorCores:
    """Matrix products run as plain FP32 kernels (`sgemm`), not on the tensor cores.

    Time lost: half of those kernels' time, a conservative estimate: TF32 runs matrix products
    several times faster on Ampere and later GPUs, bf16 autocast more."""

    kind = "tensor_cores"
    MIN_SHARE = 0.15
    """FP32 GEMMs worth a sixth of the window are worth a one-line precision setting."""
    SAVING = 0.5

    def check(self, ev) -> list[Finding]:
        a = ev.analysis
        if not a or not a["gpu"].get("present") or _window_s(ev) <= 0:
            return []
        fp32 = [k for k in a["gpu"].get("top_kernels") or []
                if _FP32_GEMM.search(k["name"]) and not _TENSOR_CORE.search(k["name"])]
        # Kernel time summed over streams can exceed the window (kernels run side by side, or
        # overhang its edges): then they fill it.
        time_s = min(sum(k["time_us"] for k in fp32) / 1e6, _window_s(ev))
        share = time_s / _window_s(ev)
        if share < self.MIN_SHARE:
            return []
        lost = self.SAVING * time_s
        pre_ampere = any(k["name"].startswith(("volta_", "turing_", "maxwell_", "pascal_")) for k in fp32)
        if pre_ampere:  # no TF32 and no fast bf16 before Ampere: fp16 is the tensor-core type
            fix = ("This GPU predates TF32: run the forward pass under torch.autocast(device_type='cuda', "
                   "dtype=torch.float16) with a torch.amp.GradScaler for training, so matmuls use the "
                   "tensor cores.")
        else:
            fix = ("Let matmuls use the tensor cores: torch.set_float32_matmul_precision('high') (TF32) at "
                   "the start of the script, or run the forward pass under torch.autocast(device_type='cuda', "
                   "dtype=torch.bfloat16).")
        return [Finding(
            kind=self.kind,
            title=f"FP32 matrix products without tensor cores take {100 * share:.0f}% of the profiled time",
            time_lost_s=lost, time_lost_pct=100 * lost / _window_s(ev), ops=[k["name"] for k in fp32[:5]],
            evidence={"kernels": fp32[:10], "share": share, "pre_ampere_kernels": pre_ampere},
            fix=fix,
            docs=DOCS_TF32)]


class UnalignedHalfMatmul:
    """fp16/bf16 matrix products whose dimensions are not multiples of 8 (torch's
    `MatMulDimInFP16Pattern`): tensor cores tile by 8, so such shapes pad internally or fall back
    to slower kernels. Time lost: not measured (it depends on the shape and the GPU); `low`, or
    `medium` when those kernels take MIN_SHARE of the window."""

    kind = "tensor_cores"
    MIN_SHARE = 0.10

    def check(self, ev) -> list[Finding]:
        a = ev.analysis
        hits = ((a or {}).get("ops") or {}).get("half_matmul_unaligned") or {}
        if not hits.get("count") or not a["gpu"].get("present"):
            return []
        share = hits["kernel_us"] / 1e6 / _window_s(ev) if _window_s(ev) > 0 else 0.0
        example = hits["shapes"][0] if hits["shapes"] else None
        return [Finding(
            kind=self.kind, severity="medium" if share >= self.MIN_SHARE else "low",
            title=f"{hits['count']} half-precision matmul(s) with dimensions that are not multiples of 8"
                  + (f" ({100 * share:.0f}% of the profiled time in their kernels)" if share else ""),
            time_lost_s=0.0, time_lost_pct=0.0, ops=sorted({x["op"] for x in hits["shapes"]}),
            evidence=hits | {"kernel_share": share},
            fix="Pad the matrix dimensions (hidden sizes, vocabulary, batch x sequence) to multiples of 8 "
                "(64 is better still) so fp16/bf16 matmuls run on the tensor cores without padding"
                + (f"; e.g. {example['op']} on {example['shapes']}" if example else "") + ".",
            docs="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-mixed-precision-and-amp")]


class FilledThenCopied:
    """A tensor filled on the CPU and immediately copied to the GPU (`torch.zeros(n).to("cuda")`,
    torch's `ExtraCUDACopyPattern`). Time lost: the host time of those copies (`aten::to`),
    which creating the tensor on the GPU (`device="cuda"`) avoids along with the host fill."""

    kind = "memcpy"
    MIN_SHARE = 0.02
    """A copy that creating the tensor in place removes for free is worth fixing from 2 %."""

    def check(self, ev) -> list[Finding]:
        a = ev.analysis
        hits = ((a or {}).get("ops") or {}).get("filled_then_copied") or {}
        if not hits.get("count") or _window_s(ev) <= 0:
            return []
        lost = hits["copy_us"] / 1e6
        share = lost / _window_s(ev)
        if share < self.MIN_SHARE:
            return []
        return [Finding(
            kind=self.kind,
            title=f"{hits['count']} tensor(s) filled on the CPU and then copied to the GPU "
                  f"({100 * share:.0f}% of the profiled time in the copies)",
            time_lost_s=lost, time_lost_pct=100 * share, ops=["aten::to"], evidence=hits,
            fix="Create the tensor on the GPU directly: torch.zeros(..., device='cuda') (also ones, full, "
                "randn, empty), not torch.zeros(...).to('cuda').",
            docs="https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                 "#create-tensors-directly-on-the-target-device")]


GPU_RULES = [MemcpyTime(), TensorCores(), UnalignedHalfMatmul(), FilledThenCopied()]
