"""T5's options in training and fine-tuning: a model of configs/model/t5_small.yaml trains on the
demo corpus; its step decoding (KV cache, relative positions one query at a time) equals teacher
forcing, in fp32, under bf16 autocast, through decode.compile (no graph per position) and in int8;
and an imported MADLAD-style T5 (`conftest.madlad`) fine-tunes with LoRA and in full: the run
inherits the import's `<2xx>` codes and where they go (`CodeStyle.target_on_source`: the target
language's code spelled before each source, nothing before the target, as Hugging Face trains
"<2en> X" -> "Y"), its checkpoint translates by tgt_lang, its adapters are a small share of the
model, and the merged model (what every command reads, the export included) is the adapted one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch._dynamo.utils
from conftest import SMALL
from test_compiled import assert_same_search

from nmt.checkpoint import load_checkpoint, merged_weights
from nmt.cli import main as cli
from nmt.config import CodeStyle, DecodeConfig, LoraConfig, Precision, Strategy, TransformerConfig
from nmt.data.batches import collate
from nmt.data.languages import spelled_code
from nmt.models import build_model, restore_model
from nmt.models.int8 import Int8Linear, int8_copy
from nmt.models.lora import LoraLinear, add_adapters
from nmt.models.transformer import Gated, RelativePositions
from nmt.tokenizer import BOS, EOS
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

CPU = torch.device("cpu")
V = 29
# T5's options at a tiny size; head_size 8 is not d_model / heads (4), and the offsets of a
# 20-piece target reach past relative_max_distance (the shared last bucket)
T5 = dict(
    d_model=16, heads=4, ff_size=24, encoder_layers=2, decoder_layers=2, dropout=0.2,
    norm_type="rms", norm_eps=1e-6, positions="relative", relative_buckets=8,
    relative_max_distance=12, gated=True, activation="gelu_tanh", scale_attention=False,
    bias=False, head_size=8, scale_embeddings=False, tie_output=False,
)  # fmt: skip
VARIANTS = {
    "t5": {},
    "tied": dict(tie_output=True, scale_embeddings=True),
    "post-norm": dict(norm="post"),
    "heads-of-d": dict(head_size=None),
    "layer-norm-relu": dict(norm_type="layer", gated=False, activation="relu", bias=True),
}


def t5_model(**overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = TransformerConfig(**(T5 | overrides))
    return build_model(cfg, V, V, shared_vocab=True).eval()


def batch_of(seed: int, lengths: list[int], tgt_len: int = 20):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, V, (n - 1,), generator=g).tolist() + [EOS] for n in lengths]
    tgt = [torch.randint(4, V, (tgt_len,), generator=g).tolist() for _ in lengths]
    return collate(list(range(len(lengths))), src, tgt)


def stepped(model, batch, steps: int | None = None):
    """Logits (B, T, V) and cross-attention (B, T, L, h, S) of decoding `batch.tgt_in` one step
    at a time through the KV cache (`steps`: preallocated to that many, else grown)."""
    state = model.init_state(model.encode(batch.src, batch.src_lens), steps)
    logits, maps = [], []
    for t in range(batch.tgt_in.size(1)):
        out, w, state = model.decode_step(batch.tgt_in[:, t], state)
        logits.append(out)
        maps.append(w)
    return torch.stack(logits, 1), torch.stack(maps, 1)


@pytest.mark.parametrize("variant", VARIANTS)
def test_step_decoding_equals_teacher_forcing(variant):
    model = t5_model(**VARIANTS[variant])
    batch = batch_of(0, [7, 4, 2])
    with torch.no_grad():
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        for steps in (None, batch.tgt_in.size(1)):  # a growing cache, a preallocated one
            got, maps = stepped(model, batch, steps)
            torch.testing.assert_close(got, logits, rtol=1e-5, atol=1e-5)
        # the cross-attention of step t is teacher forcing's, for every layer
        for layer in range(2):
            _, weights = model(batch.src, batch.src_lens, batch.tgt_in, layer)
            torch.testing.assert_close(maps[:, :, layer], weights[:, :, 0], rtol=1e-5, atol=1e-5)
    assert float(maps[2, ..., 2:].abs().max()) == 0.0  # no weight on padding


def test_the_t5_options_build_what_they_name():
    model = t5_model()
    layer = model.decoder.layers[0]
    assert isinstance(layer.sub_self.norm, torch.nn.RMSNorm) and layer.sub_self.norm.eps == 1e-6
    assert isinstance(layer.feed_forward[1], Gated)
    assert layer.feed_forward[0].weight.shape == (2 * 24, 16)  # both halves in one layer
    assert layer.self_attention.q.weight.shape == (4 * 8, 16)  # heads of head_size
    assert layer.self_attention.scale == 1.0
    biased = [n for n, _ in model.named_parameters() if n.endswith(".bias")]
    assert biased == ["decoder.out.bias"]  # the output layer's alone (zero in an import)
    assert (
        isinstance(model.encoder.relative, RelativePositions)
        and model.encoder.relative.bidirectional
    )
    assert not model.decoder.relative.bidirectional
    assert model.encoder.embed.fixed.numel() == 0  # no positions added to the embeddings


def test_padding_does_not_change_a_sentence():
    """The encoder's relative biases are a float mask: a sentence padded beside a longer one
    encodes, and is scored, as alone."""
    model = t5_model()
    both = batch_of(2, [9, 3])
    alone = collate([0], [both.src[1, :3].tolist()], [both.tgt_out[1].tolist()])
    with torch.no_grad():
        logits_both, _ = model(both.src, both.src_lens, both.tgt_in)
        logits_alone, _ = model(alone.src, alone.src_lens, both.tgt_in[1:])
    torch.testing.assert_close(logits_both[1], logits_alone[0], rtol=1e-5, atol=1e-5)


def test_bf16_step_decoding_equals_bf16_teacher_forcing():
    """Under CPU bf16 autocast (train.precision / decode.precision=bf16) the relative biases
    meet bf16 energies: the steps give teacher forcing's logits to bf16 rounding, and a greedy
    search in bf16 finds what fp32 does on most sentences."""
    model = t5_model()
    batch = batch_of(1, [7, 5, 3])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
        got, _ = stepped(model, batch)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()
    torch.testing.assert_close(got.float(), logits.float(), rtol=0.05, atol=0.05)
    with torch.no_grad():
        fp32, _ = model(batch.src, batch.src_lens, batch.tgt_in)
    torch.testing.assert_close(logits.float(), fp32, rtol=0.1, atol=0.1)


def test_a_t5_model_trains_a_step_in_bf16():
    model = t5_model().train()
    batch = batch_of(4, [6, 5, 4])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = model(batch.src, batch.src_lens, batch.tgt_in)
    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch.tgt_out.flatten())
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.encoder.relative.table.weight.grad.abs().sum() > 0


def test_int8_copies_the_products_and_keeps_norms_gates_and_position_tables():
    """An int8 copy: every linear layer (the gated feed-forward's 2 f-wide one, heads of their
    own size, the untied output layer) multiplies in int8; RMSNorm, the gate and the relative
    tables stay as they are; the search's scores are the copy's own steps."""
    model = t5_model()
    copy = int8_copy(model)
    linears = [m for m in copy.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, Int8Linear) for m in linears)
    assert copy.decoder.int8 is copy.decoder.out.product  # the output layer's own product
    assert copy.encoder.relative.table.weight is model.encoder.relative.table.weight
    assert isinstance(copy.decoder.layers[0].feed_forward[1], Gated)
    sources = [batch_of(3, [6]).src[0].tolist(), batch_of(5, [4]).src[0].tolist()]
    cfg = DecodeConfig(precision=Precision.int8, max_len_a=0.0, max_len_b=15, batch_size=1)
    fp32 = decode_all(model, sources, replace(cfg, precision=Precision.fp32), CPU)
    int8 = decode_all(model, sources, cfg, CPU)
    assert [h.tokens for [h] in int8] == [h.tokens for [h] in fp32]  # rounding, not another model
    for source, [hyp] in zip(sources, int8):
        produced = hyp.tokens + [EOS] * hyp.ended
        with torch.inference_mode():
            src = torch.tensor([source])
            state = copy.init_state(copy.encode(src, torch.tensor([len(source)])))
            score = 0.0
            for prev, token in zip([BOS, *produced], produced):
                logits, _, state = copy.decode_step(torch.tensor([prev]), state)
                score += float(logits.log_softmax(-1)[0, token])
        assert hyp.score == pytest.approx(score, abs=1e-4)


def graphs() -> int:
    """Graphs torch.compile has made in this process."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_compiled_steps_equal_eager_and_do_not_compile_per_position():
    """decode.compile=true with relative positions: the step's position is an input of its
    graph (symbolic), so a search of 12 steps makes the graphs of position 0 and of every later
    position once, and a search of 30 steps after it compiles nothing."""
    model = t5_model()
    sources = [batch_of(seed, [n]).src[0].tolist() for seed, n in ((1, 7), (2, 5), (3, 9))]
    greedy = DecodeConfig(max_len_a=0.0, max_len_b=12)
    torch._dynamo.reset()
    before = graphs()
    assert_same_search(
        decode_all(model, sources, greedy, CPU),
        decode_all(model, sources, replace(greedy, compile=True), CPU),
    )
    made = graphs() - before
    assert 0 < made <= 2, made  # position 0 and the others, not one graph per step
    longer = replace(greedy, max_len_b=30)
    eager = decode_all(model, sources, longer, CPU)
    assert_same_search(eager, decode_all(model, sources, replace(longer, compile=True), CPU))
    assert max(len(h.tokens) for [h] in eager) > 12  # positions the first search never had
    assert graphs() - before == made


# ---- training a model of configs/model/t5_small.yaml --------------------------------------------

T5_SMALL = [
    "model=t5_small", "model.d_model=32", "model.ff_size=48", "model.encoder_layers=2",
    "model.decoder_layers=2",
]  # fmt: skip


def test_t5_small_composes_with_the_t5_options():
    from nmt.cli.compose import compose_config

    cfg = compose_config("train", ["model=t5_small"])
    model = cfg.model
    assert (model.norm_type.value, model.positions.value, model.activation.value) == (
        "rms", "relative", "gelu_tanh",
    )  # fmt: skip
    assert model.gated and not model.bias and not model.tie_output
    assert model.scale_attention  # nmt's initialisation and Adam want it (the config says why)
    assert (model.d_model, model.heads, model.encoder_layers) == (256, 4, 3)


def test_t5_small_trains_and_translates_on_the_demo(tmp_path, demo_dir):
    """nmt-train model=t5_small (at a test size) on the demo corpus: the training loss falls,
    the validation BLEU is above 0, and the checkpoint translates."""
    run = tmp_path / "run"
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}", *SMALL, *T5_SMALL]
    assert cli.train([*args, "train.max_steps=120", "train.valid_every=120",
                      "train.log_every=20"]) == 0  # fmt: skip
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in lines if m["split"] == "train"]
    assert losses[-1] < 0.6 * losses[0], losses
    [valid] = [m for m in lines if m["split"] == "valid"]
    assert valid["bleu"] > 0
    ckpt = load_checkpoint(run / "checkpoints" / "best")
    assert ckpt.config.model.positions.value == "relative" and ckpt.config.model.gated
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:10]
    out = Translator.from_checkpoint(ckpt.path, DecodeConfig(), "cpu").translate(texts)
    assert len(out) == 10 and all(out) and len(set(out)) > 3


# ---- fine-tuning an imported MADLAD-style T5 ---------------------------------------------------


def _fine_tune_args(ours: Path, demo_dir: Path, run: Path, *extra: str) -> list[str]:
    return [
        "--config-dir", str(ours), "model=imported", f"train.init_from={ours}", "data=demo",
        f"data.local_dir={demo_dir}", "data.src_lang=de", "data.tgt_lang=en", f"run_dir={run}",
        "train.batch_tokens=600", "train.calibrate=false", *extra,
    ]  # fmt: skip


def test_a_fine_tuning_run_reads_the_target_code_before_each_source(madlad, demo_dir, tmp_path):
    """The run inherits the import's codes and their style (data=demo says nothing of either):
    each source is "<2en> X" as the T5 tokenizer cuts it ("▁", "<2en>", pieces, </s>), each
    target "Y </s>" after the decoder start, nothing forced; so nmt's loss on a batch is
    Hugging Face's on the same pairs, and validation decodes with nothing forced."""
    from test_t5_import import hf_model, hf_tokenizer, pieces_of

    from nmt.cli.compose import compose_config
    from nmt.training.loss import batch_loss
    from nmt.training.setup import prepare_run

    hf_dir, ours = madlad
    args = _fine_tune_args(ours, demo_dir, tmp_path / "run")
    cfg = compose_config("train", args[2:], config_dir=str(ours))
    assert cfg.data.code_style == CodeStyle.source_and_target  # data=demo's own
    data, model, _ = prepare_run(cfg)
    assert cfg.data.code_style == CodeStyle.target_on_source
    assert cfg.data.language_codes["en"] == "<2en>"
    pieces = pieces_of(ours)
    vocab = data.vocabs.src
    code = spelled_code(vocab, "<2en>", vocab.piece_to_id("<2en>"))
    assert [pieces[i] for i in code] == ["▁", "<2en>"]
    with data.train:
        batch = data.train.batch(list(range(8)))
    assert batch.src[:, : len(code)].tolist() == [code] * 8
    assert (batch.tgt_in[:, 0] == BOS).all()
    assert not (batch.tgt_out == vocab.piece_to_id("<2en>")).any()
    assert data.valid.src[0][: len(code)] == code and data.valid.forced == 0
    src = (demo_dir / "valid.de").read_text("utf-8").splitlines()[:8]
    tgt = (demo_dir / "valid.en").read_text("utf-8").splitlines()[:8]
    tokenizer = hf_tokenizer(hf_dir)
    hf_batch = tokenizer([f"<2en> {s}" for s in src], text_target=tgt, padding=True,
                         return_tensors="pt")  # fmt: skip
    ours_src = [pieces[i] for i in data.valid.src[0]]
    assert ours_src == tokenizer.convert_ids_to_tokens(hf_batch["input_ids"][0][: len(ours_src)])
    valid = collate(list(range(8)), data.valid.src[:8], data.valid.tgt[:8])
    model.eval()
    with torch.no_grad():
        nll, _ = batch_loss(model, valid, 0.0)
        labels = hf_batch["labels"].masked_fill(hf_batch["labels"] == tokenizer.pad_token_id, -100)
        hf_loss = hf_model(hf_dir)(**{**hf_batch, "labels": labels}).loss
    assert (nll / valid.n_tgt_tokens).item() == pytest.approx(hf_loss.item(), abs=1e-4)
    data.train.close()


def adapter_share(cfg: TransformerConfig, vocab: int, targets: list[str], rank: int = 8):
    """(adapter parameters, the base model's) of LoRA `rank` on `targets`, counted on a model
    built on the meta device (no memory, any size)."""
    with torch.device("meta"):
        model = build_model(cfg, vocab, vocab, shared_vocab=True)
    base = sum(p.numel() for p in model.parameters())
    return add_adapters(model, LoraConfig(rank=rank, targets=targets)), base


def lora_params(cfg: TransformerConfig, targets: list[str], rank: int = 8) -> int:
    """r (in + out) per adapted layer: attention q (d, h k), kv (d, 2 h k), out (h k, d) in 2
    attentions a decoder layer and 1 an encoder layer; ff (d, 2 f gated) and (f, d)."""
    d, inner = cfg.d_model, cfg.heads * (cfg.head_size or cfg.d_model // cfg.heads)
    sizes = {"q": d + inner, "kv": d + 2 * inner, "out": inner + d,
             "ff": d + cfg.ff_size * (2 if cfg.gated else 1) + cfg.ff_size + d}  # fmt: skip
    attentions = cfg.encoder_layers + 2 * cfg.decoder_layers
    per_layer = sum(sizes[t] for t in targets if t != "ff") * attentions
    ff = sizes["ff"] * (cfg.encoder_layers + cfg.decoder_layers) if "ff" in targets else 0
    return rank * (per_layer + ff)


# MADLAD-400 3B's shape (its config.json), and the twin's
MADLAD_3B = TransformerConfig(
    d_model=1024, heads=16, head_size=128, ff_size=8192, encoder_layers=32, decoder_layers=32,
    norm_type="rms", positions="relative", gated=True, activation="gelu_tanh",
    scale_attention=False, bias=False, tie_output=False, scale_embeddings=False,
)  # fmt: skip


@pytest.mark.parametrize("targets", [["q", "kv", "out"], ["q", "kv", "out", "ff"]])
def test_adapters_are_a_small_share_of_a_t5(targets):
    """Rank 8: the adapters of MADLAD-400 3B's shape are well under 5% of its parameters (0.29%
    on attention, 0.76% with the feed-forward); the count is r (in + out) of each adapted layer,
    the gated feed-forward's first layer 2 f wide."""
    trainable, base = adapter_share(MADLAD_3B, 256_000, targets)
    assert trainable == lora_params(MADLAD_3B, targets)
    assert 2.8e9 < base < 3.1e9 and trainable / base < 0.01


def test_lora_fine_tuning_inherits_the_codes_and_translates_by_tgt_lang(
    madlad, demo_dir, tmp_path, capsys
):
    """nmt-train train.lora.rank=8 on the import: the run's checkpoint stores the codes and
    their style, holds the adapters alone (r (in + out) each: the count the run logs), lowers
    the validation loss, and translates from de by tgt_lang=en, reading "<2en>" before the
    source."""
    from nmt.translation.request import Request

    hf_dir, ours = madlad
    before = (ours / "ckpt.pt").read_bytes()
    run = tmp_path / "lora"
    args = _fine_tune_args(ours, demo_dir, run, "train.lora.rank=8", "train.lr=0.01",
                           "train.max_steps=40", "train.valid_every=20")  # fmt: skip
    assert cli.train(args) == 0
    assert (ours / "ckpt.pt").read_bytes() == before
    err = capsys.readouterr().err
    base_cfg = load_checkpoint(ours).config.model
    assert f"{lora_params(base_cfg, ['q', 'kv', 'out'])} trainable parameters" in err
    last = load_checkpoint(run / "checkpoints" / "last")
    assert last.config.data.code_style == CodeStyle.target_on_source
    assert last.config.data.language_codes["en"] == "<2en>"
    raw = torch.load(run / "checkpoints" / "last" / "ckpt.pt", weights_only=True)
    assert "model" not in raw and all(k.endswith((".lora_a", ".lora_b")) for k in raw["adapters"])
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [m["loss"] for m in metrics if m["split"] == "valid"]
    assert valid[-1] < valid[0], valid
    translator = Translator.from_checkpoint(run / "checkpoints" / "last", DecodeConfig(), "cpu")
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:10]
    [prepared] = translator.prepare(Request(texts[:1], translator.decode, tgt_lang="en")).texts
    code = spelled_code(last.vocabs.src, "<2en>", last.vocabs.src.piece_to_id("<2en>"))
    assert prepared.src[: len(code)] == code and prepared.prefix == []
    out = translator.translate(texts, tgt_lang="en")
    assert all(out) and out == translator.translate(texts)  # en: the run's target


def test_the_merged_t5_is_the_adapted_t5(madlad, demo_dir):
    """Adapters on every target (the gated feed-forward's 2 f-wide layer included), B random:
    the merged weights (what reading a LoRA checkpoint gives every command) score and search as
    the model with the adapters does."""
    _, ours = madlad
    ckpt = load_checkpoint(ours)
    model = restore_model(ckpt, CPU)
    add_adapters(model, LoraConfig(rank=8, alpha=16.0, targets=["q", "kv", "out", "ff"]))
    assert isinstance(model.encoder.layers[0].feed_forward[0], LoraLinear)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".lora_b"):
                param.normal_(0.0, 0.05)
    adapters = {k: v for k, v in model.state_dict().items() if ".lora_" in k}
    merged = restore_model(ckpt, CPU)
    merged.load_state_dict(merged_weights(ckpt.payload["model"], adapters, 8, 16.0))
    vocab = ckpt.vocabs.src
    code = spelled_code(vocab, "<2en>", vocab.piece_to_id("<2en>"))
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:12]
    sources = [code + ids + [EOS] for ids in vocab.encode(texts)]
    batch = collate(list(range(4)), sources[:4], [[5, 9, 12, 7]] * 4)
    with torch.no_grad():
        adapted_logits, _ = model.eval()(batch.src, batch.src_lens, batch.tgt_in)
        merged_logits, _ = merged(batch.src, batch.src_lens, batch.tgt_in)
        base_logits, _ = restore_model(ckpt, CPU)(batch.src, batch.src_lens, batch.tgt_in)
    torch.testing.assert_close(adapted_logits, merged_logits, rtol=1e-4, atol=1e-4)
    assert (adapted_logits - base_logits).abs().max() > 0.01  # the adapters changed the model
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=3, max_len_a=0.0, max_len_b=30)
    for cfg in (DecodeConfig(max_len_a=0.0, max_len_b=30), beam):
        adapted = decode_all(model, sources, cfg, CPU)
        found = decode_all(merged, sources, cfg, CPU)
        assert [h.tokens for [h] in adapted] == [h.tokens for [h] in found]


def test_a_lora_runs_checkpoint_exports_merged_and_translates_as_the_adapted_model(
    madlad, demo_dir, tmp_path
):
    """The checkpoint of a LoRA run (adapters on q, kv, out and ff) read by nmt-translate and
    exported by nmt-export (format=torchscript: the merged weights traced) translates as the
    adapted model itself, the adapters applied at each step."""
    from nmt.export.runtime import ExportedTranslator

    _, ours = madlad
    run = tmp_path / "lora"
    args = _fine_tune_args(ours, demo_dir, run, "train.lora.rank=8", "train.lr=0.01",
                           "train.lora.targets=[q,kv,out,ff]", "train.max_steps=20",
                           "train.valid_every=20")  # fmt: skip
    assert cli.train(args) == 0
    last = run / "checkpoints" / "last"
    raw = torch.load(last / "ckpt.pt", weights_only=True)
    adapted = restore_model(load_checkpoint(ours), CPU)
    add_adapters(adapted, LoraConfig(rank=8, targets=["q", "kv", "out", "ff"]))
    adapted.load_state_dict(raw["adapters"], strict=False)
    vocab = load_checkpoint(last).vocabs.src
    code = spelled_code(vocab, "<2en>", vocab.piece_to_id("<2en>"))
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:16]
    greedy = DecodeConfig(max_len_a=1.5, max_len_b=10)
    sources = [code + ids + [EOS] for ids in vocab.encode(texts)]
    want = vocab.decode([h.tokens for [h] in decode_all(adapted.eval(), sources, greedy, CPU)])
    translator = Translator.from_checkpoint(last, greedy, "cpu")
    assert translator.translate(texts, tgt_lang="en") == want
    out = tmp_path / "export"
    assert cli.export([f"ckpt={last}", "format=torchscript", f"out={out}"]) == 0
    exported = ExportedTranslator(out, greedy, threads=1)
    assert exported.translate(texts, tgt_lang="en") == want


def test_a_full_fine_tune_of_the_import_trains_every_weight(madlad, demo_dir, tmp_path):
    """No LoRA: every weight of the import trains (the relative tables and RMSNorm weights
    too), with the codes inherited as for LoRA, and the checkpoint holds the whole model."""
    _, ours = madlad
    run = tmp_path / "full"
    args = _fine_tune_args(ours, demo_dir, run, "train.max_steps=3", "train.valid_every=3",
                           "train.valid_bleu=false", "train.metric=loss")  # fmt: skip
    assert cli.train(args) == 0
    last = load_checkpoint(run / "checkpoints" / "last")
    assert last.config.data.code_style == CodeStyle.target_on_source
    start = load_checkpoint(ours).payload["model"]
    tuned = last.payload["model"]
    assert tuned.keys() == start.keys()
    unchanged = [k for k in start if torch.equal(start[k], tuned[k])]
    assert unchanged == [], unchanged
