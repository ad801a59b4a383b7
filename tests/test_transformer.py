"""The Transformer: KV-cache decoding equals the full forward pass, masking, positions, sharing,
and an end-to-end run on the demo corpus through the same train/evaluate/translate paths."""

import json

import pytest
import torch

from nmt.cli import main as cli
from nmt.config import TransformerConfig
from nmt.data.batches import collate
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.models.transformer import MultiHeadAttention, sinusoids
from nmt.tokenizer import EOS

V = 29


def tiny(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    options = dict(d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=2)
    return build_model(TransformerConfig(**(options | overrides)), V, V, shared_vocab=True).eval()


def batch_of(seed: int, lengths: list[int], tgt_len: int = 9):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, V, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]
    tgt = [torch.randint(4, V, (tgt_len,), generator=g).tolist() for _ in lengths]
    return collate(list(range(len(lengths))), src, tgt)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "relative"])
def test_kv_cache_decoding_equals_the_full_forward_pass(norm, positions):
    model = tiny(norm=norm, positions=positions, activation="gelu")
    batch = batch_of(0, [7, 4, 2])
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        steps = []
        for t in range(batch.tgt_in.size(1)):
            out, maps, state = model.decode_step(batch.tgt_in[:, t], state)
            steps.append(out)
            assert state.position == t + 1  # one position a step, written into a preallocated
            assert state.self_keys[0].size(2) >= t + 1  # cache that doubles when full
    torch.testing.assert_close(torch.stack(steps, 1), logits, rtol=1e-5, atol=1e-5)
    assert maps.shape == (3, 2, 4, 7)  # (B, layers, heads, S)
    torch.testing.assert_close(maps.sum(-1), torch.ones(3, 2, 4))
    assert float(maps[2, :, :, 2:].abs().max()) == 0.0  # no weight on padding


def test_cross_attention_keys_are_projected_once_per_sentence(monkeypatch):
    model = tiny()
    batch = batch_of(1, [5, 3])
    calls = []
    original = MultiHeadAttention.project_kv

    def counting(self, x):
        calls.append(self)
        return original(self, x)

    monkeypatch.setattr(MultiHeadAttention, "project_kv", counting)
    with torch.no_grad():
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        before = len(calls)
        for t in range(4):
            _, _, state = model.decode_step(batch.tgt_in[:, t], state)
    cross = {id(layer.cross_attention) for layer in model.decoder.layers}
    assert sum(id(m) in cross for m in calls[before:]) == 0  # steps reuse the cached memory
    assert sum(id(m) in cross for m in calls[:before]) == 2  # init_state: once per layer


def test_beam_steps_reorder_rows_but_not_the_sentences_keys():
    """A beam step moves hypotheses within their sentences: the per-sentence cross-attention keys
    are kept as they are (no copy); only when sentences leave are they selected."""
    model = tiny()
    batch = batch_of(3, [5, 3, 4])
    with torch.no_grad():
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        state = state.reorder(torch.arange(3).repeat_interleave(2))  # beam 2: rows 0,0,1,1,2,2
        _, _, state = model.decode_step(torch.full((6,), 4), state)
        moved = state.reorder(torch.tensor([1, 1, 2, 3, 5, 4]))
        assert moved.cross_keys[0] is state.cross_keys[0] and moved.src_mask is state.src_mask
        filled = moved.position  # the positions decoded so far; the rest of the cache is free
        assert torch.equal(moved.self_keys[0][0, :, :filled], state.self_keys[0][1, :, :filled])
        left = state.reorder(torch.tensor([0, 1, 4, 5]), sentences=torch.tensor([0, 2]))
        assert torch.equal(left.cross_keys[0], state.cross_keys[0][[0, 2]])
        assert left.src_mask.shape == (2, batch.src.size(1))


def test_padding_does_not_change_a_sentence():
    model = tiny()
    both = batch_of(2, [8, 3])
    alone = collate([0], [both.src[1, :3].tolist()], [both.tgt_out[1].tolist()])
    with torch.no_grad():
        logits_both, _ = model(both.src, both.src_lens, both.tgt_in)
        logits_alone, _ = model(alone.src, alone.src_lens, both.tgt_in[1:])
    torch.testing.assert_close(logits_both[1], logits_alone[0], rtol=1e-5, atol=1e-5)


def test_fused_and_explicit_attention_agree():
    torch.manual_seed(0)
    attention = MultiHeadAttention(TransformerConfig(d_model=16, heads=4), dropout=0.0).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[1, ..., 4:] = False
    keys, values = attention.project_kv(memory)
    fused, none = attention(x, keys, values, mask)
    explicit, weights = attention(x, keys, values, mask, need_weights=True)
    assert none is None and weights.shape == (2, 4, 5, 7)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    # causal self-attention: the explicit path masks the future as SDPA's is_causal does
    self_kv = attention.project_kv(x)
    fused, _ = attention(x, *self_kv, causal=True)
    explicit, weights = attention(x, *self_kv, causal=True, need_weights=True)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    assert float(weights.detach().triu(1).abs().max()) == 0.0


def test_positions_work_past_every_table():
    d = 8
    direct = sinusoids(40, d)
    torch.testing.assert_close(sinusoids(10, d, offset=30), direct[30:])
    for positions in ("sinusoidal", "learned"):
        model = tiny(positions=positions, max_positions=6)
        batch = batch_of(3, [12])  # longer than the tables
        with torch.no_grad():
            logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        assert torch.isfinite(logits).all()


def test_shared_embeddings_and_tied_output():
    model = tiny()
    assert model.encoder.embed.table is model.decoder.embed.table
    assert "decoder.out.weight" not in model.state_dict()  # the tied weight is the table
    separate = build_model(TransformerConfig(d_model=16, heads=4, share_embeddings=False), V, 31)
    assert separate.encoder.embed.table.weight.shape == (V, 16)
    assert separate.decoder.embed.table.weight.shape == (31, 16)
    untied = TransformerConfig(d_model=16, heads=4, share_embeddings=False, tie_output=False)
    assert build_model(untied, V, 31).decoder.out.weight.shape == (31, 16)
    with pytest.raises(NMTError, match="joint vocabulary"):
        build_model(TransformerConfig(d_model=16, heads=4), V, V, shared_vocab=False)


def test_bad_shapes_are_config_errors():
    with pytest.raises(NMTError, match="divisible"):
        TransformerConfig(d_model=10, heads=4)


def test_a_few_updates_fit_one_batch():
    model = tiny(dropout=0.0, attention_dropout=0.0).train()
    batch = batch_of(4, [6, 5, 4])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(60):
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        first = first or float(loss.detach())
    assert float(loss.detach()) < 0.1 * first


TRANSFORMER = [
    "model=transformer_small",
    "model.d_model=64",
    "model.heads=4",
    "model.ff_size=256",
    "model.encoder_layers=2",
    "model.decoder_layers=2",
    "data.tokenizer.vocab_size=400",
    "train.batch_tokens=600",
    "train.lr=0.002",
    "train.scheduler=noam",
    "train.warmup_steps=100",
]


def test_transformer_trains_evaluates_and_translates_on_the_demo(tmp_path, demo_dir, capsys):
    run = tmp_path / "run"
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}", *TRANSFORMER]
    assert cli.train([*args, "train.max_steps=400", "train.valid_every=200"]) == 0
    ckpt = run / "checkpoints" / "best"
    evaluate = [f"ckpt={ckpt}", "heatmaps=1", "heatmap_grid=true", "attention_layer=0"]
    assert cli.evaluate(evaluate) == 0
    assert "BLEU = " in capsys.readouterr().out
    scores = json.loads((run / "eval" / "test.scores.json").read_text())
    assert scores["bleu"] > 40, scores
    assert (run / "eval" / "test.heads.0.png").stat().st_size > 1000
    assert cli.evaluate([f"ckpt={ckpt}", "heatmaps=1", "attention_layer=5"]) == cli.EXIT_USAGE
    assert "out of range" in capsys.readouterr().err

    from nmt.translation.translator import Translator

    translator = Translator.from_checkpoint(ckpt, device="cpu")
    lines = ["Ich sehe einundzwanzig rote Äpfel.", "", "Er zählt zwölf Katzen."]
    out = translator.translate(lines)
    assert len(out) == 3 and out[1] == "" and out[0] and out[2]


def test_a_shared_table_longer_than_the_target_scores_only_its_first_rows():
    """Shared embeddings over a source vocabulary whose first 17 ids are the target's: the
    output layer scores those 17, with the table's rows as its weight, and learns through them."""
    model = build_model(TransformerConfig(d_model=16, heads=4), V, 17, shared_vocab=True)
    table = model.decoder.embed.table.weight
    assert table.shape == (V, 16) and model.encoder.embed.table.weight is table
    batch = batch_of(2, [6, 5, 4])
    tgt_in = batch.tgt_in.clamp(max=16)
    logits, _ = model(batch.src, batch.src_lens, tgt_in)
    assert logits.shape[-1] == 17
    x = torch.randn(3, 16)
    expected = x @ table[:17].T + model.decoder.out.bias
    torch.testing.assert_close(model.decoder.project(x), expected)
    logits.sum().backward()
    assert table.grad[:17].abs().sum() > 0


def test_a_checkpoint_that_stored_the_tied_weight_twice_still_loads():
    """Before TiedProjection, the tied output weight was saved as decoder.out.weight too."""
    model = tiny()
    state = model.state_dict()
    state["decoder.out.weight"] = state["decoder.embed.table.weight"].clone()
    fresh = tiny()
    fresh.load_state_dict(state)  # strict: an unexpected key would raise
    torch.testing.assert_close(fresh.decoder.embed.table.weight, model.decoder.embed.table.weight)
