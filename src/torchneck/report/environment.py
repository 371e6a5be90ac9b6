"""The environment summary that heads a run's report: what ran where, in two lines (the first
section of torch.utils.bottleneck's output, which env.json already holds)."""

from __future__ import annotations

from typing import Any


def _cudnn(version: Any) -> str:
    """cuDNN reports 91900 for 9.19.0 (and 8907 for 8.9.7 before 9)."""
    if not isinstance(version, int):
        return str(version)
    if version >= 90000:
        return f"{version // 10000}.{version // 100 % 100}.{version % 100}"
    return f"{version // 1000}.{version // 100 % 10}.{version % 100}"


def environment_lines(env: dict[str, Any] | None) -> list[str]:
    """['Environment: torch 2.13.0 (release), Python 3.11.7, Linux...; CPU: 2 usable cores, ...',
    'Settings: anomaly detection off, ...'], or [] without an environment."""
    if not env or not env.get("torch"):
        return []
    build = "debug build" if env.get("torch_debug_build") else "release"
    head = f"torch {env['torch']} ({build}), Python {env.get('python', '?')}, {env.get('platform', '?')}"
    cores = env.get("cpu_affinity") or env.get("cpu_count")
    settings = env.get("settings_at_end") or env.get("settings") or {}
    threads = settings.get("torch_threads") or env.get("torch_threads")
    thread_env = ", ".join(f"{k}={v}" for k, v in (env.get("thread_env") or {}).items())
    cpu = f"CPU: {cores} usable cores, {threads} intra-op threads" + (f" ({thread_env})" if thread_env else "")
    gpus = env.get("gpus") or []
    if gpus:
        names = ", ".join(f"{g.get('name')} ({g.get('memory_bytes', 0) / 1e9:.0f} GB, sm {g.get('capability')})"
                          for g in gpus)
        stack = ", ".join(x for x in (f"CUDA {env['cuda']}" if env.get("cuda") else "",
                                       f"ROCm {env['hip']}" if env.get("hip") else "",
                                       f"cuDNN {_cudnn(env['cudnn'])}" if env.get("cudnn") else "") if x)
        gpu = f"GPU: {names}" + (f"; {stack}" if stack else "")
    else:
        gpu = "GPU: none"
    on_off = {True: "on", False: "off", None: "unknown"}
    flags = [f"anomaly detection {on_off[settings.get('anomaly_detection')]}",
             f"deterministic algorithms {on_off[settings.get('deterministic_algorithms')]}",
             f"grad mode {on_off[settings.get('grad_enabled')]}"]
    if gpus:
        flags += [f"TF32 matmul {on_off[settings.get('tf32_matmul')]} "
                  f"(float32 matmul precision {settings.get('float32_matmul_precision')!r})",
                  f"cudnn.benchmark {on_off[settings.get('cudnn_benchmark')]}"]
    switches = dict(settings.get("slow_env") or {})
    if settings.get("torch_logs"):
        switches["TORCH_LOGS"] = settings["torch_logs"]
    flags.append("debug switches: " + (", ".join(f"{k}={v}" for k, v in switches.items()) if switches else "none"))
    return [f"Environment: {head}; {cpu}; {gpu}", "Settings: " + ", ".join(flags)]
