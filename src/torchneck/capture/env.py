"""The environment of a run, read directly from torch and the process (not collect_env).

What `torch.utils.bottleneck` printed first (versions, build, devices, OS), and everything a
check for a misconfigured run needs: a debug build, CUDA_LAUNCH_BLOCKING=1, TORCH_COMPILE_DEBUG
or TORCH_LOGS left on, anomaly detection, deterministic algorithms, thread counts, and the
torch.backends switches (cudnn.benchmark, TF32, float32 matmul precision). `settings` is read
before the script starts and again after it ends (`settings_at_end` in run.json): scripts turn
these on themselves. Documented field by field in docs/report-schema.md ("env").
"""

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
ENV_PREFIXES = ("TORCH", "PYTORCH_", "CUDA_", "CUBLAS_", "CUDNN_", "NCCL_", "NVIDIA_TF32", "OMP_", "MKL_", "KMP_",
                "OPENBLAS_", "NUMEXPR_", "HIP_", "ROCM_", "HSA_", "KINETO_", "INTEL_LIBITTNOTIFY")
"""Environment variables kept in env.json: the ones torch, its compilers, its math libraries and
its GPU runtimes read (TORCH_LOGS, TORCHDYNAMO_*, TORCHINDUCTOR_*, PYTORCH_CUDA_ALLOC_CONF,
CUDA_LAUNCH_BLOCKING, OMP/MKL threads...). Nothing else of the environment is written."""
ENV_VALUE_LIMIT = 500


def collect_env() -> dict:
    """Versions, build, devices, OS, thread settings, torch-related environment variables and the
    switches that slow a program down."""
    import torch

    env: dict = {
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "os": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
               "libc": "-".join(platform.libc_ver()) or None},
        "torch": torch.__version__,
        "torch_debug_build": bool(getattr(torch.version, "debug", False)),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": _cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV_VARS if k in os.environ},
        "env_vars": {k: v[:ENV_VALUE_LIMIT] for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "build": _build(torch),
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
                                    "capability": f"{p.major}.{p.minor}",
                                    "multiprocessors": getattr(p, "multi_processor_count", None)})
    except Exception as exc:  # a broken driver must not stop the run
        env["gpu_error"] = str(exc)
    env["settings"] = read_slow_settings()
    return env


def _build(torch) -> dict:
    """How this torch was built: release or debug, its git revision, the libraries compiled in."""
    backends = torch.backends
    out = {
        "debug": bool(getattr(torch.version, "debug", False)),
        "git_version": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": _safe(lambda: backends.cudnn.version() if backends.cudnn.is_available() else None),
        "nccl": _safe(lambda: ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None),
        "mkl": _safe(backends.mkl.is_available),
        "mkldnn": _safe(backends.mkldnn.is_available),
        "openmp": _safe(backends.openmp.is_available),
        "mps": _safe(backends.mps.is_available),
        "cxx11_abi": _safe(lambda: bool(torch._C._GLIBCXX_USE_CXX11_ABI)),
        "itt": _safe(lambda: torch.profiler.itt.is_available()),
    }
    return out


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def read_slow_settings() -> dict:
    """Switches that slow a program down (or change its numbers), as they are now (call again at
    the end of a run: the script may have turned them on)."""
    import torch

    slow_env = {k: os.environ[k] for k in SLOW_ENV_VARS if os.environ.get(k) not in (None, "", "0")}
    logs = os.environ.get("TORCH_LOGS", "")
    backends = torch.backends
    settings = {
        "anomaly_detection": bool(torch.is_anomaly_enabled()),
        "anomaly_check_nan": _safe(torch.is_anomaly_check_nan_enabled),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
        "deterministic_warn_only": _safe(torch.is_deterministic_algorithms_warn_only_enabled),
        "grad_enabled": bool(torch.is_grad_enabled()),
        "inference_mode": _safe(torch.is_inference_mode_enabled),
        "autocast_cpu": _safe(lambda: torch.is_autocast_enabled("cpu")),
        "autocast_cuda": _safe(lambda: torch.is_autocast_enabled("cuda")),
        "default_dtype": str(torch.get_default_dtype()),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": _safe(torch.get_num_interop_threads),
        "cudnn_enabled": _safe(lambda: bool(backends.cudnn.enabled)),
        "cudnn_benchmark": bool(backends.cudnn.benchmark),
        "cudnn_deterministic": _safe(lambda: bool(backends.cudnn.deterministic)),
        "cudnn_allow_tf32": _safe(lambda: bool(backends.cudnn.allow_tf32)),
        "tf32_matmul": _safe(lambda: backends.cuda.matmul.allow_tf32),
        "fp16_reduced_precision_reduction": _safe(lambda: backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
        "bf16_reduced_precision_reduction": _safe(lambda: backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        "float32_matmul_precision": _safe(torch.get_float32_matmul_precision),
        "mkldnn_enabled": _safe(lambda: bool(backends.mkldnn.enabled)),
        "flash_sdp": _safe(backends.cuda.flash_sdp_enabled),
        "mem_efficient_sdp": _safe(backends.cuda.mem_efficient_sdp_enabled),
        "math_sdp": _safe(backends.cuda.math_sdp_enabled),
        "slow_env": slow_env,
        "torch_logs": logs or None,
    }
    return settings


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None
