"""Full-batch trainer with early stopping on the validation mask."""
import time

import torch
import torch.nn.functional as F


def masked_accuracy(logits, y, mask):
    return (logits[mask].argmax(dim=1) == y[mask]).float().mean().item()


class EarlyStopping:
    """Stop once the validation loss has not improved for `patience` epochs."""

    def __init__(self, patience=5, min_delta=0.0):
        self.patience, self.min_delta = patience, min_delta
        self.best, self.best_epoch, self.bad_epochs = float("inf"), 0, 0

    def step(self, value, epoch):
        improved = value < self.best - self.min_delta
        if improved:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
        else:
            self.bad_epochs += 1
        return improved

    @property
    def should_stop(self):
        return self.bad_epochs >= self.patience


class Trainer:
    def __init__(self, model, data, lr=0.01, weight_decay=5e-4, patience=5,
                 max_epochs=200, log_every=2):
        self.model, self.data = model, data
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.stopper = EarlyStopping(patience=patience)
        self.max_epochs, self.log_every = max_epochs, log_every
        self.best_state = None
        self.history = []

    def train_step(self):
        d = self.data
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(d.x, d.graph)
        loss = F.cross_entropy(logits[d.train_mask], d.y[d.train_mask])
        loss.backward()
        self.optimizer.step()
        return loss.item()

    @torch.no_grad()
    def evaluate(self):
        d = self.data
        self.model.eval()
        logits = self.model(d.x, d.graph)
        return {
            "train_acc": masked_accuracy(logits, d.y, d.train_mask),
            "val_acc": masked_accuracy(logits, d.y, d.val_mask),
            "val_loss": F.cross_entropy(logits[d.val_mask], d.y[d.val_mask]).item(),
            "test_acc": masked_accuracy(logits, d.y, d.test_mask),
        }

    def fit(self):
        t0 = time.perf_counter()
        for epoch in range(1, self.max_epochs + 1):
            loss = self.train_step()
            metrics = self.evaluate()
            self.history.append(dict(metrics, epoch=epoch, loss=loss))
            if self.stopper.step(metrics["val_loss"], epoch):
                self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            if epoch % self.log_every == 0:
                print(f"epoch {epoch:4d}  loss {loss:.4f}  train {metrics['train_acc']:.4f}  "
                      f"val {metrics['val_acc']:.4f}  val_loss {metrics['val_loss']:.4f}  "
                      f"({time.perf_counter() - t0:.1f}s)")
            if self.stopper.should_stop:
                print(f"early stopping at epoch {epoch} (best epoch {self.stopper.best_epoch})")
                break
        self.model.load_state_dict(self.best_state)
        return self.evaluate()
