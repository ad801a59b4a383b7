"""Every scorer: weights are a distribution over real source tokens; per-batch work done once."""

import pytest
import torch

from nmt.config import AttentionType
from nmt.models.attention import build_attention

SCORERS = [t for t in AttentionType if t != AttentionType.none]


@pytest.mark.parametrize("kind", SCORERS)
def test_weights_sum_to_one_and_ignore_padding(kind):
    torch.manual_seed(0)
    batch, steps, src_len, size = 3, 4, 6, 8
    attention = build_attention(kind, size, size, attention_size=5, heads=2)
    memory = torch.randn(batch, src_len, size)
    lengths = torch.tensor([6, 3, 1])
    mask = torch.arange(src_len)[None, :] < lengths[:, None]  # (B, S)
    query = torch.randn(batch, steps, size)

    context, weights = attention(query, attention.prepare(memory), mask)

    heads = 2 if kind == AttentionType.multihead else 1
    assert context.shape == (batch, steps, size)
    assert weights.shape == (batch, heads, steps, src_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(batch, heads, steps))
    assert (weights.masked_select(~mask[:, None, None, :]) == 0).all()
    # padding values cannot leak into the context: change them and nothing moves
    poisoned = memory.masked_fill(~mask[..., None], 1e4)
    context2, _ = attention(query, attention.prepare(poisoned), mask)
    torch.testing.assert_close(context, context2)


@pytest.mark.parametrize("kind", SCORERS)
def test_one_query_at_a_time_equals_all_at_once(kind):
    torch.manual_seed(1)
    attention = build_attention(kind, 8, 8, attention_size=6, heads=4)
    memory, query = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    mask = torch.ones(2, 5, dtype=torch.bool)
    prepared = attention.prepare(memory)
    together, _ = attention(query, prepared, mask)
    apart = torch.cat([attention(query[:, t : t + 1], prepared, mask)[0] for t in range(3)], 1)
    torch.testing.assert_close(together, apart)


def test_additive_and_concat_are_the_same_function_family():
    """Luong concat v^T tanh(W[q;k]) equals Bahdanau's form with W split into W_q, W_k."""
    torch.manual_seed(2)
    concat = build_attention(AttentionType.concat, 4, 6, attention_size=5, heads=1)
    additive = build_attention(AttentionType.additive, 4, 6, attention_size=5, heads=1)
    w = concat.scorer.proj.weight
    with torch.no_grad():
        additive.scorer.query_proj.weight.copy_(w[:, :4])
        additive.scorer.key_proj.weight.copy_(w[:, 4:])
        additive.scorer.key_proj.bias.copy_(concat.scorer.proj.bias)
        additive.scorer.v.weight.copy_(concat.scorer.v.weight)
    memory, query = torch.randn(2, 7, 6), torch.randn(2, 1, 4)
    mask = torch.ones(2, 7, dtype=torch.bool)
    # energies by the definition: v^T tanh(W [q; k]) for every (q, k) pair
    pairs = torch.cat([query.expand(2, 7, 4), memory], dim=-1)
    expected = concat.scorer.v(torch.tanh(concat.scorer.proj(pairs))).squeeze(-1)
    got = concat.scorer.energies(query, concat.prepare(memory).keys).squeeze(1).squeeze(1)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(
        concat(query, concat.prepare(memory), mask)[0],
        additive(query, additive.prepare(memory), mask)[0],
    )


def test_additive_key_projection_runs_once_per_batch():
    """Decoding many steps must not re-project the keys: W_k k is computed once per batch."""
    from nmt.config import RNNConfig
    from nmt.models import build_model

    calls = {"n": 0}
    model = build_model(RNNConfig(emb_size=8, hidden_size=8, attention="additive"), 20, 20).eval()
    key_proj = model.decoder.attention.scorer.key_proj
    key_proj.register_forward_hook(lambda *_: calls.update(n=calls["n"] + 1))
    src = torch.randint(4, 20, (2, 5))
    state = model.init_state(model.encode(src, torch.tensor([5, 5])))
    prev = torch.full((2,), 2)
    for _ in range(6):
        _, _, state = model.decode_step(prev, state)
    assert calls["n"] == 1
