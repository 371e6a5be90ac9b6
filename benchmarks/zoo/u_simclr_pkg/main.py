"""SimCLR pretraining of a small CNN on synthetic 32x32 images, then a linear probe.

    python u_simclr_pkg/main.py --steps 14 --batch-size 32
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from augment import SimCLRAugment  # noqa: E402
from data import ContrastiveViewLoader, make_synthetic_images  # noqa: E402
from model import SimCLRModel  # noqa: E402
from trainer import Trainer  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-train", type=int, default=1536)
    p.add_argument("--num-test", type=int, default=512)
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--widths", type=int, nargs="+", default=[8, 16, 32])
    p.add_argument("--probe-epochs", type=int, default=10)
    p.add_argument("--workers", type=int, default=3, help="augmentation threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    # loader threads run tensor ops next to the training step: one intra-op thread each
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    train = make_synthetic_images(args.num_train, seed=args.seed)
    test = make_synthetic_images(args.num_test, seed=args.seed + 1)
    model = SimCLRModel(widths=tuple(args.widths))
    print(f"{args.num_train} train / {args.num_test} test images, "
          f"{sum(p.numel() for p in model.parameters()) / 1e3:.1f}k params")

    trainer = Trainer(model, args.steps, lr=args.lr, warmup_steps=args.warmup_steps,
                      temperature=args.temperature)
    loader_kw = {"put_timeout": 0.1} if args.fixed else {}
    with ContrastiveViewLoader(train[0], args.batch_size, SimCLRAugment(size=32), seed=args.seed + 100,
                               num_workers=args.workers, **loader_kw) as loader:
        trainer.fit(loader)
    t_train = time.perf_counter() - t0

    tr_acc, te_acc = trainer.linear_probe(train, test, num_classes=10, epochs=args.probe_epochs,
                                          seed=args.seed)
    print(f"linear probe: train acc {tr_acc:.4f}  test acc {te_acc:.4f}")
    print(f"pretraining {t_train:.1f}s, total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
