"""Minimal Trainer in the spirit of transformers.Trainer."""
import math
import time
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader


@dataclass
class TrainingArguments:
    output_dir: str = "runs/mlm"
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-6
    warmup_ratio: float = 0.1
    max_steps: int = 40
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    eval_steps: int = 40
    seed: int = 42
    no_decay: tuple = field(default_factory=lambda: ("bias", "norm.weight"))


class Trainer:
    def __init__(self, model, args: TrainingArguments, train_dataset, eval_dataset, data_collator):
        self.model = model
        self.args = args
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.data_collator = data_collator
        self.optimizer = None
        self.lr_scheduler = None
        self.state = {"global_step": 0, "log_history": []}

    # ------------------------------------------------------------------ setup
    def get_train_dataloader(self):
        g = torch.Generator().manual_seed(self.args.seed)
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size,
                          shuffle=True, collate_fn=self.data_collator, generator=g, drop_last=True)

    def get_eval_dataloader(self):
        return DataLoader(self.eval_dataset, batch_size=self.args.per_device_eval_batch_size,
                          shuffle=False, collate_fn=self.data_collator)

    def create_optimizer(self):
        decay, no_decay = [], []
        for n, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            (no_decay if any(nd in n for nd in self.args.no_decay) else decay).append(p)
        groups = [
            {"params": decay, "weight_decay": self.args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        a = self.args
        self.optimizer = torch.optim.AdamW(groups, lr=a.learning_rate,
                                           betas=(a.adam_beta1, a.adam_beta2), eps=a.adam_epsilon)
        return self.optimizer

    def create_scheduler(self, num_training_steps):
        warmup = int(self.args.warmup_ratio * num_training_steps)

        def lr_lambda(step):
            if step < warmup:
                return float(step) / float(max(1, warmup))
            return max(0.0, float(num_training_steps - step) / float(max(1, num_training_steps - warmup)))

        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)
        return self.lr_scheduler

    # --------------------------------------------------------------- training
    def training_step(self, batch):
        self.model.train()
        out = self.model(**batch)
        loss = out["loss"]
        loss.backward()
        return loss.detach()

    def log(self, logs):
        logs["step"] = self.state["global_step"]
        self.state["log_history"].append(logs)
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()),
              flush=True)

    def train(self):
        a = self.args
        self.create_optimizer()
        self.create_scheduler(a.max_steps)
        loader = self.get_train_dataloader()
        tr_loss = torch.zeros(())
        t0 = time.perf_counter()
        step = 0
        while step < a.max_steps:
            for batch in loader:
                tr_loss += self.training_step(batch)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), a.max_grad_norm)
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                step += 1
                self.state["global_step"] = step
                if step % a.logging_steps == 0:
                    self.log({"loss": float(tr_loss) / a.logging_steps,
                              "lr": self.lr_scheduler.get_last_lr()[0]})
                    tr_loss.zero_()
                if step % a.eval_steps == 0:
                    self.log(self.evaluate())
                if step >= a.max_steps:
                    break
        self.log({"train_runtime": time.perf_counter() - t0})
        return self.state

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        total, n = 0.0, 0
        for batch in self.get_eval_dataloader():
            out = self.model(**batch)
            k = int((batch["labels"] != -100).sum())
            total += float(out["loss"]) * k
            n += k
        eval_loss = total / max(n, 1)
        return {"eval_loss": eval_loss, "eval_ppl": math.exp(min(eval_loss, 50.0))}
