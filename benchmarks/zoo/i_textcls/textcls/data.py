import torch
from torch.utils.data import Dataset


class FeatureDataset(Dataset):
    def __init__(self, doc_features, labels):
        self.doc_features = doc_features
        self.labels = labels

    def __len__(self):
        return len(self.doc_features)

    def __getitem__(self, i):
        return self.doc_features[i], self.labels[i]


class TfidfCollate:
    """Turns a list of feature-id tensors into EmbeddingBag inputs with
    L2-normalised tf-idf per-sample weights."""

    def __init__(self, idf_table, reuse_idf=False):
        self.idf_table = idf_table
        self.n_features = idf_table.n_features
        self.reuse_idf = reuse_idf
        self._idf = idf_table.compute() if reuse_idf else None

    def __call__(self, batch):
        feats, labels = zip(*batch)
        lengths = torch.tensor([len(f) for f in feats])
        n = len(feats)
        doc = torch.repeat_interleave(torch.arange(n), lengths)
        keys, counts = torch.unique(doc * self.n_features + torch.cat(feats), return_counts=True)
        doc_u = keys // self.n_features
        feat_u = keys % self.n_features

        if self.reuse_idf:
            idf = self._idf
        else:
            idf = self.idf_table.compute()  # PLANTED
        weights = counts.float() / lengths[doc_u].float() * idf[feat_u]
        norms = torch.zeros(n).index_add_(0, doc_u, weights * weights).sqrt()
        weights = weights / norms[doc_u]

        bag_sizes = torch.bincount(doc_u, minlength=n)
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), bag_sizes.cumsum(0)[:-1]])
        return feat_u, offsets, weights, torch.stack(labels)
