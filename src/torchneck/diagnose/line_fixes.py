"""Fix texts of the slow idioms op_hotspot names at a line (`rules/ops.py`), in the order the rule
prefers them when a line shows more than one: each a template of the line (`{at}`) and, for a
re-factorised matrix, what it is (`{what}`). A new idiom adds its evidence field and its text here."""

from __future__ import annotations

from .chains import INDEXING_OPS

LINE_IDIOM_FIXES: tuple[tuple[str, str], ...] = (
    ("broadcast_at",
     "Line {at} builds every pairwise product of two broadcast tensors and then sums it: that is a matrix "
     "product, a @ b.T (or torch.einsum('id,jd->ij', a, b), torch.bmm): no pairwise tensor in memory, and "
     "a BLAS kernel instead of two element-wise passes. A cosine similarity of broadcast tensors is the "
     "product of their normalised rows: F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T."),
    ("gradient_asked_at",
     "Line {at} makes data require a gradient: every backward then fills and accumulates a gradient as "
     "large as the whole tensor, which no optimizer uses. Leave data without requires_grad (ask for input "
     "gradients only on the batch you attribute, `xb.requires_grad_()`, when you need them)."),
    ("chain_at",
     "Line {at} evaluates its chain of products left to right: `A @ B @ v` first builds the whole matrix A"
     " @ B, then multiplies it by the vector v. Multiply right to left, A @ (B @ v) (an element-wise scale"
     " as s * (X @ v)): matrix-vector products only."),
    ("recomputed_at",
     "Line {at} recomputes, on every pass of its loop, a value whose inputs the loop never changes: "
     "compute it once before the loop and reuse it (slice or index the result inside the loop)."),
    ("window_restacked_at",
     "Line {at} stacks the whole window it keeps and reduces it again on every pass, though one element "
     "enters it and one leaves: keep the reduction running instead (running += new; running -= "
     "window.popleft() once it is full; the mean is running / len(window)), in an integer or float64 "
     "accumulator if the sum must stay exact. For a median or quantile, keep the window as one "
     "preallocated tensor and overwrite its oldest slot."),
    ("dense_diagonal_at",
     "Line {at} gives a multivariate normal a diagonal matrix made dense: every construction factorises "
     "it (a Cholesky per batch element) and every log_prob, rsample and KL solves with the factor. Use "
     "independent normals: Independent(Normal(mu, std), 1) (std = exp(0.5 * logvar)): the same "
     "distribution, element-wise, with a closed-form KL against another diagonal normal."),
    ("copied_whole_at",
     "Line {at} copies a whole tensor or array and then keeps the rows an index picks: index first and "
     "copy only those (torch.from_numpy(array[idx]), or tensor[idx] on the original; torch.from_numpy "
     "shares a NumPy array's memory without a copy)."),
    ("pairwise_at",
     "Line {at} builds every pairwise difference of two broadcast tensors (an N x M x D tensor) to square "
     "and sum it: use torch.cdist(a, b) (squared: cdist(a, b) ** 2), or the expansion (a * a).sum(1)[:, "
     "None] + (b * b).sum(1)[None] - 2 * a @ b.T: one matrix product, no pairwise tensor in memory "
     "(forward or backward)."),
    ("rank_by_sort",
     "Line {at} sorts the whole tensor only to find where given elements land: count the elements ranked "
     "above each instead, one pass and no sort: rank = (scores > scores.gather(1, target[:, None])).sum(1)"
     " + 1 (>= and ties as you need)."),
    ("determinant_at",
     "Line {at} assembles a matrix product to take its determinant: the log-determinant of a product is "
     "the sum of its factors', and a triangular factor's is the sum of the log of its diagonal (an LU-"
     "parametrised layer's log|det W| is log_s.sum()); a permutation's is 0. No N x N product and no "
     "O(N^3) factorisation per call."),
    ("jacobian_diagonal_at",
     "Line {at} computes the whole Jacobian of a batch, (B, D, B, D) with one backward pass per output "
     "element, and keeps only its per-sample blocks. With samples that do not interact, differentiate the "
     "sum over the batch (jacobian(lambda x: f(x).sum(0), x), then move the batch axis first) or use "
     "torch.func.vmap(torch.func.jacrev(f))(x): D passes instead of B x D."),
    ("diagonal_at",
     "Line {at} computes a whole N x N matrix product and keeps only its diagonal: compute the diagonal "
     "alone, row by row, as an element-wise product summed: diag(a @ b) is (a * b.T).sum(-1), diag(d @ P @"
     " d.T) is ((d @ P) * d).sum(-1), trace(a @ b) is (a * b.T).sum() (or torch.einsum('ij,ji->i', a, b)):"
     " N x D work instead of N x N x D, and no N x N matrix."),
    ("one_hot_at",
     "Line {at} builds a one-hot matrix (batch x categories, all zeros but one per row) to multiply it by "
     "a table: index the table instead, `table[ids]` (or F.embedding(ids, table), an nn.Embedding): the "
     "same rows, with no product over the zeros and no one-hot matrix, backward included."),
    ("index_copied_at",
     "Line {at} copies a row index across every column so a gather or scatter can take it: an [E, F] int64 "
     "tensor written on every call, then read beside the values. Take the rows with the row index itself: "
     "x.index_select(0, idx) for the gather, out.index_add_(0, idx, src) for the scatter-add (or, keeping "
     "gather, idx[:, None].expand(-1, F), a view that writes nothing)."),
    ("refactorised_at",
     "Line {at} factorises {what} again on every call, and it never changes: factorise it once where it is"
     " built (lu, piv = torch.linalg.lu_factor(A); torch.linalg.cholesky(A) when it is symmetric positive "
     "definite) and solve each call with the factors (torch.linalg.lu_solve(lu, piv, b), "
     "torch.cholesky_solve(b, L)): a pair of triangular solves instead of a factorisation."),
    ("inverse_at",
     "Line {at} inverts a matrix only to multiply by the inverse: solve instead, torch.linalg.solve(A, b) "
     "(or torch.cholesky_solve for a symmetric positive definite A, torch.linalg.lstsq when it is not "
     "square): one factorisation and a substitution, faster and more accurate than inv(A) @ b."),
    ("full_factors_at",
     "Line {at} asks for the full factors of a tall m x n matrix: torch.linalg.svd defaults to "
     "full_matrices=True (torch.svd did not), so it builds an m x m U of which a projection, a PCA or a "
     "least-squares fit uses the first n columns. Pass full_matrices=False (torch.linalg.qr: "
     "mode='reduced'), or call torch.linalg.svdvals when only the singular values are used."),
    ("separable_at",
     "Line {at} convolves with a k x k kernel that is the outer product of 1-D filters (a Gaussian or box "
     "blur is): k * k multiply-adds a pixel, backward included. Convolve with the 1-D filter along one axis, "
     "then the other: F.conv2d(F.conv2d(x, g.view(1, 1, 1, k), padding=(0, r)), g.view(1, 1, k, 1), "
     "padding=(r, 0)): 2k a pixel, the same result."),
    ("strided_at",
     "Line {at} runs this op on a tensor whose last dimension is not contiguous in memory: a transposed or "
     "permuted view (`.T`, `.t()`, `.transpose()`, `.permute()`, `.mT`) kept as it is. Gathers and "
     "reductions (embedding_bag, index_select, gather, sum over rows) then read it element by element or "
     "take a strided fallback kernel, often ten times slower. Make it contiguous once, where the view is "
     "made (`x = x.T.contiguous()`, or compute it in the layout it is used in), not on every call."),
    ("pair_count_at",
     "Line {at} compares every element of one tensor with every element of another (an N x M boolean "
     "tensor) to count the pairs: sort one side once and count with a binary search, O((N + M) log M) and no "
     "pairwise tensor: s = neg.sort().values; below = torch.searchsorted(s, pos) (the negatives under each "
     "positive); ties = torch.searchsorted(s, pos, right=True) - below. An AUC is (below.sum() + 0.5 * "
     "ties.sum()) / (len(pos) * len(neg)), or from ranks: (rank sum of the positives - n_pos (n_pos + 1) / "
     "2) / (n_pos n_neg)."),
    ("top_k_by_sort",
     "Line {at} sorts the whole tensor to keep its first elements: torch.topk(x, k, dim, largest=...) "
     "(indices: .indices) finds them without ordering the rest (or kthvalue / min / max for one of them)."),
)
"""(the `OpHotspotEvidence` field naming the line, the fix) for each idiom."""


def backward_fix(forward: str) -> str:
    """The fix for an op that runs in the backward of `forward` called on the lines shown: only
    indexing's gradient is a whole zero tensor per call; any other op's repeats its forward work."""
    if forward in INDEXING_OPS:
        return (f"This op runs in the backward of {forward}, once for every call of it on the lines shown: each "
                "call's gradient is built separately (the gradient of indexing fills a zero tensor as big as the "
                "whole source, per call). Call it once on all the rows (index with a tensor of indices, not one row "
                "per Python iteration) so its backward runs once.")
    return (f"This op is the gradient of {forward} on the lines shown: if that work is needed at this size and "
            "precision, it is the model's; otherwise make the forward call cheaper (smaller or batched inputs, lower "
            "precision), or run it under torch.no_grad() if no gradient is used.")


def line_idiom_fix(evidence: object) -> str | None:
    """The fix of the first idiom `evidence` names at a line (`LINE_IDIOM_FIXES`), or None."""
    for field, text in LINE_IDIOM_FIXES:
        at = getattr(evidence, field)
        if at is not None:
            return text.format(at=at, what=getattr(evidence, "refactorised", None))
    return None
