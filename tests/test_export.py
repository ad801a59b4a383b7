"""nmt-export: the exported encoder / decoder-step graphs decode as the model does (ONNX and
TorchScript, both model families), the CTranslate2 model gives our greedy and beam output, and
what cannot be converted is refused with the setting named.

Exporting ONNX is slow (torch.export traces each graph twice: ~10 s a graph on 2 busy cores), so
the default run exports ONNX for the trained GRU + Bahdanau and pre-norm Transformer and checks
the LSTM + Luong and post-norm models through TorchScript (the same graphs); `-m slow` exports
those two to ONNX as well.
"""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import load_checkpoint, save_checkpoint
from nmt.cli import main as cli
from nmt.config import (
    DecodeConfig,
    LengthPenalty,
    Precision,
    RNNConfig,
    Strategy,
    TransformerConfig,
)
from nmt.data.batches import collate
from nmt.data.splits import read_lines
from nmt.errors import NMTError
from nmt.export.exporter import export_checkpoint
from nmt.export.graphs import export_graphs
from nmt.export.runtime import ExportedTranslator, greedy, read_manifest
from nmt.models import build_model, restore_model
from nmt.run_config import ExportFormat
from nmt.tokenizer import BOS, EOS
from nmt.translation.inputs import source_ids
from nmt.translation.search import decode_all
from nmt.translation.translator import Translator

CPU = torch.device("cpu")
POST = ("model.norm=post", "model.positions=learned", "model.activation=gelu")
LSTM_LUONG = RNNConfig(
    cell="lstm", decoder="luong", attention="general", input_feeding=True, emb_size=32,
    hidden_size=32, encoder_layers=2, decoder_layers=2, dropout=0.0,
)  # fmt: skip


# ---- the graphs themselves, every decoder variant (no export: milliseconds) ---------------------

V = 23
RNN = dict(emb_size=12, hidden_size=12, heads=3)
TRANSFORMER = dict(d_model=16, heads=4, ff_size=32, encoder_layers=2, decoder_layers=2)
VARIANTS = {
    "gru-bahdanau-additive": RNNConfig(**RNN),
    "gru-bahdanau-concat-unidirectional-2-layers": RNNConfig(
        **RNN, attention="concat", bidirectional=False, encoder_layers=2
    ),
    "gru-luong-dot-no-feeding-zero-bridge": RNNConfig(
        **RNN, decoder="luong", attention="dot", input_feeding=False, bridge="zero"
    ),
    "lstm-luong-multihead-2-layers": RNNConfig(
        **RNN, cell="lstm", decoder="luong", attention="multihead", encoder_layers=2,
        decoder_layers=2,
    ),
    "lstm-bahdanau-scaled-dot-tied": RNNConfig(
        **RNN, cell="lstm", attention="scaled_dot", tie_embeddings=True
    ),
    "lstm-no-attention": RNNConfig(**RNN, cell="lstm", attention="none"),
    "transformer-pre-sinusoidal": TransformerConfig(**TRANSFORMER),
    "transformer-post-learned-past-the-table-gelu": TransformerConfig(
        **TRANSFORMER, norm="post", positions="learned", max_positions=6, activation="gelu"
    ),
    "transformer-unscaled-untied": TransformerConfig(
        **TRANSFORMER, scale_embeddings=False, share_embeddings=False, tie_output=False
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_the_graphs_decode_as_the_model(name):
    """Greedy decoding through the two graphs (`nmt.export.runtime.greedy` over `Graphs.run`) gives
    the tokens and scores of `nmt.translation.search.greedy`, for a padded batch of 9 random
    sources."""
    torch.manual_seed(0)
    model = build_model(VARIANTS[name], V, V, shared_vocab=True).eval()
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(1, 12, (9,), generator=g).tolist()
    src_ids = [torch.randint(4, V, (n,), generator=g).tolist() + [EOS] for n in lengths]
    decode = DecodeConfig(max_len_b=12, min_len_b=2)
    expected = decode_all(model, src_ids, decode, CPU)
    graphs = export_graphs(model)
    got = greedy(graphs, graphs.spec.to_json(), src_ids, replace(decode, batch_size=4))
    assert [g.tokens for g in got] == [h[0].tokens for h in expected]
    assert [g.ended for g in got] == [h[0].ended for h in expected]
    torch.testing.assert_close(
        torch.tensor([g.score for g in got]), torch.tensor([h[0].score for h in expected])
    )


# ---- exported files -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sources(demo_dir) -> list[str]:
    return read_lines(demo_dir / "test.de")[:40]


@pytest.fixture(scope="module")
def checkpoints(train_small, tmp_path_factory) -> dict[str, Path]:
    """The trained demo-style models, and an untrained LSTM + Luong (general scorer, input
    feeding, 2 layers) saved with the GRU run's config and tokenizer."""
    gru = train_small("gru")
    base = load_checkpoint(gru)
    torch.manual_seed(0)
    lstm = build_model(LSTM_LUONG, len(base.vocabs.src), len(base.vocabs.tgt))
    lstm_ckpt = save_checkpoint(
        tmp_path_factory.mktemp("lstm"), 0, {"model": lstm.state_dict()},
        replace(base.config, model=LSTM_LUONG), base.vocabs,
    )  # fmt: skip
    return {
        "gru-bahdanau": gru,
        "lstm-luong-general": lstm_ckpt,
        "transformer-pre": train_small("transformer"),
        "transformer-post-learned-gelu": train_small("transformer", *POST),
    }


SLOW = pytest.mark.slow
EXPORTS = [
    pytest.param("gru-bahdanau", "onnx"),
    pytest.param("transformer-pre", "onnx"),
    pytest.param("lstm-luong-general", "torchscript"),
    pytest.param("transformer-post-learned-gelu", "torchscript"),
    pytest.param("gru-bahdanau", "torchscript"),
    pytest.param("lstm-luong-general", "onnx", marks=SLOW),
    pytest.param("transformer-post-learned-gelu", "onnx", marks=SLOW),
    pytest.param("transformer-pre", "torchscript", marks=SLOW),
]


@pytest.mark.parametrize(("case", "fmt"), EXPORTS)
def test_exported_graphs_decode_greedily_as_the_model(checkpoints, sources, case, fmt, tmp_path):
    pytest.importorskip("onnxruntime" if fmt == "onnx" else "torch")
    ckpt = load_checkpoint(checkpoints[case])
    out = export_checkpoint(ckpt, ExportFormat(fmt), tmp_path / "export")
    suffix = ".onnx" if fmt == "onnx" else ".pt"
    names = {p.name for p in out.iterdir()}
    assert {f"encoder{suffix}", f"decoder_step{suffix}", "manifest.json", "README.md"} <= names
    assert {p.name for p in ckpt.vocabs.files()} <= names

    model = restore_model(ckpt, CPU)
    src_ids, _ = source_ids(ckpt.vocabs.src, sources, 0)
    expected = [h[0] for h in decode_all(model, src_ids, DecodeConfig(), CPU)]
    translator = ExportedTranslator(out, DecodeConfig(), threads=1)
    got = translator.greedy(src_ids)
    assert [g.tokens for g in got] == [h.tokens for h in expected]
    assert [g.ended for g in got] == [h.ended for h in expected]
    torch.testing.assert_close(
        torch.tensor([g.score for g in got]), torch.tensor([h.score for h in expected]),
        atol=1e-4, rtol=1e-5,
    )  # fmt: skip
    _assert_step_log_probs_close(model, translator, src_ids[:8])
    # text in, text out, blank lines kept in place
    texts = translator.translate([sources[0], "", sources[1]])
    assert texts[1] == "" and texts[0] == ckpt.vocabs.tgt.decode([expected[0].tokens])[0]


def _assert_step_log_probs_close(model, translator: ExportedTranslator, src_ids) -> None:
    """The first 4 steps' log-probabilities over the whole vocabulary (atol 1e-4), following
    the greedy path, through the graphs' inputs and outputs as the manifest connects them."""
    manifest, session = translator.manifest, translator.session
    batch = collate(list(range(len(src_ids))), src_ids, None)
    encoded = session.run("encoder", {"src": batch.src.numpy(), "src_lens": batch.src_lens.numpy()})
    values = {name: encoded[name] for name in [*manifest["memory"], *manifest["state"].values()]}
    with torch.no_grad():
        state = model.init_state(model.encode(batch.src, batch.src_lens))
        prev = torch.full((len(src_ids),), BOS)
        for _ in range(4):
            logits, _, state = model.decode_step(prev, state)
            out = session.run("decoder_step", {"prev": prev.numpy(), **values})
            expected = torch.log_softmax(logits, dim=-1)
            torch.testing.assert_close(
                torch.from_numpy(out["log_probs"]), expected, atol=1e-4, rtol=0
            )
            values.update({old: out[new] for new, old in manifest["state"].items()})
            prev = expected.argmax(-1)


def test_the_manifest_describes_the_graphs(checkpoints, tmp_path):
    """TorchScript (fast to write) through the command line; ONNX writes the same manifest."""
    out = tmp_path / "ts"
    ckpt = checkpoints["transformer-pre"]
    assert cli.export([f"ckpt={ckpt}", "format=torchscript", f"out={out}"]) == 0
    manifest = read_manifest(out)
    assert manifest["family"] == "transformer" and manifest["format"] == "torchscript"
    assert manifest["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert manifest["special_pieces"]["eos"] == "</s>"
    step = manifest["decoder_step"]
    assert [t["name"] for t in step["inputs"]][0] == "prev"
    assert manifest["state"] == {"new_self_keys": "self_keys", "new_self_values": "self_values"}
    cache = next(t for t in step["inputs"] if t["name"] == "self_keys")
    assert cache["shape"] == [2, "batch", 4, "steps", 8] and cache["batch_axis"] == 1
    assert "ExportedTranslator" in (out / "README.md").read_text()
    # an existing directory is kept unless overwrite=true, and never replaced if not an export
    assert cli.export([f"ckpt={ckpt}", "format=torchscript", f"out={out}"]) != 0
    with pytest.raises(NMTError, match="not an nmt export"):
        export_checkpoint(load_checkpoint(ckpt), ExportFormat.torchscript, ckpt, overwrite=True)
    assert (Path(ckpt) / "ckpt.pt").is_file()


# ---- CTranslate2 --------------------------------------------------------------------------------

GREEDY = DecodeConfig()
BEAM = DecodeConfig(strategy=Strategy.beam, beam_size=5)
BEAM_AVERAGE = replace(BEAM, length_penalty=LengthPenalty.average, n_best=3)
BEAM_POWER = replace(BEAM, length_penalty=LengthPenalty.power, alpha=0.6, n_best=3)


@pytest.mark.parametrize("case", ["transformer-pre", "transformer-post-learned-gelu"])
def test_ctranslate2_gives_our_greedy_and_beam_output(checkpoints, sources, case, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import translate_pieces

    ckpt = load_checkpoint(checkpoints[case])
    out = export_checkpoint(ckpt, ExportFormat.ctranslate2, tmp_path / "ct2")
    assert {"model.bin", "config.json", "manifest.json", "README.md", "spm.model"} <= {
        p.name for p in out.iterdir()
    }
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    model = restore_model(ckpt, CPU)
    vocab = ckpt.vocabs.tgt
    src_ids, _ = source_ids(ckpt.vocabs.src, sources, 0)
    pieces = [ckpt.vocabs.src.id_to_piece(ids[:-1]) for ids in src_ids]  # CT2 appends EOS
    eos = vocab.id_to_piece([EOS])[0]
    ended = 0
    # our limits grow with the source length (decode.max_len_a = 1.5): translate_pieces calls
    # CTranslate2 once per run of sentences with the same limits
    for cfg in (GREEDY, BEAM, BEAM_AVERAGE, BEAM_POWER):
        expected = decode_all(model, src_ids, cfg, CPU)
        got = translate_pieces(translator, pieces, cfg, eos, ckpt.config.model)
        ours = [[vocab.id_to_piece(h.tokens) for h in hyps] for hyps in expected]
        theirs = [[p for p, _ in hyps] for hyps in got]
        assert [h[0] for h in theirs] == [h[0] for h in ours]  # the translations
        torch.testing.assert_close(
            torch.tensor([hyps[0][1] for hyps in got]),
            torch.tensor([hyps[0].normalized for hyps in expected]),
            atol=1e-4, rtol=1e-5,
        )  # fmt: skip
        # the rest of an n-best list: a near-tie at the K-th place of some step can go either
        # way under float differences of 1e-6 (our own batched and single-sentence decoding
        # differ there too), so a few lists may differ in their lower ranks
        same = sum(a == b for a, b in zip(ours, theirs))
        assert same >= 0.9 * len(sources), f"{same} of {len(sources)} n-best lists agree"
        ended += sum(h.ended for hyps in expected for h in hyps)
    assert ended > len(sources)  # the trained model ends most sentences: a real test of EOS

    # one call per batch takes the batch's largest limit: only sentences that reach their own
    # limit may decode differently
    expected = decode_all(model, src_ids, GREEDY, CPU)
    got = translate_pieces(translator, pieces, GREEDY, eos, exact_limits=False)
    for ids, hyps, ct2 in zip(src_ids, expected, got):
        if hyps[0].ended and len(ct2[0][0]) < GREEDY.max_len(len(ids)):
            assert ct2[0][0] == vocab.id_to_piece(hyps[0].tokens)


def test_ctranslate2_refuses_what_it_cannot_represent(checkpoints, tmp_path):
    from nmt.export.ct2 import decode_options

    out = tmp_path / "ct2"
    code = cli.export([f"ckpt={checkpoints['gru-bahdanau']}", "format=ctranslate2", f"out={out}"])
    assert code != 0 and not out.exists()
    with pytest.raises(NMTError, match="recurrent.*format=onnx"):
        export_checkpoint(
            load_checkpoint(checkpoints["gru-bahdanau"]), ExportFormat.ctranslate2, out
        )
    with pytest.raises(NMTError, match="length_penalty=gnmt"):
        decode_options(replace(BEAM, length_penalty=LengthPenalty.gnmt), [5])
    with pytest.raises(NMTError, match="sample"):
        decode_options(DecodeConfig(strategy=Strategy.sample), [5])
    options = decode_options(replace(BEAM, length_penalty=LengthPenalty.average), [4, 9])
    assert options["length_penalty"] == 1.0 and options["return_end_token"]
    assert options["max_decoding_length"] == BEAM.max_len(9)
    assert decode_options(GREEDY, [4])["beam_size"] == 1
    # ours ends a sentence when K hypotheses ended: CTranslate2 does so for any penalty but 0
    assert 0 < decode_options(BEAM, [4])["length_penalty"] < 1e-6
    with pytest.raises(NMTError, match="format=ctranslate2 only"):
        cli.compose_config("export", ["ckpt=x", "out=y", "quantization=int8"])
    with pytest.raises(NMTError, match="quantization=int3"):
        cli.compose_config("export", ["ckpt=x", "out=y", "format=ctranslate2", "quantization=int3"])


# ---- one input path for every translator -------------------------------------------------------

WORDS = ["Ich", "glaube", ",", "dass", "wir", "einundzwanzig", "rote", "Äpfel", "kaufen", "."]
ODD_LINES = {
    "only a byte-order mark": "\ufeff",
    "a byte-order mark first": "\ufeffEr zählt zwölf Katzen.",
    "no-break spaces": "\u00a0Ich\u00a0sehe\u00a0zwei\u00a0Hunde.\u00a0",
    "tabs": "\tIch sehe\tzwei Hunde.\t",
    "empty": "",
    "spaces": "   ",
    "5,000 characters": " ".join(WORDS * 100)[:5000],
}


def test_every_translator_reads_the_same_odd_lines_alike(checkpoints, tmp_path):
    """`Translator`, the exported runtime and the CTranslate2 runner share `nmt.translation.inputs`:
    the same odd lines give the same greedy outputs through all three (blank where the line is
    blank, a whitespace variant as the plain sentence, an over-long line cut at
    decode.max_src_pieces)."""
    pytest.importorskip("ctranslate2")
    from nmt.export.ct2 import CT2Translator

    ckpt = load_checkpoint(checkpoints["transformer-pre"])
    lines = list(ODD_LINES.values())
    decode = DecodeConfig(max_src_pieces=256)  # the 5,000 characters are over 256 pieces
    ours = Translator.from_checkpoint(ckpt, decode, "cpu").translate(lines)
    graphs = export_checkpoint(ckpt, ExportFormat.torchscript, tmp_path / "graphs")
    exported = ExportedTranslator(graphs, decode, threads=1).translate(lines)
    ct2 = CT2Translator(export_checkpoint(ckpt, ExportFormat.ctranslate2, tmp_path / "ct2"), decode)
    assert dict(zip(ODD_LINES, exported)) == dict(zip(ODD_LINES, ours))
    assert dict(zip(ODD_LINES, ct2.translate(lines))) == dict(zip(ODD_LINES, ours))
    blank = {"only a byte-order mark", "empty", "spaces"}
    assert all((text == "") == (name in blank) for name, text in zip(ODD_LINES, ours))
    plain = Translator.from_checkpoint(ckpt, decode, "cpu").translate(
        ["Er zählt zwölf Katzen.", "Ich sehe zwei Hunde."]
    )
    assert [ours[1], ours[2], ours[3]] == [plain[0], plain[1], plain[1]]
    assert len(ckpt.vocabs.src.encode([lines[-1]])[0]) > 256  # the cut is exercised


@pytest.fixture(scope="module")
def transformer_export(checkpoints, tmp_path_factory):
    """`transformer_export(fmt)` -> the pre-norm Transformer exported in that format, once per
    module (an ONNX export takes ~20 s), for the prefix tests."""
    done: dict[str, Path] = {}

    def export(fmt: str) -> Path:
        pytest.importorskip({"onnx": "onnxruntime", "ctranslate2": "ctranslate2"}.get(fmt, "torch"))
        if fmt not in done:
            ckpt = load_checkpoint(checkpoints["transformer-pre"])
            out = tmp_path_factory.mktemp(fmt) / "export"
            done[fmt] = export_checkpoint(ckpt, ExportFormat(fmt), out)
        return done[fmt]

    return export


def _runtime(directory: Path, decode: DecodeConfig | None = None):
    """The translator of an export directory: CTranslate2's or the graphs' runtime."""
    if read_manifest(directory)["format"] == "ctranslate2":
        from nmt.export.ct2 import CT2Translator

        return CT2Translator(directory, decode)
    return ExportedTranslator(directory, decode, threads=1)


def test_every_translator_forces_the_same_prefixes_alike(checkpoints, transformer_export):
    """The exported runtime and the CTranslate2 runner take `prefixes` as `Translator` does:
    the same forced starts give the same greedy translations through all three."""
    ckpt = load_checkpoint(checkpoints["transformer-pre"])
    lines = ["Ich sehe zwei Hunde.", "Er zählt zwölf Katzen.", "", "Wir kaufen vierzig Stühle."]
    decode = DecodeConfig()
    ours = Translator.from_checkpoint(ckpt, decode, "cpu")
    free = ours.translate(lines)
    # the start of another line's translation: one the model would not choose here
    prefixes = [free[1].split()[0], "", "ignored: a blank line", " ".join(free[0].split()[:2])]
    want = ours.translate(lines, prefixes=prefixes)
    assert want[0].startswith(prefixes[0]) and want[1] == free[1] and want[2] == ""
    assert want[0] != free[0] and want[3] != free[3]  # the prefixes changed those two
    exported = _runtime(transformer_export("onnx"), decode)
    assert exported.translate(lines, prefixes=prefixes) == want
    ct2 = _runtime(transformer_export("ctranslate2"), decode)
    assert ct2.translate(lines, prefixes=prefixes) == want
    with pytest.raises(NMTError, match="line 2: the prefix .* lacks"):
        exported.translate(lines, prefixes=["", "漢字", "", ""])


PREFIX = "I see eighty"  # a start the model chooses for none of PREFIX_LINES
PREFIX_LINES = ["Ich sehe zwei Hunde.", "Er zählt zwölf Katzen.", "", "Wir kaufen vierzig Stühle."]


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "ctranslate2"])
def test_every_translator_forces_decode_prefix_as_prefixes(checkpoints, transformer_export, fmt):
    """`decode.prefix` (given at construction or with the call) starts every translation of the
    exported runtimes as the same prefix given in `prefixes` for every text does, and as it does
    through `Translator`; per-text `prefixes` take its place ("" for none)."""
    ckpt = load_checkpoint(checkpoints["transformer-pre"])
    n, plain, forcing = len(PREFIX_LINES), DecodeConfig(), DecodeConfig(prefix=PREFIX)
    ours = Translator.from_checkpoint(ckpt, plain, "cpu")
    free = ours.translate(PREFIX_LINES)
    want = ours.translate(PREFIX_LINES, decode=forcing)
    assert all(t.startswith(PREFIX) for t in want[:2] + want[3:]) and want[2] == ""
    assert not any(t.startswith(PREFIX) for t in free)  # the prefix is what changed them

    directory = transformer_export(fmt)
    runtime, set_once = _runtime(directory, plain), _runtime(directory, forcing)
    assert runtime.translate(PREFIX_LINES, prefixes=[PREFIX] * n) == want
    assert runtime.translate(PREFIX_LINES, decode=forcing) == want
    assert set_once.translate(PREFIX_LINES) == want
    # per-text prefixes take its place: "" frees its text, another prefix is forced instead
    others = ["", "He", "", PREFIX]
    expected = ours.translate(PREFIX_LINES, prefixes=others)
    assert expected[0] == free[0] and expected[1].startswith("He") and expected[3] == want[3]
    assert set_once.translate(PREFIX_LINES, prefixes=others) == expected
    assert runtime.translate(PREFIX_LINES, decode=forcing, prefixes=others) == expected
    with pytest.raises(NMTError, match=r"line 1: the prefix '漢字' needs pieces"):
        runtime.translate(PREFIX_LINES, decode=DecodeConfig(prefix="漢字"))
    if fmt != "ctranslate2":  # the ids API of the graphs' runtime forces it too
        src_ids, _ = source_ids(ckpt.vocabs.src, PREFIX_LINES[:2], 0)
        forced = ckpt.vocabs.tgt.encode([PREFIX])[0]
        by_ids = runtime.greedy(src_ids, prefixes=[forced, forced])
        assert [d.tokens for d in set_once.greedy(src_ids)] == [d.tokens for d in by_ids]
        assert all(d.tokens[: len(forced)] == forced for d in by_ids)


@pytest.mark.parametrize(
    "setting, named",
    [
        (dict(strategy=Strategy.beam), "decode=beam"),
        (dict(strategy=Strategy.sample), "decode=sample"),
        (dict(strategy=Strategy.beam, n_best=2), "decode.n_best=2"),
        (dict(no_repeat_ngram=2), "decode.no_repeat_ngram=2"),
        (dict(shortlist=8), "decode.shortlist=8"),
        (dict(precision=Precision.bf16), "decode.precision=bf16"),
    ],
)
def test_the_graphs_runtime_refuses_what_its_greedy_loop_cannot_honour(
    transformer_export, setting, named
):
    """A setting the exported greedy loop has no code for is an error naming it, at construction
    and per call, never a silent greedy fp32 decode."""
    directory = transformer_export("onnx")
    with pytest.raises(NMTError, match=f"{named} is not supported"):
        ExportedTranslator(directory, DecodeConfig(**setting), threads=1)
    translator = ExportedTranslator(directory, threads=1)
    with pytest.raises(NMTError, match=f"{named}( is not supported|: translate with the ch)"):
        translator.translate(["Ein Hund."], decode=DecodeConfig(**setting))
    assert translator.translate([""]) == [""]  # the default (the manifest's limits) decodes
