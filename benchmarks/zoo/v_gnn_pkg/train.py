"""Full-batch transductive training with per-epoch evaluation."""
import copy
import time

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model, graph):
    model.eval()
    logits = model(graph.x, graph.edge_index, graph.deg_inv_sqrt)
    pred = logits.argmax(-1)
    accs = {split: (pred[idx] == graph.y[idx]).float().mean().item()
            for split, idx in (("train", graph.train_idx), ("val", graph.val_idx),
                               ("test", graph.test_idx))}
    accs["val_loss"] = F.cross_entropy(logits[graph.val_idx], graph.y[graph.val_idx]).item()
    return accs


def train_epoch(model, graph, optimizer):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    logits = model(graph.x, graph.edge_index, graph.deg_inv_sqrt)
    loss = F.cross_entropy(logits[graph.train_idx], graph.y[graph.train_idx])
    loss.backward()
    optimizer.step()
    return loss.item()


def fit(model, graph, epochs=12, lr=0.01, weight_decay=5e-4, log_every=2):
    """Adam on the labelled nodes; keeps the weights with the best val accuracy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, history = {"val": -1.0}, None, []
    t0 = time.perf_counter()
    for epoch in range(1, epochs + 1):
        loss = train_epoch(model, graph, optimizer)
        accs = evaluate(model, graph)
        history.append((epoch, loss, accs))
        if accs["val"] > best["val"]:
            best = dict(accs, epoch=epoch)
            best_state = copy.deepcopy(model.state_dict())
        if epoch % log_every == 0 or epoch == 1:
            print(f"epoch {epoch:3d} | loss {loss:.4f} | train {accs['train']:.3f} "
                  f"| val {accs['val']:.3f} | test {accs['test']:.3f} "
                  f"| {time.perf_counter() - t0:6.1f}s")
    model.load_state_dict(best_state)
    return best, history
