"""Fit a parametric noise spectrum to multi-channel recordings with L-BFGS."""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from psd_fit.model import NoiseSpectrumModel, whittle_nll  # noqa: E402
from psd_fit.signals import make_recordings  # noqa: E402
from psd_fit.spectral import num_segments, welch_psd  # noqa: E402

SEG_LEN = 2048


def fit(recordings, fixed=False, max_iter=60, outer_rounds=3):
    model = NoiseSpectrumModel()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=max_iter,
                            history_size=20, tolerance_grad=1e-9, tolerance_change=1e-12,
                            line_search_fn="strong_wolfe")
    n_seg = num_segments(recordings.shape[-1], SEG_LEN) * recordings.shape[0]
    n_calls = 0

    freqs = observed = None
    if fixed:
        freqs, observed = welch_psd(recordings, seg_len=SEG_LEN)
        freqs, observed = freqs[1:], observed[1:]

    def closure():
        nonlocal n_calls, freqs, observed
        n_calls += 1
        opt.zero_grad()
        if not fixed:
            freqs, observed = welch_psd(recordings, seg_len=SEG_LEN)  # PLANTED
            freqs, observed = freqs[1:], observed[1:]
        loss = whittle_nll(model(freqs), observed, dof=float(n_seg))
        loss.backward()
        return loss

    history = []
    for _ in range(outer_rounds):
        loss = opt.step(closure)
        history.append(loss.item())
    return model, history, n_calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--channels", type=int, default=7)
    parser.add_argument("--log2-samples", type=int, default=19)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)

    recordings = make_recordings(args.channels, 2 ** args.log2_samples, seed=0)
    t0 = time.perf_counter()
    model, history, n_calls = fit(recordings, fixed=args.fixed)
    elapsed = time.perf_counter() - t0

    print(f"L-BFGS: {n_calls} closure evaluations in {elapsed:.2f}s")
    print("loss per round:", " ".join(f"{h:.6f}" for h in history))
    for name, value in model.summary().items():
        print(f"  {name:>8s} = {value:.5g}")


if __name__ == "__main__":
    main()
