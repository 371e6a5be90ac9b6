"""What op_hotspot (`ops.py`) reports: its evidence, the fields naming a slower way to an op's
result, and which ops move data rather than compute (kept apart so the rule's file holds its logic)."""

from __future__ import annotations

from ...model.base import Record


class OpHotspotEvidence(Record):
    self_us: float
    count: int
    mean_us: float
    share: float
    """The op's self time over the window."""
    time_lost_is: str
    avoidable: bool = False
    """Data movement or creation (copies, conversions, concatenation, fills, indexing): work a change
    of code usually removes; otherwise the model's own compute, which is context."""
    shapes: list[str | None] = []
    """Its most frequent input shapes (when recorded)."""
    densified_at: int | None = None
    """The line that made an operand of this product dense from a sparse tensor (`.to_dense()`)."""
    mostly_zero_shape: list[int] | None = None
    """A model input of this shape, multiplied by this product, is mostly zeros (seen by the capture)."""
    nonzero_share: float | None = None
    """That matrix's share of non-zeros (read from evenly spaced rows)."""
    mostly_zero_at: int | None = None
    """The line that last assigned the variable passed as that input (where it is built dense)."""
    mostly_zero_multiplied_at: int | None = None
    """For a matrix no model call took (a solver's, plain functions'): the line multiplying it."""
    backward_of: str | None = None
    """The forward op whose backward (an autograd node run by `.backward()`) holds this op's time:
    the user's lines calling that forward op are where to change it."""
    grouped_by_mask: int | None = None
    """The line building a boolean mask per group inside a loop (`mask = key == k`) that this op
    selects with: a group-by done one mask at a time."""
    outside_window: bool = False
    """A line's time in torch ops, sampled over the steady state, that the profiled window missed
    (self_us is that time; the trace cannot say which op)."""
    broadcast_at: int | None = None
    """The line that reduces a broadcast product (`(a[:, None] * b[None]).sum(-1)`): a matmul."""
    gradient_asked_at: int | None = None
    """The line asking a gradient of data the op's backward indexes (`X.requires_grad_(True)`)."""
    chain_at: int | None = None
    """A line multiplying a matrix chain left to right that ends in a vector (`X.T @ D @ v`)."""
    recomputed_at: int | None = None
    """A line in a loop computing the same value on every pass (its inputs never change there)."""
    window_restacked_at: int | None = None
    """The line stacking a window the loop keeps (appends to) whole again on every pass to reduce it."""
    dense_diagonal_at: int | None = None
    """The line building a multivariate normal from a diagonal made dense (factorised, then solved with)."""
    copied_whole_at: int | None = None
    """The line copying a whole tensor or array to keep the rows an index picks (`torch.tensor(a)[idx]`)."""
    pairwise_at: int | None = None
    """The line that squares and reduces a broadcast difference (`((a[:, None] - b[None]) ** 2).sum(-1)`):
    pairwise distances, a `torch.cdist` or one matmul."""
    inverse_at: int | None = None
    diagonal_at: int | None = None
    """A line computing a whole matrix product to keep its diagonal."""
    jacobian_diagonal_at: int | None = None
    """A line computing the whole Jacobian of a batch to keep its per-sample blocks."""
    determinant_at: int | None = None
    """A line taking the (log-)determinant of a matrix product it builds (factors' determinants add)."""
    rank_by_sort: int | None = None
    """A line sorting a whole tensor to find where given elements rank."""
    one_hot_at: int | None = None
    """A line multiplying a one-hot matrix it builds by a table: an embedding lookup done densely."""
    index_copied_at: int | None = None
    """A line copying a row index across the columns for a gather or scatter (`.repeat(1, F)`)."""
    refactorised: str | None = None
    """The matrix (as written) a line factorises again on every call though it never changes."""
    refactorised_at: int | None = None
    """The line that inverts a matrix to multiply by its inverse (`inv(A) @ b`): a solve."""
    top_k_by_sort: int | None = None
    """The line that sorts a whole tensor to keep its first elements (a top-k by a full sort)."""
    separable_at: int | None = None
    """A line convolving with an outer product of 1-D filters (a separable kernel) in 2-D."""
    strided_at: int | None = None
    """A line running the op on a view whose last dimension is not contiguous (`strided_input`)."""
    strided_input: str | None = None
    """That input's dims and strides, as the trace records them (`[20000, 384] with strides [1, 20000]`)."""
    pair_count_at: int | None = None
    """A line comparing every pair of two tensors' elements to count them (an AUC by its definition)."""
    full_factors_at: int | None = None
    """A line asking an SVD or QR for the full factors (`torch.linalg.svd(A)`) of a tall matrix."""
    dense_embedding_rows: int | None = None
    """The rows of an embedding table whose dense gradient this op fills or updates every step."""
    embedding_at: int | None = None
    """The line that makes that embedding module (where `sparse=True` goes)."""


IDIOM_FIELDS = ("densified_at", "mostly_zero_shape", "one_hot_at", "grouped_by_mask", "broadcast_at", "pairwise_at",
                "recomputed_at", "chain_at", "gradient_asked_at", "inverse_at", "diagonal_at", "jacobian_diagonal_at",
                "determinant_at", "rank_by_sort", "refactorised_at", "top_k_by_sort", "dense_embedding_rows",
                "window_restacked_at", "copied_whole_at", "dense_diagonal_at", "full_factors_at",
                "separable_at", "pair_count_at", "strided_at", "index_copied_at")
"""`OpHotspotEvidence` fields naming a slower way to the op's result than needed, read from the
source or the capture: the op is then a cause, not the model's compute."""


def is_backward_op(name: str) -> bool:
    """An op autograd runs for the backward pass (its cause is the forward op it differentiates)."""
    return name.startswith("autograd::") or "Backward" in name or name.endswith("_backward")


AVOIDABLE_OPS = frozenset({
    "aten::copy_", "aten::to", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::cat", "aten::stack",
    "aten::index", "aten::index_put_", "aten::nonzero", "aten::masked_select", "aten::zeros", "aten::ones",
    "aten::empty", "aten::full", "aten::fill_", "aten::zero_", "aten::repeat", "aten::expand_as",
    "aten::item", "aten::_local_scalar_dense", "aten::tensor", "aten::lift_fresh", "aten::from_numpy",
    "aten::numpy_T", "aten::pad", "aten::constant_pad_nd", "aten::flip", "aten::roll", "aten::sort",
    "aten::argsort", "aten::unique", "aten::_unique2",
})
"""Ops that move, convert, create or rearrange data rather than compute the model's math: when one
dominates, a change of code (creating tensors in place, preallocating instead of concatenating,
keeping one layout) usually removes it."""
