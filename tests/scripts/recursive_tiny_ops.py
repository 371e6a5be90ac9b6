"""Tiny ops issued by a recursive helper, started from one line of the program: the ops are in
the helper, the fix (a larger leaf, or one vectorised op) goes where the recursion starts, up
the call path past the helper's calls of itself."""
import torch


def tree_sum(x, leaf):
    n = x.shape[0]
    if n <= leaf:
        return x.sum()
    h = n // 2
    return tree_sum(x[:h], leaf) + tree_sum(x[h:], leaf)  # HOT


def main():
    x = torch.randn(1024)
    total = 0.0
    for _ in range(150):
        total += float(tree_sum(x, leaf=1))  # CALLER
    print(f"{total:.3f}")


main()
