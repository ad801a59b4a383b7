"""Decoder equivalences: step decoding equals teacher forcing; greedy is batch-independent."""

import pytest
import torch
from test_search import tensors_batch

from nmt.config import AttentionType, DecodeConfig, RNNConfig
from nmt.data.batches import collate
from nmt.models import build_model
from nmt.tokenizer import BOS, EOS
from nmt.translation.search import greedy

V = 23

VARIANTS = [
    dict(decoder="bahdanau", cell="gru"),
    dict(decoder="bahdanau", cell="lstm", encoder_layers=2, decoder_layers=2),
    dict(decoder="luong", cell="gru", input_feeding=False),
    dict(decoder="luong", cell="gru", input_feeding=True),
    dict(decoder="luong", cell="lstm", input_feeding=True, decoder_layers=2),
    dict(decoder="luong", cell="lstm", input_feeding=False, bidirectional=False),
    dict(decoder="bahdanau", cell="gru", bridge="zero"),
    dict(decoder="bahdanau", cell="gru", decoder_layers=2),
    dict(decoder="luong", cell="gru", tie_embeddings=True),
]


def tiny(**overrides) -> torch.nn.Module:
    cfg = RNNConfig(emb_size=12, hidden_size=12, dropout=0.2, heads=3, **overrides)
    return build_model(cfg, V, V).eval()


def batch_of(seed: int, lengths: list[int], tgt_len: int = 6):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, V, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]
    tgt = [torch.randint(4, V, (tgt_len,), generator=g).tolist() for _ in lengths]
    return collate(list(range(len(lengths))), src, tgt), src


# search steps under inference mode, where a Bahdanau decoder reads its embedding's products
# from per-piece tables (nmt/models/rnn.py, PieceTables): both ways must equal teacher forcing
MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(map(str, v.values())))
@pytest.mark.parametrize("attention", [AttentionType.additive, AttentionType.multihead])
@pytest.mark.parametrize("mode", MODES)
def test_step_decoding_equals_teacher_forcing(variant, attention, mode):
    torch.manual_seed(0)
    model = tiny(attention=attention, **variant)
    batch, _ = batch_of(0, [7, 4, 2])
    with MODES[mode]():
        logits, weights = model(batch.src, batch.src_lens, batch.tgt_in)
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        steps, step_weights = [], []
        for t in range(batch.tgt_in.size(1)):
            out, w, state = model.decode_step(batch.tgt_in[:, t], state)
            steps.append(out)
            step_weights.append(w)
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(torch.stack(step_weights, 1), weights, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attention", list(AttentionType))
@pytest.mark.parametrize("decoder", ["bahdanau", "luong"])
def test_every_scorer_in_every_decoder_trains_a_step(attention, decoder):
    torch.manual_seed(0)
    model = tiny(attention=attention, decoder=decoder).train()
    batch, _ = batch_of(1, [5, 3])
    logits, weights = model(batch.src, batch.src_lens, batch.tgt_in)
    assert logits.shape == (2, batch.tgt_in.size(1), V)
    assert (weights is None) == (attention == AttentionType.none)
    logits.logsumexp(-1).mean().backward()
    grads = [p.grad for p in model.encoder.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_tied_embeddings_share_one_tensor():
    model = tiny(decoder="luong", tie_embeddings=True)
    assert model.decoder.out.weight is model.decoder.embed.weight


def test_padding_does_not_change_a_sentence_encoding():
    """Packed sequences: a sentence padded next to a longer one encodes exactly as alone."""
    torch.manual_seed(0)
    model = tiny(cell="lstm", encoder_layers=2)
    batch, src = batch_of(3, [9, 4])
    alone = collate([1], src, None)
    with torch.no_grad():
        both = model.encode(batch.src, batch.src_lens)
        one = model.encode(alone.src, alone.src_lens)
    torch.testing.assert_close(both.memory[1, :4], one.memory[0])
    torch.testing.assert_close(both.final[1], one.final[0])


def test_greedy_picks_the_argmax_of_teacher_forcing_on_its_own_output():
    """Re-scoring the greedy output with teacher forcing gives back the same tokens and score."""
    torch.manual_seed(0)
    model = tiny()
    batch, _ = batch_of(7, [6])
    cfg = DecodeConfig(max_len_a=0.0, max_len_b=8)
    hyp = greedy(model, tensors_batch(model, batch.src, batch.src_lens, cfg, attention=True))[0]
    produced = hyp.tokens + ([EOS] if hyp.ended else [])
    tgt_in = torch.tensor([[BOS] + produced[:-1]])
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lens, tgt_in)
    log_probs = logits.log_softmax(-1)[0]
    assert log_probs.argmax(-1).tolist() == produced
    assert hyp.score == pytest.approx(float(log_probs.max(-1).values.sum()), abs=1e-4)
    assert hyp.attention.shape == (len(produced), 1, 1, 6)  # (T, layers, heads, S)
    assert len(produced) <= 8


def test_piece_tables_follow_the_weights():
    """The tables are rebuilt when an optimizer step or a load writes the weights, so a search
    after training (validation) never reads stale products."""
    torch.manual_seed(0)
    model = tiny(attention=AttentionType.additive)
    batch, _ = batch_of(1, [5, 3])
    # the trainer's optimizer: fused Adam writes the weights without bumping their versions
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, fused=True)

    def first_step() -> torch.Tensor:
        with torch.inference_mode():
            state = model.init_state(model.encode(batch.src, batch.src_lens))
            return model.decode_step(batch.tgt_in[:, 0], state)[0].clone()

    def teacher_forced() -> torch.Tensor:
        with torch.no_grad():
            return model(batch.src, batch.src_lens, batch.tgt_in)[0][:, 0]

    before = first_step()
    tables = model.decoder.piece_tables()
    assert first_step().equal(before) and model.decoder.piece_tables() is tables  # reused
    model.train()
    logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
    logits.logsumexp(-1).sum().backward()
    optimizer.step()
    model.eval()
    after = first_step()
    assert not after.allclose(before)
    torch.testing.assert_close(after, teacher_forced(), rtol=1e-5, atol=1e-5)
    other = tiny(attention=AttentionType.additive)
    model.load_state_dict(other.state_dict())
    torch.testing.assert_close(first_step(), teacher_forced(), rtol=1e-5, atol=1e-5)
    # tables first built under autocast (decode.precision=bf16) keep the weights' dtype for later
    # searches in float32
    model.load_state_dict(tiny(attention=AttentionType.additive).state_dict())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        first_step()
    assert model.decoder.piece_tables().emb.dtype == torch.float32
    torch.testing.assert_close(first_step(), teacher_forced(), rtol=1e-5, atol=1e-5)


def dropped_share(model: torch.nn.Module, batch) -> dict[str, float]:
    """Share of zeros, over one training-mode forward, in the embeddings each recurrent cell reads
    (the first part of its input) and in the encoder's states. Nothing in an untrained model is
    exactly zero unless dropout made it so."""
    counts: dict[str, list[float]] = {}

    def count(name, x):
        x = x.data if hasattr(x, "batch_sizes") else x  # a packed sequence's elements
        zeros, total = counts.setdefault(name, [0.0, 0.0])
        counts[name] = [zeros + (x == 0).sum().item(), total + x.numel()]

    E = model.decoder.embed.embedding_dim
    model.encoder.rnn.register_forward_pre_hook(lambda m, args: count("encoder input", args[0]))
    model.encoder.register_forward_hook(
        lambda m, args, out: count("encoder states", out.memory[out.src_mask])  # not padding
    )
    # a decoder with input feeding calls its cell once per step: the hook adds them up
    model.decoder.rnn.register_forward_pre_hook(
        lambda m, args: count("decoder input", args[0][..., :E])
    )
    model.train()(batch.src, batch.src_lens, batch.tgt_in)
    return {name: zeros / total for name, (zeros, total) in counts.items()}


@pytest.mark.parametrize(
    "places, expect",
    [
        (dict(dropout=0.5), dict(embeddings=True, states=True)),  # unset: dropout everywhere
        (dict(dropout=0.5, embedding_dropout=0.0), dict(embeddings=False, states=True)),
        (dict(dropout=0.0, embedding_dropout=0.5), dict(embeddings=True, states=False)),
    ],
)
@pytest.mark.parametrize("decoder", ["bahdanau", "luong"])
def test_embedding_dropout_drops_the_embeddings_only(places, expect, decoder):
    torch.manual_seed(0)
    model = build_model(RNNConfig(emb_size=32, hidden_size=32, decoder=decoder, **places), V, V)
    batch, _ = batch_of(0, [9, 8, 8, 7, 6, 9, 9, 8], tgt_len=8)
    seen = dropped_share(model, batch)
    for name in ("encoder input", "decoder input"):
        assert (0.35 < seen[name] < 0.65) if expect["embeddings"] else seen[name] == 0.0, seen
    states = seen["encoder states"]
    assert (0.35 < states < 0.65) if expect["states"] else states == 0.0, seen


def test_embedding_dropout_outside_zero_to_one_is_refused():
    with pytest.raises(Exception, match=r"model.embedding_dropout=1.0 must be in \[0, 1\)"):
        RNNConfig(embedding_dropout=1.0)


@pytest.mark.parametrize(
    "variant",
    [
        dict(decoder="luong", cell="lstm", input_feeding=True, decoder_layers=2),
        dict(decoder="bahdanau", cell="lstm", encoder_layers=2),
    ],
)
def test_an_lstm_under_cpu_bf16_autocast_runs_its_cells_in_fp32_on_any_cpu(variant):
    """oneDNN's bf16 LSTM kernel exists only on AVX-512 CPUs (an AVX2-only CPU fails to create its
    primitive), so under a CPU autocast the fused LSTM runs in fp32 on every CPU: training and
    search work, and the cells' outputs are the fp32 model's wherever their inputs are. .ci/run
    runs this file's bf16 tests with torch limited to AVX2 as well."""
    torch.manual_seed(0)
    model = tiny(**variant)
    batch, _ = batch_of(3, [7, 5, 2])
    seen = []
    for rnn in (model.encoder.rnn, model.decoder.rnn):
        rnn.register_forward_hook(lambda m, args, out: seen.append(out[0]))
    reference = model.encoder(batch.src, batch.src_lens).memory  # fp32 throughout
    seen.clear()
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
    assert logits.dtype == torch.bfloat16  # the output layer ran in bf16
    assert all((x.data if hasattr(x, "batch_sizes") else x).dtype == torch.float32 for x in seen)
    logits.float().logsumexp(-1).sum().backward()  # and so does the backward pass
    assert all(
        p.grad is not None and bool(p.grad.isfinite().all()) for p in model.encoder.rnn.parameters()
    )
    model.eval()
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        memory = model.encoder(batch.src, batch.src_lens).memory
        found = greedy(model, tensors_batch(model, batch.src, batch.src_lens, DecodeConfig()))
    # the encoder is the LSTM alone (its embeddings are a lookup): exactly the fp32 states
    torch.testing.assert_close(memory, reference, rtol=0, atol=0)
    assert len(found) == 3
