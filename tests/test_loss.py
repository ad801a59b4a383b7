"""nmt/training/loss.py: the hand-written backward equals autograd's through F.cross_entropy."""

import pytest
import torch
import torch.nn.functional as F

from nmt.training.loss import smoothed_cross_entropy

PAD = 1


def _inputs(n: int = 37, vocab: int = 53, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, vocab, generator=g, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, vocab, (n,), generator=g)
    target[::5] = PAD  # padding positions, to be left out
    return logits, target


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_loss_nll_and_gradient_equal_f_cross_entropy(smoothing):
    logits, target = _inputs()
    scale = 0.37  # the trainer divides the summed loss by the update's tokens
    loss, nll = smoothed_cross_entropy(logits, target, smoothing, PAD)
    (loss * scale).backward()
    ours = logits.grad.clone()

    logits.grad = None
    ref = F.cross_entropy(
        logits, target, ignore_index=PAD, label_smoothing=smoothing, reduction="sum"
    )
    (ref * scale).backward()
    ref_nll = F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum")

    assert loss.item() == pytest.approx(ref.item(), rel=1e-12)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-12)
    torch.testing.assert_close(ours, logits.grad, rtol=1e-10, atol=1e-12)
    assert ours[target == PAD].abs().max() == 0  # padding positions get no gradient


def test_nll_carries_no_gradient_and_loss_is_its_own_tensor_without_smoothing():
    logits, target = _inputs()
    loss, nll = smoothed_cross_entropy(logits, target, 0.0, PAD)
    assert loss.requires_grad and not nll.requires_grad
    assert loss.item() == nll.item()


def test_gradient_comes_back_in_the_logits_dtype():
    logits, target = _inputs()
    low = logits.detach().to(torch.bfloat16).requires_grad_()
    loss, _ = smoothed_cross_entropy(low, target, 0.1, PAD)
    loss.backward()
    assert low.grad.dtype == torch.bfloat16
    ref = F.cross_entropy(
        logits.float(), target, ignore_index=PAD, label_smoothing=0.1, reduction="sum"
    )
    assert loss.dtype == torch.float32  # the softmax runs in float32 whatever the logits are
    assert loss.item() == pytest.approx(ref.item(), rel=1e-2)
