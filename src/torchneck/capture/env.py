"""The environment of a run, read directly from torch and the process (not collect_env)."""

from __future__ import annotations

import os
import platform
import sys

SLOW_ENV_VARS = {
    "TORCH_COMPILE_DEBUG": "writes debug artifacts for every compilation",
    "TORCHDYNAMO_VERBOSE": "verbose dynamo logging",
    "CUDA_LAUNCH_BLOCKING": "makes every CUDA kernel launch synchronous",
    "TORCH_SHOW_CPP_STACKTRACES": "collects C++ stack traces on errors",
    "TORCH_CPP_LOG_LEVEL": "C++ logging",
    "PYTORCH_NO_CUDA_MEMORY_CACHING": "disables the CUDA caching allocator (every allocation hits the driver)",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "recompiles every kernel from scratch",
    "KINETO_LOG_LEVEL": "profiler logging",
    "TORCH_DISTRIBUTED_DEBUG": "extra collective checks",
    "NCCL_DEBUG": "NCCL logging",
}
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def collect_env() -> dict:
    """Versions, devices, thread settings and slow-down switches of this process."""
    import torch

    env: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_debug_build": bool(getattr(torch.version, "debug", False)),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV_VARS if k in os.environ},
        "gpus": [],
    }
    try:
        env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception:
        env["cudnn"] = None
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                env["gpus"].append({"index": i, "name": p.name, "memory_bytes": int(p.total_memory),
                                    "capability": f"{p.major}.{p.minor}"})
    except Exception as exc:  # a broken driver must not stop the run
        env["gpu_error"] = str(exc)
    env["settings"] = read_slow_settings()
    return env


def read_slow_settings() -> dict:
    """Switches that slow a program down, as they are now (call again at the end of a run:
    the script may have turned them on)."""
    import torch

    slow_env = {k: os.environ[k] for k in SLOW_ENV_VARS if os.environ.get(k) not in (None, "", "0")}
    logs = os.environ.get("TORCH_LOGS", "")
    settings = {
        "anomaly_detection": bool(torch.is_anomaly_enabled()),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "grad_enabled": bool(torch.is_grad_enabled()),
        "torch_threads": torch.get_num_threads(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32_matmul": _safe(lambda: torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
        "slow_env": slow_env,
        "torch_logs": logs or None,
    }
    return settings


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None
