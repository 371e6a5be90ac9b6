"""Record the small GPU traces in this folder (`gpu_*.json.gz`) on a CUDA machine.

    python tests/data/record_gpu_traces.py OUT_DIR

Each scenario is a known workload, so the GPU analyses can be checked against what ran:

- gpu_eager_train: an MLP trained eagerly with large batches (GPU-bound: kernels back to back);
- gpu_launch_bound: the same kind of model on a batch of 4 with many tiny layers (CPU-bound: the
  GPU idles between short kernels, waiting for launches);
- gpu_compiled_train: the MLP under torch.compile (Triton kernels, CompiledFunction spans);
- gpu_cuda_graph: the launch-bound model's step captured once in a CUDA graph and replayed
  (cudaGraphLaunch instead of one launch per kernel);
- gpu_host_sync: the eager model with `loss.item()` and a `.cpu()` copy every step (device-to-host
  syncs);
- gpu_two_streams: matmuls on the default stream while a side stream copies the next batch from
  pinned memory and runs its own matmuls (work overlapping on two streams of one device).

`--only NAME` records one scenario (its manifest is then `gpu_manifest_NAME.json`).

Every trace has 3 profiled steps (`ProfilerStep#N`) after 1 wait and 1 warm-up step.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

STEPS = 5  # wait 1, warm-up 1, active 3


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10)).cuda()


def profile(out: Path, name: str, step_fn, steps: int = STEPS) -> dict:
    path = out / f"{name}.json"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=sched, record_shapes=True,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(steps):
            step_fn()
            prof.step()
    torch.cuda.synchronize()
    gz = path.with_suffix(".json.gz")
    import gzip

    gz.write_bytes(gzip.compress(path.read_bytes(), 9))
    path.unlink()
    return {"trace": gz.name, "bytes": gz.stat().st_size}


def train_step(model, opt, x, y, sync: bool = False):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if sync:
            step.losses.append(loss.item())  # a host sync per step
            step.logits = model(x[:8]).detach().cpu()  # and a device-to-host copy
    step.losses = []
    return step


def two_streams_step():
    """Default stream: a 4096^2 matmul chain. Side stream: copy the next batch in from pinned
    memory (non-blocking) and multiply it; the default stream waits for the side stream's event
    before using its result."""
    a = torch.randn(4096, 4096, device="cuda")
    host = torch.randn(4096, 4096).pin_memory()
    side = torch.cuda.Stream()

    def step():
        done = torch.cuda.Event()
        with torch.cuda.stream(side):
            b = host.to("cuda", non_blocking=True)
            c = b @ b
            done.record(side)
        x = a
        for _ in range(3):
            x = torch.tanh(x @ a)
        torch.cuda.current_stream().wait_event(done)
        step.out = (x + c).sum()
    return step


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    manifest = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "traces": {}}
    if "--only" in sys.argv:
        name = sys.argv[sys.argv.index("--only") + 1]
        manifest["traces"][name] = profile(out, name, {"gpu_two_streams": two_streams_step}[name]())
        (out / f"gpu_manifest_{name}.json").write_text(json.dumps(manifest, indent=2))
        print(json.dumps(manifest, indent=2))
        return

    big = mlp(2048, 4)
    opt = torch.optim.SGD(big.parameters(), lr=1e-3)
    x, y = torch.randn(4096, 2048, device="cuda"), torch.randint(0, 10, (4096,), device="cuda")
    manifest["traces"]["gpu_eager_train"] = profile(out, "gpu_eager_train", train_step(big, opt, x, y))
    manifest["traces"]["gpu_host_sync"] = profile(out, "gpu_host_sync", train_step(big, opt, x, y, sync=True))

    tiny = mlp(64, 24)
    topt = torch.optim.SGD(tiny.parameters(), lr=1e-3)
    tx, ty = torch.randn(4, 64, device="cuda"), torch.randint(0, 10, (4,), device="cuda")
    manifest["traces"]["gpu_launch_bound"] = profile(out, "gpu_launch_bound", train_step(tiny, topt, tx, ty))

    # CUDA graph of the tiny model's forward and backward (static inputs), replayed each step.
    static_x, static_y = tx.clone(), ty.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up on a side stream before capture, as the docs say
            topt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(tiny(static_x), static_y).backward()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    topt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = nn.functional.cross_entropy(tiny(static_x), static_y)
        static_loss.backward()

    def graph_step():
        graph.replay()
        topt.step()

    manifest["traces"]["gpu_cuda_graph"] = profile(out, "gpu_cuda_graph", graph_step)

    compiled = torch.compile(mlp(1024, 4))
    copt = torch.optim.SGD(compiled.parameters(), lr=1e-3)
    cx, cy = torch.randn(2048, 1024, device="cuda"), torch.randint(0, 10, (2048,), device="cuda")
    t0 = time.time()
    warm = train_step(compiled, copt, cx, cy)
    for _ in range(2):  # compile outside the profiled window
        warm()
    torch.cuda.synchronize()
    manifest["compile_s"] = round(time.time() - t0, 1)
    manifest["traces"]["gpu_compiled_train"] = profile(out, "gpu_compiled_train", warm)

    manifest["traces"]["gpu_two_streams"] = profile(out, "gpu_two_streams", two_streams_step())
    (out / "gpu_manifest.json").write_text(json.dumps(manifest, indent=2))
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    main()
