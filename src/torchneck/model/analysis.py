"""What the analyses of one trace (one rank) produce: `RankAnalysis` and its parts.

Times are µs of the trace's clock unless a name says otherwise; shares are 0-1, `*_pct` 0-100.
Each part is made by one module of `analysis/` (named in its docstring); `analysis/summary.py`
assembles them.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .base import Record


class TraceInfo(Record):
    """What was read (trace/loader.py): the file, its rank, its size and the loader's warnings."""

    path: str
    rank: int | None = None
    world_size: int | None = None
    events: int = 0
    python_events: int = 0
    memory_events: int = 0
    devices: list[str | None] = []
    device_memory_bytes: dict[str, int] = {}
    warnings: list[str] = []
    bytes: int = 0
    grad_mode_ops: int = 0
    """Ops recorded in grad mode: they carry autograd's "Sequence number" (none under no_grad or
    inference_mode)."""
    autograd_nodes: int = 0
    """Graph nodes autograd numbered while the trace recorded (the range of those numbers: ops on
    tensors that need no gradient repeat one number)."""


BreakdownCategory = Literal["kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec",
                            "other"]


class StepItem(Record):
    index: int
    start_us: float
    duration_us: float
    breakdown_us: dict[str, float]


class Steps(Record):
    """The profiled steps and where their time goes (analysis/steps.py). `window_us` runs from
    the first step's start to the end of the GPU work the steps launched."""

    source: str
    count: int
    window_us: float
    gpu_tail_us: float = 0.0
    mean_us: float = 0.0
    median_us: float = 0.0
    min_us: float = 0.0
    max_us: float = 0.0
    items: list[StepItem] = []
    breakdown_total_us: dict[str, float] = {}


class OpRow(Record):
    """One op name (and input shapes, in `by_shape` tables) over the window (analysis/ops.op_table)."""

    name: str
    count: int
    self_us: float
    total_us: float
    mean_us: float
    shapes: str | None = None

    def beyond_floor_us(self, floor_us: float) -> float:
        """Self time beyond `floor_us` a call (the trace's cheapest op's cost): the work on the data,
        which batching or caching leaves, rather than per-call overhead."""
        return max(0.0, self.self_us - self.count * floor_us)

    def input_dims(self) -> list[list[int]]:
        """The recorded input shapes (`"[[2048, 16000], [], []]"`), the tensors' only (scalars and
        unrecorded inputs are empty); [] when none or unreadable."""
        try:
            dims = msgspec.json.decode(self.shapes or "[]")
        except msgspec.DecodeError:
            return []
        return [d for d in dims if isinstance(d, list) and d] if isinstance(dims, list) else []


class BackwardNode(Record):
    """One kind of autograd node run in the window's backward passes, and the forward op it
    differentiates (analysis/ops.backward_nodes): a node run more often than its forward op ran
    was differentiated again (a second backward through a retained graph)."""

    node: str
    """The node's name (`ConvolutionBackward0`)."""
    count: int
    """Times autograd ran a node of this kind (its `evaluate_function` events)."""
    total_us: float
    forward_op: str
    """The forward op the node's name maps to (`aten::convolution`)."""
    forward_count: int
    """Calls of that forward op in the window (0 when it was not found)."""


class Dispatch(Record):
    """Per-op overhead: how much of the window goes to tiny top-level ops (ops.dispatch_overhead)."""

    top_level_ops: int = 0
    ops_per_step: float = 0.0
    tiny_ops: int = 0
    tiny_us: float = 0.0
    tiny_share: float = 0.0
    median_op_us: float = 0.0
    floor_op_us: float = 0.0
    """The trace's per-op overhead: the 10th percentile of the top-level ops' durations."""
    tiny_limit_us: float = 20.0
    """Ops shorter than this count as tiny (4x the floor, at least 20 µs)."""
    tiny_run_us: float = 0.0
    """Wall time of runs of tiny ops back to back (a loop issuing them), the Python between included."""
    tiny_run_ops: int = 0
    tiny_run_share: float = 0.0


class Annotation(Record):
    """A record_function label (or module name) other than steps, by total time (ops.annotations)."""

    name: str
    count: int
    total_us: float


class SpanOps(Record):
    """The CPU ops inside one optimizer span (`Optimizer.step#Adam.step`...), all its calls in
    the window together (analysis/optimizer.py)."""

    name: str
    count: int
    total_us: float
    ops: list[OpRow] = []
    """By op name, most self time first (self time, calls, time inside these spans only)."""
    first_call_ops: int = 0
    last_call_ops: int = 0
    """CPU ops inside the first and the last call: more in the last, the call's work grew in
    the window (zero_grad zeroing gradients that did not exist before)."""


class OptimizerWork(Record):
    """What the optimizer does in the window, and the gradients backward hands it
    (analysis/optimizer.py)."""

    spans: list[SpanOps] = []
    gradients_accumulated: int = 0
    """autograd's `AccumulateGrad` calls: one for each gradient backward wrote into a `.grad`."""
    accumulate_added_us: float = 0.0
    """Self time of the ops inside `AccumulateGrad`: adding into a `.grad` that already exists
    (a `.grad` that is None takes the new gradient without a pass over it)."""


class CodeSite(Record):
    """A place in the user's code that ran (or waited in) particular rows of the trace, with the
    time and count charged to it (analysis/trace_stacks.user_code_of)."""

    file: str
    line: int
    function: str = ""
    time_us: float = 0.0
    count: int = 0
    source: str = ""


class Float64Ops(Record):
    """CPU ops with a float64 tensor input (ops.float64_ops; needs recorded shapes)."""

    recorded: bool
    self_us: float = 0.0
    count: int = 0
    kernel_us: float = 0.0
    """GPU time of the kernels those ops launched."""
    conv_kernel_us: float = 0.0
    """... of them, the kernels of convolutions."""
    ops: list[OpRow] = []
    where: list[CodeSite] = []


class ConvBiasBn(Record):
    """Convolutions with a bias feeding straight into BatchNorm (ops.conv_bias_before_batch_norm)."""

    recorded: bool
    pairs: int = 0
    conv_us: float = 0.0


class ShapeExample(Record):
    op: str
    shapes: list[Any]
    count: int


class HalfMatmulUnaligned(Record):
    """fp16/bf16 matmuls with dimensions not multiples of 8 (patterns.unaligned_half_matmuls)."""

    recorded: bool
    count: int = 0
    kernel_us: float = 0.0
    odd_kernel_us: float = 0.0
    """Of `kernel_us`, the kernels of products with an odd leading dimension (no 4-byte alignment:
    the slowest fallback)."""
    shapes: list[ShapeExample] = []
    where: list[CodeSite] = []


class FilledThenCopied(Record):
    """Tensors filled on the CPU and copied to the GPU at once (patterns.filled_then_copied_to_gpu)."""

    count: int = 0
    copy_us: float = 0.0


class StridedInput(Record):
    """An op called with an input whose last dimension is not contiguous in memory (a transposed
    or permuted view), from the trace's "Input Strides" (analysis/layouts.strided_inputs)."""

    op: str
    dims: list[int]
    strides: list[int]
    """In elements, as the trace records them: [1, 20000] for a [20000, 384] input is column-major."""
    calls: int
    """The op's calls with such an input."""
    share: float
    """Their share of the op's time (by duration)."""


class MainThread(Record):
    """The thread that ran most CPU ops (empty when the window has none)."""

    pid: str = ""
    tid: str = ""
    ops: int = 0


class Ops(Record):
    """The host ops of the window (analysis/ops.py and analysis/patterns.py)."""

    by_name: list[OpRow] = []
    by_shape: list[OpRow] = []
    dispatch: Dispatch = msgspec.field(default_factory=Dispatch)
    annotations: list[Annotation] = []
    float64: Float64Ops = msgspec.field(default_factory=lambda: Float64Ops(recorded=False))
    conv_bias_bn: ConvBiasBn = msgspec.field(default_factory=lambda: ConvBiasBn(recorded=False))
    half_matmul_unaligned: HalfMatmulUnaligned = msgspec.field(
        default_factory=lambda: HalfMatmulUnaligned(recorded=False))
    filled_then_copied: FilledThenCopied = msgspec.field(default_factory=FilledThenCopied)
    main_thread: MainThread = msgspec.field(default_factory=MainThread)
    optimizer: OptimizerWork = msgspec.field(default_factory=OptimizerWork)
    training_ops: int = 0
    """Events of a backward pass (autograd's `...Backward...`, `evaluate_function`) or an optimizer
    step anywhere in the trace: the program trains (the top ops of `by_name` may not show them)."""
    backward_nodes: list[BackwardNode] = []
    """The autograd nodes the window's backward passes ran, by kind, with their forward op's calls."""
    strided_inputs: list[StridedInput] = []
    """The top ops (`by_name`'s first few) fed a tensor against the grain, when the trace records
    strides and is small enough to read them again."""


class IdleBreakdown(Record):
    """A device's idle time by cause, as Holistic Trace Analysis splits it (gpu.idle_breakdown)."""

    host_wait_us: float = 0.0
    kernel_wait_us: float = 0.0
    other_us: float = 0.0
    edges_us: float = 0.0


class Temporal(Record):
    """HTA's temporal breakdown of a device: compute, communication not under compute, memory."""

    compute_us: float = 0.0
    communication_us: float = 0.0
    memory_us: float = 0.0
    idle_us: float = 0.0


class StreamBusy(Record):
    stream: int
    events: int
    busy_us: float
    busy_pct: float


class Device(Record):
    """One GPU over the window (gpu._device_summary)."""

    device: int
    busy_us: float
    busy_pct: float
    idle_us: float
    temporal: Temporal
    comm_overlap_pct: float
    idle_breakdown: IdleBreakdown
    streams: list[StreamBusy] = []


class KernelFamily(Record):
    family: str
    count: int
    time_us: float


class KernelRow(Record):
    name: str
    family: str
    count: int
    time_us: float
    mean_us: float


class LaunchStats(Record):
    """Kernel launches: CPU launch cost vs kernel time (gpu.launch_statistics). Without kernels
    only `kernels` (0) is set; without launch links (correlation ids) the `launch_*` and
    per-launch figures stay None."""

    kernels: int = 0
    kernel_mean_us: float | None = None
    kernel_median_us: float | None = None
    short_kernels: int = 0
    short_share: float = 0.0
    linked_launches: int = 0
    launch_delay_median_us: float | None = None
    launch_delay_p90_us: float | None = None
    cpu_launch_mean_us: float | None = None
    launch_calls: int = 0
    kernels_per_launch: float = 1.0


class MemcpyDirection(Record):
    count: int = 0
    time_us: float = 0.0
    bytes: int = 0


class Gpu(Record):
    """Everything GPU-side over the window (analysis/gpu.py); `present` False without GPU events."""

    present: bool
    window_us: float = 0.0
    devices: list[Device] = []
    kernel_families: list[KernelFamily] = []
    top_kernels: list[KernelRow] = []
    launch: LaunchStats = msgspec.field(default_factory=LaunchStats)
    memcpy: dict[str, MemcpyDirection] = {}


class SyncCause(Record):
    op: str
    count: int
    wait_us: float


class ScalarOp(Record):
    op: str
    count: int
    time_us: float


class Syncs(Record):
    """Where the CPU waits for the device or forces a scalar out (analysis/syncs.py)."""

    sync_calls: int = 0
    sync_wait_us: float = 0.0
    by_cause: list[SyncCause] = []
    scalar_ops: list[ScalarOp] = []
    dtoh_copies: int = 0
    dtoh_us: float = 0.0
    where: list[CodeSite] = []


class MemoryDevice(Record):
    device: str
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    allocations: int = 0
    allocated_bytes: int = 0


class Allocator(Record):
    """An op (at a user's line, when the trace places it) that allocated memory in the window."""

    op: str
    allocations: int
    bytes: int
    file: str | None = None
    line: int | None = None
    function: str | None = None
    device: str | None = None


class Memory(Record):
    """Memory from the profiler's memory events (analysis/memory.py); `recorded` False without."""

    recorded: bool
    devices: list[MemoryDevice] = []
    top_allocators: list[Allocator] = []


class CompiledFrame(Record):
    """One compiled frame's calls in the window, from `Torch-Compiled Region` spans."""

    frame: int
    calls: int
    time_us: float
    compile_us: float = 0.0
    graph_us: float = 0.0
    eager_us: float | None = None
    nested_calls: int = 0
    nested_us: float = 0.0
    compiles_seen: int = 0
    recompiles_seen: int = 0


class Origin(Record):
    """Where an op or kernel of a compiled run came from: inductor's own code or an ATen fallback."""

    origin: Literal["inductor", "aten_fallback"]
    count: int = 0
    time_us: float = 0.0
    graph_calls: list[str] = []
    """The FX graph cache keys of the graph calls it ran in."""
    graphs: list[str] = []
    """The compiled graphs (dynamo compile ids) those are, when the run's compile log says."""


class Origins(Record):
    ops: dict[str, Origin] = {}
    kernels: dict[str, Origin] = {}


class Compiled(Record):
    """torch.compile as the trace shows it (analysis/compiled.py); `present` False without."""

    present: bool
    region_calls: int = 0
    nested_region_calls: int = 0
    time_in_regions_us: float = 0.0
    compiling_in_regions_us: float = 0.0
    eager_in_regions_us: float | None = None
    eager_top_level_us: float = 0.0
    graph_calls: int = 0
    graph_call_us: float | None = None
    frames: list[CompiledFrame] = []
    origins: Origins = msgspec.field(default_factory=Origins)


class CollectiveType(Record):
    type: str
    count: int
    time_us: float
    per_step_us: float


class Comm(Record):
    """Collectives of this rank (analysis/distributed.collectives); `present` False without."""

    present: bool
    side: str = ""
    steps: int = 0
    time_us: float = 0.0
    per_step_us: float = 0.0
    by_type: list[CollectiveType] = []


class LabelOp(Record):
    name: str
    self_us: float
    count: int


class LabelCall(Record):
    """A call made under a label outside torch ops (a `with_stack` trace's Python events)."""

    name: str
    file: str = ""
    line: int = 0
    """The called function's first line (the trace's frames say no more)."""
    outside_ops_us: float = 0.0
    """Its time that no torch op of the thread covers."""
    count: int = 0
    share: float = 0.0
    """`outside_ops_us` over the label's time outside ops, in %."""


class Label(Record):
    """A record_function label of the user's over the window (analysis/labels.py): its time, the
    part covered by torch ops, the rest (Python, NumPy, waits), its ops and where it runs."""

    name: str
    count: int
    total_us: float
    pct: float
    """Its time over the profiled window."""
    self_us: float
    ops_us: float
    """Time covered by torch work under it (ops, runtime calls)."""
    outside_ops_us: float
    outside_ops_pct: float
    ops: int
    top_ops: list[LabelOp] = []
    where: list[CodeSite] = []
    opened_at: CodeSite | None = None
    inside: str | None = None
    """The label around it (around its first instance), if any."""
    other_threads_us: float = 0.0
    """Of `outside_ops_us`, the time torch ops ran on another thread of the process (the label's
    thread likely waits on them: autograd's device threads in a backward pass)."""
    runs_backward: bool = False
    """A backward pass runs while it is open (autograd engine ops on any thread): its time outside
    ops is mostly the wait for autograd's threads."""
    calls: list[LabelCall] = []
    """The calls under it outside torch ops, the largest first (`with_stack` traces)."""


class KeyAveragesOptions(Record):
    sort_by: str
    row_limit: int
    group_by_input_shape: bool = False
    group_by_stack_n: int = 0
    requested: bool = False
    """Given on the command line or the API: the terminal shows the table."""


class KeyAveragesRow(Record):
    """One row of torch's `key_averages()` table, computed from the trace (analysis/key_averages.py)."""

    name: str
    kind: str
    count: int
    cpu_time: float
    cpu_time_total: float
    self_cpu_time_total: float
    device_time: float
    device_time_total: float
    self_device_time_total: float
    cpu_memory_usage: int = 0
    self_cpu_memory_usage: int = 0
    device_memory_usage: int = 0
    self_device_memory_usage: int = 0
    input_shapes: str | None = None
    stack: list[str] | None = None


class KeyAverages(Record):
    """`prof.key_averages(...)` of the whole trace, sorted and limited as asked."""

    options: KeyAveragesOptions
    groups: int
    rows: list[KeyAveragesRow] = []
    self_cpu_time_total: float = 0.0
    self_device_time_total: float = 0.0
    has_memory: bool = False
    has_device_time: bool = False
    has_device_memory: bool = False
    stack_source: str | None = None
    notes: list[str] = []


class RankAnalysis(Record):
    """Every analysis of one trace (analysis/summary.analyze_trace). The defaults are what an
    empty trace gives (tests build partial analyses from them)."""

    trace: TraceInfo = msgspec.field(default_factory=lambda: TraceInfo(path=""))
    steps: Steps = msgspec.field(default_factory=lambda: Steps(source="window", count=0, window_us=0.0))
    ops: Ops = msgspec.field(default_factory=Ops)
    gpu: Gpu = msgspec.field(default_factory=lambda: Gpu(present=False))
    syncs: Syncs = msgspec.field(default_factory=Syncs)
    memory: Memory = msgspec.field(default_factory=lambda: Memory(recorded=False))
    compiled: Compiled = msgspec.field(default_factory=lambda: Compiled(present=False))
    comm: Comm = msgspec.field(default_factory=lambda: Comm(present=False))
    labels: list[Label] = []
    key_averages: KeyAverages | None = None
