"""nmt/models/rnn.py StepCells: the decoders' step loop computes what nn.GRU / nn.LSTM compute."""

import pytest
import torch
from torch import nn

from nmt.models.rnn import StepCells, _restack, _unstack

E, EXTRA, H, B, T = 6, 5, 7, 3, 4


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_step_cells_equal_the_module_over_a_sequence(cls, layers):
    torch.manual_seed(0)
    dropout = 0.3 if layers > 1 else 0.0
    rnn = cls(E + EXTRA, H, num_layers=layers, batch_first=True, dropout=dropout).double().eval()
    x = torch.randn(B, T, E + EXTRA, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(layers, B, H, dtype=torch.float64)
    hidden = (h0, torch.randn_like(h0)) if cls is nn.LSTM else h0

    expected, expected_last = rnn(x, hidden)
    (expected.sum() + _restack(_unstack(expected_last))[0].sum()).backward()
    expected_grads = [x.grad.clone()] + [p.grad.clone() for p in rnn.parameters()]
    x.grad = None
    rnn.zero_grad()

    cells = StepCells(rnn, E)
    state = _unstack(hidden)
    outputs = []
    for t, emb_proj in enumerate(cells.project_embeddings(x[:, :, :E])):
        state = cells.step(emb_proj, x[:, t, E:], state)
        top = state[-1]
        outputs.append(top[0] if isinstance(top, tuple) else top)
    got, got_last = torch.stack(outputs, dim=1), _restack(state)
    (got.sum() + _restack(_unstack(got_last))[0].sum()).backward()
    grads = [x.grad] + [p.grad for p in rnn.parameters()]

    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    if cls is nn.LSTM:
        torch.testing.assert_close(got_last[0], expected_last[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_last[1], expected_last[1], rtol=1e-12, atol=1e-12)
    else:
        torch.testing.assert_close(got_last, expected_last, rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)


def test_dropout_between_layers_applies_in_training_only():
    torch.manual_seed(0)
    rnn = nn.GRU(E + EXTRA, H, num_layers=2, batch_first=True, dropout=0.5)
    cells = StepCells(rnn, E)
    x = torch.randn(B, 1, E + EXTRA)
    state = _unstack(torch.zeros(2, B, H))
    (proj,) = cells.project_embeddings(x[:, :, :E])
    runs = [cells.step(proj, x[:, 0, E:], state)[-1] for _ in range(2)]
    assert not torch.equal(*runs)  # different dropout masks
    rnn.eval()
    runs = [cells.step(proj, x[:, 0, E:], state)[-1] for _ in range(2)]
    assert torch.equal(*runs)
