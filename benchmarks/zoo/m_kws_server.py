"""Event-driven keyword-spotting inference service (simulated clock).

Synthetic 1 s / 16 kHz utterances (class-specific chirp + harmonic patterns in
noise) arrive as timestamped request events from several simulated clients.
Each request is featurized on arrival by a `LogMelFrontend` module (pre-emphasis,
Hann-windowed STFT frames, mel filterbank, log, mean normalisation), a
`MicroBatcher` groups pending requests into small batches (max size or max
wait on the simulated clock), and a small depthwise-separable CNN (`DSCNN`)
scores 12 keyword classes per batch.  The `KeywordService` dispatches events, runs the pipeline
under inference mode and collects per-request results and simulated latency
statistics, which are printed at the end together with a checksum of the scores.

Planted problem:
    `LogMelFrontend.forward` (else-branch, the `for t in range(n_frames)` loop)
    builds the spectrogram frame by frame: each iteration slices one 32 ms
    frame, windows it, calls `torch.fft.rfft` on 512 samples, computes the power
    and applies the mel matrix, then the 97 frames are `torch.stack`ed.  That is
    ~800 tiny tensor ops per request, so Python/dispatcher overhead dominates the
    whole service although the arithmetic is trivial.

Fix (--fixed):
    Frame the waveform in one call with `Tensor.unfold(-1, n_fft, hop)` and run a
    single batched windowed `rfft` + power + mel matmul over all frames
    (numerically the same result).
"""
import argparse
import heapq
import math
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn
import torch.nn.functional as F

SR = 16000
N_CLASSES = 12


# -------------------------------------------------------------- synthetic traffic
def synth_utterance(label: int, g: torch.Generator) -> torch.Tensor:
    t = torch.arange(SR) / SR
    f0 = 180.0 + 45.0 * label
    sweep = 1.0 + 0.6 * ((label % 4) - 1.5) * t
    onset = float(torch.rand((), generator=g)) * 0.35
    dur = 0.35 + 0.25 * float(torch.rand((), generator=g))
    env = torch.sigmoid((t - onset) * 60) * torch.sigmoid((onset + dur - t) * 60)
    phase = 2 * math.pi * f0 * torch.cumsum(sweep, 0) / SR
    voiced = torch.sin(phase) + 0.5 * torch.sin(2 * phase) + 0.25 * torch.sin((3 + label % 3) * phase)
    noise = 0.05 * torch.randn(SR, generator=g)
    return (0.3 * env * voiced + noise).float()


@dataclass(order=True)
class Event:
    time: float
    seq: int
    kind: str = field(compare=False)
    payload: object = field(compare=False, default=None)


@dataclass
class Request:
    rid: int
    client: int
    arrival: float
    label: int
    audio: torch.Tensor
    feats: torch.Tensor | None = None


def request_stream(n_requests: int, n_clients: int, rate_hz: float, seed: int, variants: int = 8):
    g = torch.Generator().manual_seed(seed)
    bank = [[synth_utterance(c, g) for _ in range(variants)] for c in range(N_CLASSES)]
    now = 0.0
    for rid in range(n_requests):
        now += float(torch.empty(()).exponential_(rate_hz, generator=g))
        label = int(torch.randint(N_CLASSES, (), generator=g))
        client = int(torch.randint(n_clients, (), generator=g))
        base = bank[label][int(torch.randint(variants, (), generator=g))]
        gain = 0.5 + float(torch.rand((), generator=g))
        audio = gain * base + 0.03 * torch.randn(SR, generator=g)
        yield Request(rid, client, now, label, audio)


# ----------------------------------------------------------------------- frontend
def mel_filterbank(n_fft: int, n_mels: int, sr: int, fmin=20.0, fmax=None) -> torch.Tensor:
    fmax = fmax or sr / 2
    hz2mel = lambda f: 2595.0 * math.log10(1.0 + f / 700.0)
    mels = torch.linspace(hz2mel(fmin), hz2mel(fmax), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lo, ce, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins - lo) / (ce - lo)
    down = (hi - bins) / (hi - ce)
    return torch.clamp(torch.minimum(up, down), min=0.0).T.contiguous()  # (n_fft//2+1, n_mels)


class LogMelFrontend(nn.Module):
    def __init__(self, n_fft=512, hop=160, n_mels=40, preemph=0.97, vectorized=False):
        super().__init__()
        self.n_fft, self.hop, self.preemph = n_fft, hop, preemph
        self.vectorized = vectorized
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("fb", mel_filterbank(n_fft, n_mels, SR))

    def forward(self, wav: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, 1, n_mels, frames)
        wav = wav - wav.mean(dim=-1, keepdim=True)
        wav = torch.cat([wav[:, :1], wav[:, 1:] - self.preemph * wav[:, :-1]], dim=1)
        if self.vectorized:
            frames = wav.unfold(-1, self.n_fft, self.hop) * self.window
            spec = torch.fft.rfft(frames, dim=-1)
            mel = (spec.real.square() + spec.imag.square()) @ self.fb
        else:
            n_frames = 1 + (wav.shape[-1] - self.n_fft) // self.hop
            cols = []
            for t in range(n_frames):  # PLANTED
                start = t * self.hop
                spec = torch.fft.rfft(wav[:, start:start + self.n_fft] * self.window)
                cols.append((spec.real.square() + spec.imag.square()) @ self.fb)
            mel = torch.stack(cols, dim=1)
        logmel = torch.log(mel + 1e-6)
        logmel = logmel - logmel.mean(dim=1, keepdim=True)  # per-utterance CMN
        return logmel.transpose(1, 2).unsqueeze(1)


# -------------------------------------------------------------------------- model
class DSBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.dw = nn.Conv2d(ch, ch, 3, padding=1, groups=ch, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.pw = nn.Conv2d(ch, ch, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        return F.relu(self.bn2(self.pw(F.relu(self.bn1(self.dw(x))))))


class DSCNN(nn.Module):
    def __init__(self, ch=24, n_blocks=3, n_classes=N_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, ch, (5, 5), stride=(2, 2), padding=2, bias=False),
                                  nn.BatchNorm2d(ch), nn.ReLU())
        self.blocks = nn.Sequential(*[DSBlock(ch) for _ in range(n_blocks)])
        self.head = nn.Linear(ch, n_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))


# ------------------------------------------------------------------------ service
class MicroBatcher:
    def __init__(self, max_batch: int, max_wait: float):
        self.max_batch, self.max_wait = max_batch, max_wait
        self.pending: list[Request] = []

    def add(self, req: Request) -> bool:
        self.pending.append(req)
        return len(self.pending) >= self.max_batch

    def deadline(self) -> float:
        return self.pending[0].arrival + self.max_wait

    def take(self) -> list[Request]:
        batch, self.pending = self.pending[:self.max_batch], self.pending[self.max_batch:]
        return batch


class KeywordService:
    def __init__(self, frontend: nn.Module, model: nn.Module, batcher: MicroBatcher,
                 per_batch_cost: float = 0.004):
        self.frontend, self.model, self.batcher = frontend.eval(), model.eval(), batcher
        self.per_batch_cost = per_batch_cost  # simulated service time on the clock
        self.queue: list[Event] = []
        self.seq = 0
        self.busy_until = 0.0
        self.results: dict[int, tuple[int, float]] = {}
        self.latencies: list[float] = []
        self.score_sum = 0.0
        self.batch_sizes = Counter()

    def push(self, t: float, kind: str, payload=None):
        self.seq += 1
        heapq.heappush(self.queue, Event(t, self.seq, kind, payload))

    @torch.inference_mode()
    def featurize(self, req: Request):
        # features are computed on arrival so a flush only has to run the CNN
        req.feats = self.frontend(req.audio.unsqueeze(0))
        req.audio = None

    @torch.inference_mode()
    def infer(self, batch: list[Request]) -> torch.Tensor:
        feats = torch.cat([r.feats for r in batch])
        return self.model(feats).log_softmax(dim=-1)

    def flush(self, now: float):
        batch = self.batcher.take()
        if not batch:
            return
        scores = self.infer(batch)
        self.score_sum += float(scores.sum())
        pred = scores.argmax(dim=-1).tolist()
        done = max(now, self.busy_until) + self.per_batch_cost
        self.busy_until = done
        self.batch_sizes[len(batch)] += 1
        for r, p in zip(batch, pred):
            self.results[r.rid] = (p, done)
            self.latencies.append(done - r.arrival)
        if self.batcher.pending:
            self.push(self.batcher.deadline(), "timeout")

    def handle(self, ev: Event):
        if ev.kind == "arrival":
            self.featurize(ev.payload)
            was_empty = not self.batcher.pending
            if self.batcher.add(ev.payload):
                self.flush(ev.time)
            elif was_empty:
                self.push(self.batcher.deadline(), "timeout")
        elif ev.kind == "timeout":
            if self.batcher.pending and self.batcher.deadline() <= ev.time + 1e-12:
                self.flush(ev.time)

    def run(self, stream):
        for req in stream:
            self.push(req.arrival, "arrival", req)
            while self.queue and self.queue[0].time <= req.arrival:
                self.handle(heapq.heappop(self.queue))
        while self.queue:
            self.handle(heapq.heappop(self.queue))
        self.flush(self.busy_until)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()

    torch.set_num_threads(1)  # shared 2-core box: one intra-op thread per job
    torch.manual_seed(0)
    frontend = LogMelFrontend(vectorized=args.fixed)
    model = DSCNN()
    labels = {}

    def traced(stream):
        for r in stream:
            labels[r.rid] = r.label
            yield r

    service = KeywordService(frontend, model, MicroBatcher(max_batch=16, max_wait=0.03))
    t0 = time.perf_counter()
    service.run(traced(request_stream(args.requests, n_clients=16, rate_hz=400.0, seed=1)))
    wall = time.perf_counter() - t0

    lat = torch.tensor(service.latencies)
    print(f"served {len(service.results)} requests in {sum(service.batch_sizes.values())} batches "
          f"(sizes {dict(sorted(service.batch_sizes.items()))})")
    print(f"sim latency p50 {lat.median() * 1e3:.1f} ms  p95 {lat.quantile(0.95) * 1e3:.1f} ms")
    print(f"score checksum {service.score_sum:.3f}   wall {wall:.2f}s")


if __name__ == "__main__":
    main()
