import pickle

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((4,), float(i * i))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)


if __name__ == "__main__":
    net = Net()
    pickle.dumps(net)  # classes defined here must pickle
    loader = DataLoader(Squares(), batch_size=8, num_workers=2, multiprocessing_context="spawn")
    total = 0
    for batch in loader:
        total += net(batch).shape[0]
    print(f"SPAWN total={total}")
