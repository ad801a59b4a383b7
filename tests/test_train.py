"""Training end to end: resume reproduces the uninterrupted run; train -> evaluate -> translate."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli

SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
SMALL_RNN = ["model.emb_size=64", "model.hidden_size=64", "model.dropout=0.1"]
SMALL_TRANSFORMER = ["model.d_model=32", "model.ff_size=64", "model.encoder_layers=2"]


def train(run_dir: Path, demo_dir: Path, *extra: str, model: list[str] = SMALL_RNN) -> None:
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *model]
    assert cli.train([*args, *extra]) == 0


def losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}


@pytest.mark.parametrize("model", ["gru_bahdanau", "lstm_luong", "transformer_small"])
def test_resume_gives_the_same_losses_as_an_uninterrupted_run(tmp_path, demo_dir, model):
    common = [
        f"model={model}",
        "train.log_every=1",
        "train.valid_every=5",
        "train.valid_bleu=false",
        "train.metric=loss",
        "train.scheduler=noam",
        "train.warmup_steps=3",
        "model.dropout=0.3",
    ]
    size = SMALL_TRANSFORMER if model.startswith("transformer") else SMALL_RNN
    train(tmp_path / "straight", demo_dir, *common, "train.max_steps=10", model=size)
    train(tmp_path / "split", demo_dir, *common, "train.max_steps=5", model=size)
    train(
        tmp_path / "split", demo_dir, *common, "train.max_steps=10", "train.resume=true", model=size
    )
    straight, split = losses(tmp_path / "straight"), losses(tmp_path / "split")
    assert sorted(split) == list(range(1, 11))
    assert split == straight  # bit-identical: same batches, same dropout masks, same updates
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last").payload["model"]
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last").payload["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("model", ["lstm_luong", "gru_bahdanau", "transformer_small"])
def test_bf16_training_on_this_cpu_follows_fp32_training(tmp_path, demo_dir, model):
    """train.precision=bf16 trains every family on every CPU (.ci/run repeats it limited to AVX2,
    where oneDNN has no bf16 LSTM), and its losses are fp32's within bf16's rounding: the same
    batches from the same weights, products rounded to 8 bits of mantissa (2^-8 relative) in a
    few layers, so a few percent at most after 4 updates."""
    common = [f"model={model}", "train.log_every=1", "train.valid_every=4", "train.max_steps=4"]
    common += ["train.valid_bleu=false", "train.metric=loss", "model.dropout=0.0"]
    size = SMALL_TRANSFORMER if model.startswith("transformer") else SMALL_RNN
    train(tmp_path / "fp32", demo_dir, *common, model=size)
    train(tmp_path / "bf16", demo_dir, *common, "train.precision=bf16", model=size)
    fp32, bf16 = losses(tmp_path / "fp32"), losses(tmp_path / "bf16")
    assert sorted(bf16) == [1, 2, 3, 4]  # every update applied and logged
    for step, loss in fp32.items():
        assert bf16[step] == pytest.approx(loss, rel=0.03), (step, bf16, fp32)


def test_a_run_killed_between_checkpoints_resumes_to_the_same_losses(
    tmp_path, demo_dir, monkeypatch
):
    from nmt.training.trainer import Trainer

    common = [
        "train.log_every=1",
        "train.valid_every=4",
        "train.valid_bleu=false",
        "train.metric=loss",
        "train.max_steps=10",
    ]
    train(tmp_path / "straight", demo_dir, *common)
    real_update, calls = Trainer.update, {"n": 0}

    def dies_at_step_7(self, group):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt  # like Ctrl-C or a kill between two checkpoints
        return real_update(self, group)

    monkeypatch.setattr(Trainer, "update", dies_at_step_7)
    args = [
        "data=demo",
        f"data.local_dir={demo_dir}",
        f"run_dir={tmp_path / 'killed'}",
        *SMALL,
        *SMALL_RNN,
    ]
    assert cli.train([*args, *common]) == 130
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "killed" / "checkpoints" / "last").payload["step"] == 4
    train(tmp_path / "killed", demo_dir, *common, "train.resume=true")
    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")


def test_existing_run_is_never_clobbered(tmp_path, demo_dir, capsys):
    train(
        tmp_path / "run",
        demo_dir,
        "train.max_steps=2",
        "train.valid_bleu=false",
        "train.metric=loss",
    )
    code = cli.train(
        [
            "data=demo",
            f"data.local_dir={demo_dir}",
            f"run_dir={tmp_path / 'run'}",
            *SMALL,
            *SMALL_RNN,
        ]
    )
    assert code == cli.EXIT_USAGE
    assert "train.resume=true" in capsys.readouterr().err
    assert (tmp_path / "run" / "checkpoints" / "last" / "ckpt.pt").is_file()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demo_dir) -> Path:
    """A small GRU + Bahdanau model trained on the demo corpus for a few hundred steps."""
    run = tmp_path_factory.mktemp("run")
    train(run, demo_dir, "train.max_steps=400", "train.valid_every=200", "train.log_every=50")
    return run


def test_end_to_end_bleu_is_far_above_chance(trained, capsys):
    ckpt = trained / "checkpoints" / "best"
    assert cli.evaluate([f"ckpt={ckpt}", "split=test", "heatmaps=2"]) == 0
    out = capsys.readouterr().out
    assert "BLEU = " in out and "signature: nrefs:1|case:mixed" in out and "chrF2" in out
    scores = json.loads((trained / "eval" / "test.scores.json").read_text())
    assert scores["bleu"] > 40, scores  # chance is ~0; the no-attention baseline is far lower
    hyps = (trained / "eval" / "test.hyp").read_text().splitlines()
    assert len(hyps) == scores["sentences"] == 100
    assert (trained / "eval" / "test.attention.0.png").stat().st_size > 1000


def run_translate(ckpt: Path, stdin: bytes) -> subprocess.CompletedProcess:
    code = "from nmt.cli.main import main_translate; main_translate()"
    return subprocess.run(
        [sys.executable, "-c", code, f"ckpt={ckpt}"], input=stdin, capture_output=True
    )


def test_translate_keeps_one_line_out_per_line_in(trained):
    lines = [
        "Ich sehe einundzwanzig rote Äpfel.",
        "",
        "   ",
        "Wir kaufen " + "dreihundert " * 400 + "Bücher.",  # far longer than anything in training
        "\x00\x07 Ω漢字🙂 \t tab",
        "Er zählt zwölf Katzen.\r",  # a stray CR must not split or merge lines
        "\u2028 line separator inside",
        "Ich sehe einundzwanzig rote Äpfel.",
    ]
    data = "\n".join(lines).encode() + b"\n" + b"\xff\xfe invalid utf-8\n"
    result = run_translate(trained / "checkpoints" / "best", data)
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode("utf-8").split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines) + 1
    assert out[1] == out[2] == ""
    assert out[0] == out[7] == "I see twenty-one red apples."


def test_translator_api_matches_the_cli(trained):
    from nmt.translation.translator import Translator

    translator = Translator.from_checkpoint(trained / "checkpoints" / "best", device="cpu")
    texts = translator.translate(["Ich sehe einundzwanzig rote Äpfel.", ""])
    assert texts == ["I see twenty-one red apples.", ""]
    full = translator.translate_full(["Er zählt zwölf Katzen."])[0]
    assert full.attention().shape == (len(full.tgt_pieces), len(full.src_pieces))
    assert full.maps.shape == (len(full.tgt_pieces), 1, 1, len(full.src_pieces))


def test_bad_checkpoints_are_one_line_errors(tmp_path, trained):
    for path in (tmp_path / "missing", tmp_path):
        result = run_translate(path, b"Hallo\n")
        assert result.returncode == 2
        err = result.stderr.decode().strip()
        assert err.startswith("nmt-translate: error:") and "\n" not in err, err


def test_evaluate_on_a_pair_of_files(trained, demo_dir, tmp_path, capsys):
    ckpt = trained / "checkpoints" / "best"
    args = [
        f"ckpt={ckpt}",
        f"src_file={demo_dir / 'valid.de'}",
        f"ref_file={demo_dir / 'valid.en'}",
    ]
    assert cli.evaluate([*args, f"out_dir={tmp_path}"]) == 0
    assert "BLEU = " in capsys.readouterr().out
    scores = json.loads((tmp_path / "valid.de.scores.json").read_text())
    assert scores["sentences"] == 100 and scores["bleu"] > 40


def type_into_repl(monkeypatch, lines: list[str]) -> None:
    typed = iter(lines)

    def fake_input(prompt: str) -> str:
        try:
            return next(typed)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", fake_input)


def test_interactive_prompt_shows_translation_and_attention(trained, tmp_path, monkeypatch, capsys):
    from nmt.cli.prompt import repl
    from nmt.run_config import TranslateRunConfig
    from nmt.translation.translator import Translator

    type_into_repl(monkeypatch, ["Ich sehe einundzwanzig rote Äpfel.", "   "])
    ckpt = trained / "checkpoints" / "best"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    png = tmp_path / "attn.png"
    repl(translator, TranslateRunConfig(str(ckpt), show_attention=True, attention_png=str(png)))
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "I see twenty-one red apples."
    assert "▁I" in out[1]  # header row of source pieces, then one row per target piece
    assert len(out) == 2 + len(
        translator.translate_full(["Ich sehe einundzwanzig rote Äpfel."])[0].tgt_pieces
    )
    assert png.stat().st_size > 1000


def test_interactive_prompt_translates_a_paragraph_as_a_pipe_does(trained, monkeypatch, capsys):
    """A line of two sentences typed at the prompt is split and rejoined, as nmt-translate
    gives it from a pipe (not translated as one long sentence); with alignments=true its
    alignment column follows; a one-sentence line keeps the prompt's own display."""
    from nmt.cli.lines import LineFormat, translate_stream
    from nmt.cli.prompt import repl
    from nmt.run_config import TranslateRunConfig
    from nmt.translation.translator import Translator

    paragraph = "Ich sehe einundzwanzig rote Äpfel. Er zählt zwölf Katzen."
    ckpt = trained / "checkpoints" / "best"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    for cfg in (TranslateRunConfig(str(ckpt)), TranslateRunConfig(str(ckpt), alignments=True)):
        piped = list(translate_stream(translator, [paragraph + "\n"], fmt=LineFormat(text=cfg)))
        type_into_repl(monkeypatch, [paragraph])
        repl(translator, cfg)
        assert capsys.readouterr().out.splitlines() == [p.rstrip("\n") for p in piped]
    assert (
        piped[0].count("\t") == 1
        and piped[0].split("\t")[0] != translator.translate([paragraph])[0]
    )  # the pipe splits: not the paragraph read as one sentence
    type_into_repl(monkeypatch, ["Er zählt zwölf Katzen."])
    repl(translator, TranslateRunConfig(str(ckpt), show_attention=True))
    assert len(capsys.readouterr().out.splitlines()) > 2  # the translation and its attention
    # one sentence with a protected span: the URL comes out verbatim, as from a pipe
    linked, cfg = "Ich sehe https://nmt.example/a?b=1 rote Äpfel.", TranslateRunConfig(str(ckpt))
    piped = list(translate_stream(translator, [linked + "\n"], fmt=LineFormat(text=cfg)))
    type_into_repl(monkeypatch, [linked])
    repl(translator, cfg)
    out = capsys.readouterr().out.splitlines()
    assert out == [p.rstrip("\n") for p in piped] and "https://nmt.example/a?b=1" in out[0]


def test_an_unknown_command_at_the_prompt_is_named_not_translated(trained, monkeypatch, capsys):
    """/help lists the commands; a word after a slash that is no command says so and lists
    them: neither is translated as a sentence. A line of text after them still is."""
    from nmt.cli.prompt import COMMANDS, REPL_HELP, repl
    from nmt.run_config import TranslateRunConfig
    from nmt.translation.translator import Translator

    ckpt = trained / "checkpoints" / "best"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    sentence = "Er zählt zwölf Katzen."
    type_into_repl(monkeypatch, ["/help", "/hilfe", sentence])
    repl(translator, TranslateRunConfig(str(ckpt)))
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == translator.translate([sentence])[0]  # the sentence alone
    assert "no command /hilfe" in err and ", ".join(COMMANDS) in err
    assert err.count(REPL_HELP) == 3  # at the start, for /help and for /hilfe


def test_interactive_prompt_lists_the_n_best_with_scores(trained, monkeypatch, capsys):
    from nmt.cli.prompt import repl
    from nmt.config import DecodeConfig, Strategy
    from nmt.run_config import TranslateRunConfig
    from nmt.translation.translator import Translator

    type_into_repl(monkeypatch, ["Er zählt zwölf Katzen."])
    ckpt = trained / "checkpoints" / "best"
    decode = DecodeConfig(strategy=Strategy.beam, beam_size=4, n_best=3)
    repl(Translator.from_checkpoint(ckpt, decode, "cpu"), TranslateRunConfig(str(ckpt)))
    best, *ranked = capsys.readouterr().out.splitlines()
    assert len(ranked) == 3
    # the first of the n-best is the printed translation (the tiny model may miss the number)
    assert ranked[0].split(maxsplit=2)[2] == best and best.startswith("He counts")
    scores = [float(line.split()[1]) for line in ranked]
    assert [int(line.split()[0]) for line in ranked] == [1, 2, 3]
    assert scores == sorted(scores, reverse=True)


def test_nbest_tsv_gives_every_hypothesis_with_its_line_number(trained):
    from nmt.cli.lines import LineFormat, translate_stream
    from nmt.config import DecodeConfig, Strategy
    from nmt.translation.translator import Translator

    decode = DecodeConfig(strategy=Strategy.beam, beam_size=3, n_best=2)
    translator = Translator.from_checkpoint(trained / "checkpoints" / "best", decode, "cpu")
    lines = ["Er zählt zwölf Katzen.", "", "Ich sehe einundzwanzig rote Äpfel."]
    rows = [
        row.split("\t")
        for row in translate_stream(translator, lines, fmt=LineFormat(nbest_tsv=True))
    ]
    assert [(r[0], r[1]) for r in rows] == [
        ("1", "1"),
        ("1", "2"),
        ("2", "1"),
        ("3", "1"),
        ("3", "2"),
    ]
    assert rows[0][3].startswith("He counts") and rows[2][3] == ""
    assert rows[3][3] == "I see twenty-one red apples."


def test_evaluate_with_sampling_and_greedy_runs_end_to_end(trained, tmp_path, capsys):
    ckpt = trained / "checkpoints" / "best"
    strategies = ("greedy", "sample", "beam")
    for name in strategies:
        assert cli.evaluate([f"ckpt={ckpt}", f"decode={name}", f"out_dir={tmp_path / name}"]) == 0
    scores = {
        name: json.loads((tmp_path / name / "test.scores.json").read_text())["bleu"]
        for name in strategies
    }
    assert scores["beam"] > 40 and scores["greedy"] > 40 and scores["sample"] > 0, scores


@pytest.mark.slow  # inductor compiles for minutes on 2 CPU cores
def test_compiled_training_gives_the_losses_of_eager_training(tmp_path, demo_dir):
    """train.compile=true (torch.compile of the training forward) changes speed, not results: the
    same losses within float tolerance (inductor may fuse and reorder float operations)."""
    common = [
        "model=gru_luong",
        "model.input_feeding=false",  # no Python loop over time steps: one graph per shape
        "model.dropout=0.0",
        "train.max_steps=3",
        "train.log_every=1",
        "train.valid_every=3",
        "train.valid_bleu=false",
        "train.metric=loss",
    ]
    train(tmp_path / "eager", demo_dir, *common)
    train(tmp_path / "compiled", demo_dir, *common, "train.compile=true")
    eager, compiled = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert sorted(compiled) == [1, 2, 3]
    assert compiled == pytest.approx(eager, rel=1e-4)


def test_the_bleu_a_run_logs_is_what_its_checkpoint_scores(tmp_path, demo_dir):
    """A validation inside training decodes with the weights of its own step: search's piece
    tables (nmt/models/rnn.py) once stayed those of the first validation, because fused Adam
    writes the weights without bumping their versions. The last validation's BLEU must equal
    greedy decoding of the saved checkpoint in a fresh model."""
    run = tmp_path / "run"
    train(run, demo_dir, "train.max_steps=150", "train.valid_every=75")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if r["split"] == "valid"]
    assert [r["step"] for r in logged] == [75, 150] and logged[-1]["bleu"] > 5
    ckpt = run / "checkpoints" / "last"
    assert cli.evaluate([f"ckpt={ckpt}", "split=valid", "decode=greedy"]) == 0
    scores = json.loads((run / "eval" / "valid.scores.json").read_text())
    assert scores["bleu"] == pytest.approx(logged[-1]["bleu"], abs=1e-9)
