"""The CPU dropout with a cheap mask behaves as F.dropout: drop rate, scaling, gradient, eval mode,
reproducibility from the default generator."""

import pytest
import torch
import torch.nn.functional as F

from nmt.models.dropout import MIN_ELEMENTS, Dropout, drop_mask, dropout

BIG = (64, 4096)  # above MIN_ELEMENTS: the cheap mask is used


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_the_mask_drops_a_fraction_p(p):
    torch.manual_seed(0)
    mask = drop_mask(torch.Size((1000, 1000)), p, torch.device("cpu"))
    assert mask.shape == (1000, 1000) and mask.dtype == torch.bool
    # 1e6 draws: the standard deviation of the fraction is below 5e-4
    assert mask.float().mean().item() == pytest.approx(p, abs=2.5e-3)
    # and no position is favoured: the four 16-bit parts of a word are independent
    parts = mask.view(-1, 4).float().mean(0)
    assert torch.allclose(parts, torch.full((4,), p), atol=5e-3), parts


def test_an_odd_size_gets_a_mask_of_its_shape():
    mask = drop_mask(torch.Size((3, 5, 7)), 0.2, torch.device("cpu"))
    assert mask.shape == (3, 5, 7)


def test_kept_elements_are_scaled_and_the_gradient_follows_the_mask():
    torch.manual_seed(1)
    x = torch.randn(BIG, requires_grad=True)
    y = dropout(x, 0.25, training=True)
    kept = y != 0
    assert 0.7 < kept.float().mean().item() < 0.8
    assert torch.allclose(y[kept], x[kept] / 0.75)
    weight = torch.randn(BIG)
    (y * weight).sum().backward()
    assert torch.allclose(x.grad, torch.where(kept, weight / 0.75, 0.0))


def test_same_seed_same_mask_and_the_generator_advances():
    x = torch.ones(BIG)
    torch.manual_seed(3)
    a, b = dropout(x, 0.1, True), dropout(x, 0.1, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.1, True), a)
    assert not torch.equal(a, b)


def test_eval_mode_and_p_zero_are_the_identity():
    x = torch.randn(BIG)
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    assert dropout(x, 0.0, True) is x


def test_small_tensors_use_f_dropout():
    x = torch.randn(MIN_ELEMENTS // 2)
    torch.manual_seed(4)
    ours = dropout(x, 0.2, True)
    torch.manual_seed(4)
    assert torch.equal(ours, F.dropout(x, 0.2, True))


def test_a_probability_out_of_range_is_refused():
    with pytest.raises(ValueError, match="not in"):
        Dropout(1.0)
