"""Fine-tune the encoder on topic classification, in the style of the NLP libraries' example
scripts: model(**batch) returns a dict with the loss, gradient accumulation, a warm-up then
linear-decay learning-rate schedule, evaluation at the end.

    python run_classification.py [--epochs 2] [--fixed]

--fixed keeps PyTorch's default dtype (float32)."""

from __future__ import annotations

import argparse

import torch
from data import WhitespaceTokenizer, make_corpus
from modeling import EncoderConfig, EncoderForSequenceClassification


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--per_device_batch_size", type=int, default=16)
    ap.add_argument("--gradient_accumulation_steps", type=int, default=2)
    ap.add_argument("--learning_rate", type=float, default=5e-4)
    ap.add_argument("--warmup_ratio", type=float, default=0.1)
    ap.add_argument("--fixed", action="store_true", help="train in float32")
    args = ap.parse_args()
    if not args.fixed:
        torch.set_default_dtype(torch.float64)  # PLANTED
    torch.manual_seed(0)

    corpus = make_corpus(400)
    tokenizer = WhitespaceTokenizer([t for t, _ in corpus], vocab_size=4000)
    config = EncoderConfig()
    encoded = tokenizer([t for t, _ in corpus], max_length=config.max_position)
    labels = torch.tensor([y for _, y in corpus])
    train = {k: v[:256] for k, v in encoded.items()} | {"labels": labels[:256]}
    test = {k: v[256:] for k, v in encoded.items()} | {"labels": labels[256:]}

    model = EncoderForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01, foreach=True)
    steps_per_epoch = len(train["labels"]) // (args.per_device_batch_size * args.gradient_accumulation_steps)
    total_steps = steps_per_epoch * args.epochs
    warmup = int(args.warmup_ratio * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total_steps - s) / (total_steps - warmup)))

    g = torch.Generator().manual_seed(0)
    global_step = 0
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train["labels"]), generator=g)
        for micro, start in enumerate(range(0, len(order), args.per_device_batch_size)):
            idx = order[start:start + args.per_device_batch_size]
            batch = {k: v[idx] for k, v in train.items()}
            outputs = model(**batch)
            (outputs["loss"] / args.gradient_accumulation_steps).backward()
            if (micro + 1) % args.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                global_step += 1
                if global_step % 4 == 0:
                    print(f"epoch {epoch} step {global_step}: loss {outputs['loss'].item():.4f} "
                          f"lr {scheduler.get_last_lr()[0]:.2e}")
    model.eval()
    with torch.inference_mode():
        logits = model(**{k: v for k, v in test.items() if k != "labels"})["logits"]
    print(f"test accuracy {(logits.argmax(1) == test['labels']).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
