"""Fine-tune a tiny BERT-style encoder for intent classification (HF-style training loop)."""
import argparse
import math
import time
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


@dataclass
class TrainingArguments:
    vocab_size: int = 3000
    num_labels: int = 6
    max_length: int = 160
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 192
    train_examples: int = 1024
    eval_examples: int = 256
    batch_size: int = 32
    epochs: int = 2
    learning_rate: float = 2e-3
    warmup_ratio: float = 0.1
    seed: int = 7
    pad_to_max_length: bool = True


@dataclass
class SequenceClassifierOutput:
    loss: Optional[torch.Tensor]
    logits: torch.Tensor


class SyntheticIntentDataset(Dataset):
    """Utterances of random filler tokens sprinkled with class-specific keywords."""

    def __init__(self, n, args, generator):
        self.examples = []
        keywords = torch.arange(10, 10 + args.num_labels * 8).view(args.num_labels, 8)
        for _ in range(n):
            label = int(torch.randint(args.num_labels, (1,), generator=generator))
            length = int(torch.randint(6, 41, (1,), generator=generator))
            ids = torch.randint(200, args.vocab_size, (length,), generator=generator)
            pos = torch.randperm(length, generator=generator)[: max(2, length // 5)]
            ids[pos] = keywords[label][torch.randint(8, (len(pos),), generator=generator)]
            ids[0] = 1  # [CLS]
            self.examples.append({"input_ids": ids, "label": label})

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]


class PaddingCollator:
    def __init__(self, max_length, pad_to_max_length, pad_token_id=0):
        self.max_length = max_length
        self.pad_to_max_length = pad_to_max_length
        self.pad_token_id = pad_token_id

    def __call__(self, features):
        lengths = [min(len(f["input_ids"]), self.max_length) for f in features]
        if self.pad_to_max_length:
            target = self.max_length  # PLANTED
        else:
            target = max(lengths)
        input_ids = torch.full((len(features), target), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros(len(features), target, dtype=torch.long)
        for row, (f, n) in enumerate(zip(features, lengths)):
            input_ids[row, :n] = f["input_ids"][:n]
            attention_mask[row, :n] = 1
        labels = torch.tensor([f["label"] for f in features])
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.intermediate_size), nn.GELU(),
                                 nn.Linear(cfg.intermediate_size, cfg.hidden_size))
        self.ln2 = nn.LayerNorm(cfg.hidden_size)

    def forward(self, x, key_padding_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.num_heads)
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ffn(x))


class TinyBertForSequenceClassification(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.pos_emb = nn.Embedding(cfg.max_length, cfg.hidden_size)
        self.emb_ln = nn.LayerNorm(cfg.hidden_size)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.classifier = nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        positions = torch.arange(input_ids.shape[1])
        h = self.emb_ln(self.tok_emb(input_ids) + self.pos_emb(positions))
        pad = attention_mask == 0
        for layer in self.layers:
            h = layer(h, pad)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1)
        logits = self.classifier(pooled)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits)


class TrainerCallback:
    def on_step_end(self, state): pass
    def on_evaluate(self, state, metrics): pass


class PrintProgressCallback(TrainerCallback):
    def __init__(self, every=20):
        self.every = every

    def on_step_end(self, state):
        if state["step"] % self.every == 0:
            print(f"step {state['step']:4d}  loss {state['loss']:.4f}  lr {state['lr']:.2e}")

    def on_evaluate(self, state, metrics):
        print(f"epoch {state['epoch']}  eval_loss {metrics['eval_loss']:.4f}  eval_acc {metrics['eval_acc']:.4f}")


class Trainer:
    def __init__(self, model, args, train_dataset, eval_dataset, data_collator, callbacks=()):
        self.model, self.args = model, args
        g = torch.Generator().manual_seed(args.seed)
        self.train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True,
                                       collate_fn=data_collator, generator=g)
        self.eval_loader = DataLoader(eval_dataset, batch_size=args.batch_size, collate_fn=data_collator)
        self.callbacks = list(callbacks)
        total = args.epochs * len(self.train_loader)
        warmup = int(args.warmup_ratio * total)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min((s + 1) / max(1, warmup), max(0.0, (total - s) / max(1, total - warmup))))

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        loss_sum, correct, n = 0.0, 0, 0
        for batch in self.eval_loader:
            out = self.model(**batch)
            loss_sum += out.loss.item() * len(batch["labels"])
            correct += (out.logits.argmax(-1) == batch["labels"]).sum().item()
            n += len(batch["labels"])
        self.model.train()
        return {"eval_loss": loss_sum / n, "eval_acc": correct / n}

    def train(self):
        state = {"step": 0, "epoch": 0}
        self.model.train()
        for epoch in range(self.args.epochs):
            state["epoch"] = epoch
            for batch in self.train_loader:
                outputs = self.model(**batch)
                outputs.loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                state.update(step=state["step"] + 1, loss=outputs.loss.item(), lr=self.scheduler.get_last_lr()[0])
                for cb in self.callbacks:
                    cb.on_step_end(state)
            metrics = self.evaluate()
            for cb in self.callbacks:
                cb.on_evaluate(state, metrics)
        return metrics


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    cli = parser.parse_args()
    args = TrainingArguments()
    torch.manual_seed(args.seed)
    data_gen = torch.Generator().manual_seed(args.seed)
    train_ds = SyntheticIntentDataset(args.train_examples, args, data_gen)
    eval_ds = SyntheticIntentDataset(args.eval_examples, args, data_gen)
    collator = PaddingCollator(args.max_length, pad_to_max_length=not cli.fixed)
    model = TinyBertForSequenceClassification(args)
    t0 = time.perf_counter()
    metrics = Trainer(model, args, train_ds, eval_ds, collator, callbacks=[PrintProgressCallback()]).train()
    print(f"done in {time.perf_counter() - t0:.1f}s  final eval_acc={metrics['eval_acc']:.4f} "
          f"eval_loss={metrics['eval_loss']:.5f}")


if __name__ == "__main__":
    main()
