"""An evaluation script: model calls over batches (the module clock counts them as steps), then
a per-element `.item()` scoring loop over all predictions, most of the run, after the calls."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).eval()
batches = [torch.randn(512, 32) for _ in range(40)]
labels = [torch.randint(0, 10, (512,)) for _ in range(40)]
predictions = []
with torch.no_grad():
    for x in batches:
        predictions.append(model(x).argmax(dim=1))
correct = 0
total = 0
for _ in range(6):  # several passes, as a metric computed per class would
    for pred, label in zip(predictions, labels):
        for i in range(pred.shape[0]):
            correct += int(pred[i].item() == label[i].item())  # PLANTED
            total += 1
print(f"accuracy {correct / total:.3f}")
