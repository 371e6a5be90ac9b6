"""Per-customer spending statistics from a transaction log, and the customers whose spending looks unusual.

A straight-line analysis script (as run from a notebook): no functions, no training loop.
"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--transactions", type=int, default=1_200_000)
ap.add_argument("--customers", type=int, default=1500)
ap.add_argument("--fixed", action="store_true", help="group rows once (sort + split), not a mask per customer")
args = ap.parse_args()

g = torch.Generator().manual_seed(0)
customer = torch.randint(0, args.customers, (args.transactions,), generator=g)
typical = torch.rand(args.customers, generator=g) * 80 + 10
amount = typical[customer] * torch.empty(args.transactions).exponential_(generator=g)
hour = torch.randint(0, 24, (args.transactions,), generator=g)
night = (hour < 6).float()

ids = customer.unique()
if args.fixed:
    order = customer.argsort(stable=True)
    counts = torch.bincount(customer, minlength=args.customers)[ids]
    sizes = counts.tolist()
    by_customer = dict(zip(ids.tolist(), zip(amount[order].split(sizes), night[order].split(sizes))))

rows = []
for cid in ids.tolist():
    if args.fixed:
        spent, at_night = by_customer[cid]
    else:
        mask = customer == cid  # PLANTED
        spent, at_night = amount[mask], night[mask]
    q = torch.quantile(spent, torch.tensor([0.5, 0.99]))
    rows.append(torch.stack([spent.sum(), spent.mean(), q[0], q[1], at_night.mean()]))

stats = torch.stack(rows)
z = (stats - stats.mean(0)) / stats.std(0)
unusual = (z.abs() > 3).any(1).nonzero().flatten()
print(f"{len(ids)} customers; total {stats[:, 0].sum():.0f}; {len(unusual)} unusual: {ids[unusual][:10].tolist()}")
