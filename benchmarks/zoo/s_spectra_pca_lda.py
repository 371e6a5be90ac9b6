"""PCA-LDA classification of NIR spectra with model selection on a validation split.

The spectra are simulated: each sample is a sum of Gaussian absorption bands
whose positions depend on the material class, plus a sloping baseline,
multiplicative scatter and detector noise. The data are split into train,
validation and test parts. The number of principal components is chosen on
the validation part; the chosen PCA-LDA model is then refitted on train +
validation and scored once on the test part. Column standardisation and PCA
are always fitted on the training rows only, so nothing leaks from the
held-out spectra.

Usage:
    python spectra_pca_lda.py [--components 4,8,16,32] [--shrinkage 0.01]
"""

import argparse
import time

import torch
import torch.nn.functional as F

N_CLASSES = 6
N_SAMPLES = 9000
N_WAVELENGTHS = 64
VAL_FRACTION = 0.2
TEST_FRACTION = 0.2


def simulate_spectra(n, n_wl, n_classes, gen):
    """Return (spectra [n, n_wl], labels [n]) of synthetic absorbance curves."""
    wl = torch.linspace(0.0, 1.0, n_wl)
    # Each class has three characteristic absorption bands.
    centres = torch.rand(n_classes, 3, generator=gen) * 0.8 + 0.1
    widths = torch.rand(n_classes, 3, generator=gen) * 0.05 + 0.02
    labels = torch.randint(0, n_classes, (n,), generator=gen)

    c = centres[labels] + 0.04 * torch.randn(n, 3, generator=gen)
    w = widths[labels]
    amp = 0.5 + torch.rand(n, 3, generator=gen)
    bands = amp[:, :, None] * torch.exp(-0.5 * ((wl[None, None, :] - c[:, :, None]) / w[:, :, None]) ** 2)
    spectra = bands.sum(1)

    # Baseline drift, multiplicative scatter and detector noise.
    slope = 0.3 * torch.randn(n, 1, generator=gen)
    offset = 0.2 * torch.randn(n, 1, generator=gen)
    scatter = 1.0 + 0.1 * torch.randn(n, 1, generator=gen)
    spectra = scatter * spectra + slope * wl[None, :] + offset
    spectra = spectra + 0.4 * torch.randn(n, n_wl, generator=gen)
    return spectra, labels


def split_indices(n, val_fraction, test_fraction, gen):
    """Shuffled (train, val, test) index tensors."""
    perm = torch.randperm(n, generator=gen)
    n_val, n_test = int(n * val_fraction), int(n * test_fraction)
    return perm[n_val + n_test:], perm[:n_val], perm[n_val:n_val + n_test]


class PCA:
    """Standardise columns, then project onto the top principal axes."""

    def __init__(self, n_components, fixed=False):
        self.n_components = n_components
        self.fixed = fixed

    def fit(self, x):
        self.mean = x.mean(0, keepdim=True)
        self.scale = x.std(0, keepdim=True).clamp_min(1e-8)
        z = (x - self.mean) / self.scale
        if self.fixed:
            _, s, vh = torch.linalg.svd(z, full_matrices=False)
        else:
            u, s, vh = torch.linalg.svd(z)  # PLANTED
        # Make the sign of each axis deterministic: largest loading positive.
        vh = vh[: self.n_components]
        signs = torch.sign(vh.gather(1, vh.abs().argmax(1, keepdim=True)))
        self.components = vh * signs
        var = s ** 2 / (x.shape[0] - 1)
        self.explained = var[: self.n_components] / var.sum()
        return self

    def transform(self, x):
        z = (x - self.mean) / self.scale
        return z @ self.components.T


class LDA:
    """Linear discriminant analysis with a shrunk pooled covariance."""

    def __init__(self, shrinkage=1e-2):
        self.shrinkage = shrinkage

    def fit(self, x, y, n_classes):
        counts = torch.bincount(y, minlength=n_classes).to(x.dtype)
        sums = torch.zeros(n_classes, x.shape[1], dtype=x.dtype).index_add_(0, y, x)
        self.means = sums / counts[:, None]
        resid = x - self.means[y]
        cov = resid.T @ resid / (x.shape[0] - n_classes)
        # Shrink towards a scaled identity so small components stay well posed.
        target = cov.diagonal().mean() * torch.eye(cov.shape[0], dtype=x.dtype)
        cov = (1 - self.shrinkage) * cov + self.shrinkage * target
        chol = torch.linalg.cholesky(cov)
        self.coef = torch.cholesky_solve(self.means.T, chol).T          # [C, D]
        self.intercept = -0.5 * (self.coef * self.means).sum(1) + torch.log(counts / counts.sum())
        return self

    def log_proba(self, x):
        return F.log_softmax(x @ self.coef.T + self.intercept, dim=1)


def evaluate(clf, x, y):
    logp = clf.log_proba(x)
    acc = (logp.argmax(1) == y).float().mean().item()
    nll = F.nll_loss(logp, y).item()
    return acc, nll


def fit_pca_lda(x, y, k, shrinkage, fixed):
    pca = PCA(k, fixed=fixed).fit(x)
    clf = LDA(shrinkage).fit(pca.transform(x), y, N_CLASSES)
    return pca, clf


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--components", default="4,8,16,32",
                        help="comma-separated numbers of principal components to compare")
    parser.add_argument("--shrinkage", type=float, default=1e-2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed", action="store_true", help="use the faster variant")
    args = parser.parse_args()
    ks = sorted(int(k) for k in args.components.split(","))

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    spectra, labels = simulate_spectra(N_SAMPLES, N_WAVELENGTHS, N_CLASSES, gen)
    tr, va, te = split_indices(N_SAMPLES, VAL_FRACTION, TEST_FRACTION, gen)
    print(f"simulated {N_SAMPLES} spectra x {N_WAVELENGTHS} wavelengths, {N_CLASSES} classes "
          f"(train {len(tr)}, val {len(va)}, test {len(te)})")

    t0 = time.perf_counter()
    # Model selection: one PCA with the largest k; smaller models use its leading scores.
    pca = PCA(max(ks), fixed=args.fixed).fit(spectra[tr])
    s_tr, s_va = pca.transform(spectra[tr]), pca.transform(spectra[va])
    results = {}
    for k in ks:
        clf = LDA(args.shrinkage).fit(s_tr[:, :k], labels[tr], N_CLASSES)
        results[k] = evaluate(clf, s_va[:, :k], labels[va])
        print(f"k={k:>3}  explained var {pca.explained[:k].sum():.3f}  "
              f"val acc {results[k][0]:.4f}  val nll {results[k][1]:.4f}")
    best = min(ks, key=lambda k: results[k][1])

    # Refit the chosen model on train + validation and score the test split once.
    trva = torch.cat([tr, va])
    pca, clf = fit_pca_lda(spectra[trva], labels[trva], best, args.shrinkage, args.fixed)
    acc, nll = evaluate(clf, pca.transform(spectra[te]), labels[te])
    print(f"selected k={best}: test acc {acc:.4f}  test nll {nll:.4f}  "
          f"({time.perf_counter() - t0:.1f}s)")


if __name__ == "__main__":
    main()
