"""The training loss: label-smoothed cross-entropy over the vocabulary, with its NLL, in one pass.

Shapes: N target positions (B * T flattened), V target vocabulary.

With smoothing eps, the target distribution is q = (1 - eps) * onehot(y) + eps / V (Szegedy et al.
2016, sec. 7; the form of F.cross_entropy(label_smoothing=eps)), and

    loss = -sum_v q_v log p_v = (1 - eps) * nll + eps * mean_v(-log p_v),
    d loss / d logits = softmax(logits) - q.

Autograd would run that backward as four passes over the (N, V) log-probabilities and more
temporaries (the NLL's zero-filled one-hot gradient, the broadcast of the smoothing term, their
sum, then log-softmax's backward); written out, it is an in-place exp of the saved
log-probabilities, one subtraction and one scale. The output layer's softmax is the largest
tensor of an update, so this is a measured part of training time (docs/benchmarks.md).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.data.batches import Batch
from nmt.tokenizer import PAD
from nmt.training.guided import Guide


class _SmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, smoothing: float, pad: int):
        # (N, V) in float32 at least, also when autocast gives bf16/fp16 logits
        log_probs = logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(-1)
        keep = target != pad  # (N,)
        safe = target.masked_fill(~keep, 0)  # padding rows pick any column, then count zero
        picked = log_probs.gather(1, safe.unsqueeze(1)).squeeze(1)  # (N,)
        nll = -(picked * keep).sum()
        if smoothing:
            uniform = -(log_probs.sum(-1) * keep).sum() / log_probs.size(-1)
            loss = (1 - smoothing) * nll + smoothing * uniform
        else:
            loss = nll.clone()  # a tensor of its own: the NLL output carries no gradient
        ctx.save_for_backward(log_probs, safe, keep)
        ctx.smoothing, ctx.dtype = smoothing, logits.dtype
        ctx.mark_non_differentiable(nll)  # for logs and perplexity only
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        log_probs, safe, keep = ctx.saved_tensors
        eps, vocab = ctx.smoothing, log_probs.size(-1)
        # softmax - q, written into the saved buffer: a second backward through the same graph
        # (retain_graph) would find it spent, which training never does
        grad = log_probs.exp_()
        if eps:
            grad.sub_(eps / vocab)
        grad.scatter_add_(1, safe.unsqueeze(1), grad.new_full((grad.size(0), 1), eps - 1))
        # grad_loss is a scalar: fold it into the per-row mask, one pass for both
        grad.mul_((keep.to(grad.dtype) * grad_loss).unsqueeze(1))
        return grad.to(ctx.dtype), None, None, None


def smoothed_cross_entropy(
    logits: Tensor, target: Tensor, smoothing: float, pad: int
) -> tuple[Tensor, Tensor]:
    """logits (N, V), target (N,) -> (summed label-smoothed loss, summed NLL), positions whose
    target is `pad` left out. The loss is what F.cross_entropy(logits, target,
    ignore_index=pad, label_smoothing=smoothing, reduction="sum") gives; the NLL comes from the
    same log-softmax and carries no gradient."""
    return _SmoothedCrossEntropy.apply(logits, target, smoothing, pad)


def batch_loss(
    model: torch.nn.Module, batch: Batch, smoothing: float, guide: Guide | None = None
) -> tuple[Tensor, Tensor]:
    """Summed training loss (label-smoothed) and summed NLL of one batch under teacher forcing;
    with `guide`, the loss holds its guided-alignment term too (`nmt.training.guided`). `model`
    is a Seq2Seq or its DistributedDataParallel / torch.compile wrapper."""
    layer = None if guide is None else guide.layer
    logits, attention = model(batch.src, batch.src_lens, batch.tgt_in, layer)  # (B, T, V)
    target = batch.tgt_out.reshape(-1)  # (B*T,)
    loss, nll = smoothed_cross_entropy(logits.reshape(target.size(0), -1), target, smoothing, PAD)
    if guide is not None:
        loss = loss + guide.loss(attention, batch)
    return loss, nll
