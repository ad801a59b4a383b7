"""Several corpora in one model (data.corpora, nmt/data/corpora.py): config errors before any work,
epoch mixing by weight and temperature, language tags as reserved pieces inserted after subword
sampling, a no-corpora run unchanged, exact resume, translation and evaluation by direction."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.cli.compose import compose_config
from nmt.config import CorpusConfig, DataConfig, DecodeConfig
from nmt.data import corpora
from nmt.data.batches import epoch_batches
from nmt.errors import NMTError
from nmt.translation.translator import Translator

# a toy "one-to-many" task: the same source sentences (words of language "xx") go word for word
# into "aa" or "bb" by two fixed, disjoint dictionaries; only the tag says which
XX = ["ka", "lo", "mi", "nu", "pe", "ra", "si", "tu"]
AA = ["red", "blue", "green", "cat", "dog", "sun", "moon", "tree"]
BB = ["rot", "blau", "grun", "katze", "hund", "sonne", "mond", "baum"]
TAGS = {"aa": "<2aa>", "bb": "<2bb>"}


def write_toy(out: Path, n_train: int = 600, n_valid: int = 40, seed: int = 0) -> Path:
    """train/valid/test .xx .aa .bb: sources of 2 to 5 words, and both translations."""
    rng = random.Random(seed)
    sizes = {"train": n_train, "valid": n_valid, "test": n_valid}
    out.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        rows = [[rng.randrange(len(XX)) for _ in range(rng.randint(2, 5))] for _ in range(n)]
        for lang, words in (("xx", XX), ("aa", AA), ("bb", BB)):
            text = "".join(" ".join(words[i] for i in row) + "\n" for row in rows)
            (out / f"{split}.{lang}").write_text(text, encoding="utf-8")
    return out


def corpora_override(*entries: dict) -> str:
    """A Hydra override `data.corpora=[{...},...]` (strings quoted: tags hold '<')."""
    items = ",".join(
        "{" + ",".join(f"{k}:{_value(v)}" for k, v in e.items()) + "}" for e in entries
    )
    return f"data.corpora=[{items}]"


def _value(v: object) -> str:
    return f"'{v}'" if isinstance(v, str) else str(v)


TAGGED = corpora_override(
    {"tgt_lang": "aa", "tgt_tag": TAGS["aa"]}, {"tgt_lang": "bb", "tgt_tag": TAGS["bb"]}
)
BASE = [
    "data=demo", "data.src_lang=xx", "data.tgt_lang=aa", "data.tokenizer.vocab_size=300",
    "data.tokenizer.model_type=unigram", "train.batch_tokens=400", "train.lr=0.005",
    "model=gru_bahdanau", "model.emb_size=48", "model.hidden_size=48",
]  # fmt: skip


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_toy(tmp_path_factory.mktemp("toy"))


def train_args(toy: Path, run: Path, *extra: str) -> list[str]:
    return [*BASE, f"data.local_dir={toy}", f"run_dir={run}", *extra]


def data_config(toy: Path, *corpora_entries: CorpusConfig, **kw) -> DataConfig:
    return DataConfig(
        name="toy", src_lang="xx", tgt_lang="aa", local_dir=str(toy),
        corpora=list(corpora_entries), **kw,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("entries", "kw", "message"),
    [
        ([CorpusConfig(weight=-1.0), CorpusConfig(tgt_lang="aa")], {}, "each must be a finite"),
        ([CorpusConfig(weight=0.0)], {}, "their sum positive"),
        ([CorpusConfig()], {"temperature": 0.0}, "data.temperature=0.0"),
        ([CorpusConfig(tgt_tag="<2 aa>")], {}, "without spaces"),
        ([CorpusConfig(tgt_tag="<unk>")], {}, "special piece"),
        (
            [CorpusConfig(tgt_lang="aa", tgt_tag="<2x>"),
             CorpusConfig(tgt_lang="bb", tgt_tag="<2x>")],
            {}, "one tag, one meaning",
        ),
        (
            [CorpusConfig(tgt_lang="aa", tgt_tag="<2aa>"), CorpusConfig(src_tag="<2aa>")],
            {}, "one tag, one meaning",
        ),
        (
            [CorpusConfig(tgt_lang="aa", tgt_tag="<2aa>"), CorpusConfig(tgt_lang="bb")],
            {}, "no tgt_tag",
        ),
        ([CorpusConfig(tgt_lang="aa"), CorpusConfig(tgt_lang="bb")], {}, "data.tgt_lang=aa"),
        ([CorpusConfig(tgt_lang="bb")], {}, "translate into ['bb']"),
    ],
)  # fmt: skip
def test_bad_corpora_are_refused_by_the_config(toy, entries, kw, message):
    with pytest.raises(NMTError, match=message.replace("[", r"\[").replace("(", r"\(")):
        data_config(toy, *entries, **kw)


def test_an_unknown_key_in_an_entry_fails_at_composition(toy):
    with pytest.raises(NMTError, match="wieght"):
        compose_config("train", [*train_args(toy, toy / "run"), "data.corpora=[{wieght:2}]"])


def test_a_tag_the_text_holds_is_refused_before_training(tmp_path, capsys):
    toy = write_toy(tmp_path / "toy", n_train=50, n_valid=5)
    with (toy / "train.bb").open("a") as f:
        f.write("rot <2aa>\n")
    with (toy / "train.xx").open("a") as f:
        f.write("ka ka\n")
    for lang in ("aa",):
        with (toy / f"train.{lang}").open("a") as f:
            f.write("red red\n")
    assert cli.train(train_args(toy, tmp_path / "run", TAGGED, "train.max_steps=1")) != 0
    err = capsys.readouterr().err
    assert "holds the tag '<2aa>'" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_mix_counts_follow_weights_and_temperature():
    sizes = np.array([900, 100])
    assert corpora.mix_counts(sizes, [1, 1], 1.0).tolist() == [900, 100]  # sizes' own shares
    assert corpora.mix_counts(sizes, [1, 3], 1.0).tolist() == [750, 250]  # 900:300
    # T = 5: p_i proportional to (n_i / N)^(1/5)
    q = (sizes / 1000) ** 0.2
    assert corpora.mix_counts(sizes, [1, 1], 5.0).tolist() == np.round(q / q.sum() * 1000).tolist()
    assert corpora.mix_counts(sizes, [1, 1], 1e9).tolist() == [500, 500]  # T -> inf: uniform
    assert corpora.mix_counts(sizes, [0, 1], 1.0).tolist() == [0, 1000]
    assert corpora.mix_counts(np.array([7, 3, 5]), [1, 1, 1], 2.0).sum() == 15


SAMPLE = ["data.tokenizer.sample_alpha=0.3", "data.tokenizer.sample_nbest=8"]
UNEVEN = corpora_override(
    {"tgt_lang": "aa", "tgt_tag": TAGS["aa"], "weight": 1},
    {"tgt_lang": "bb", "tgt_tag": TAGS["bb"], "weight": 3},
)


def prepared(toy: Path, run: Path, *extra: str):
    from nmt.training.setup import prepare_run

    cfg = compose_config("train", train_args(toy, run, *extra))
    data, _, _ = prepare_run(cfg)
    return cfg, data


def test_an_epoch_takes_each_corpus_by_weight_and_tags_every_source(toy, tmp_path):
    _, data = prepared(toy, tmp_path / "run", UNEVEN, *SAMPLE)
    with data.train as mix:
        tags = [data.vocabs.src.piece_to_id(TAGS[lang]) for lang in ("aa", "bb")]
        keys = mix.plan(0)
        corpus, local = mix._where(keys)
        # weights 1:3 on two corpora of 600: 300 of aa (a subset), 900 of bb (all once, 300 twice)
        assert np.bincount(corpus).tolist() == [300, 900]
        assert np.bincount(keys[corpus == 1] // mix.total).tolist() == [600, 300]
        assert len(set(local[corpus == 0].tolist())) == 300
        other = mix.plan(1)  # another epoch, another subset, the same shares
        assert np.bincount(mix._where(other)[0]).tolist() == [300, 900]
        assert set(other[mix._where(other)[0] == 0]) != set(keys[corpus == 0])
        assert np.array_equal(mix.plan(0), keys)  # a pure function of (seed, epoch)
        # every source starts with its corpus's tag, which appears nowhere else
        batch = mix.batch(list(range(len(keys))), 0)
        row_corpus = corpus[np.asarray(batch.index)]
        src = batch.src.numpy()
        assert np.array_equal(src[:, 0], np.asarray(tags)[row_corpus])
        assert not np.isin(src[:, 1:], tags).any()
        assert np.array_equal(batch.src_lens.numpy(), mix.lengths(0)[0][batch.index])
        # a pair repeated in an epoch is two examples to subword sampling: drawn apart
        twice = np.flatnonzero((corpus == 1) & (keys // mix.total == 1))
        firsts = np.flatnonzero((corpus == 1) & (keys // mix.total == 0))
        first_of = {int(local[i]): int(i) for i in firsts}
        pairs = [(first_of[int(local[i])], int(i)) for i in twice]
        a = mix.batch([p for p, _ in pairs], 0)
        b = mix.batch([q for _, q in pairs], 0)
        text = data.vocabs.src.decode
        rows_a = [r[:n].tolist() for r, n in zip(a.src, a.src_lens)]
        rows_b = [r[:n].tolist() for r, n in zip(b.src, b.src_lens)]
        assert text(rows_a) == text(rows_b)  # the same sentences ...
        assert sum(x != y for x, y in zip(rows_a, rows_b)) > len(pairs) // 4  # ... cut apart


def test_one_untagged_corpus_batches_as_without_corpora(toy, tmp_path):
    _, plain = prepared(toy, tmp_path / "plain", *SAMPLE)
    _, mixed = prepared(toy, tmp_path / "mixed", "data.corpora=[{}]", *SAMPLE)
    with plain.train as one, mixed.train as mix:
        assert type(one).__name__ == "TokenizedCorpus"  # no corpora: today's path, untouched
        # the same tokenizer (its file differs in the path it was trained into)
        pieces = [v.src.id_to_piece(list(range(len(v.src)))) for v in (plain.vocabs, mixed.vocabs)]
        assert pieces[0] == pieces[1]
        for epoch in (0, 1):
            lens = one.lengths(epoch)
            assert all(np.array_equal(x, y) for x, y in zip(lens, mix.lengths(epoch)))
            plan = epoch_batches(*lens, 400, 1234, epoch)
            for index in plan[:3]:
                x, y = one.batch(index, epoch), mix.batch(index, epoch)
                assert x.index == y.index and torch.equal(x.src, y.src)
                assert torch.equal(x.tgt_out, y.tgt_out)


@pytest.fixture(scope="module")
def tagged(toy, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("tagged")
    assert (
        cli.train(train_args(toy, run, TAGGED, "train.max_steps=150", "train.valid_every=150")) == 0
    )
    return run / "checkpoints" / "best"


def word_share(outputs: list[str], words: list[str]) -> float:
    got = [w for line in outputs for w in line.split()]
    return sum(w in words for w in got) / max(1, len(got))


def test_a_tagged_model_translates_into_the_tag_s_language(tagged, toy):
    translator = Translator.from_checkpoint(tagged, device="cpu")
    assert translator.tags.languages == ["aa", "bb"]
    sources = (toy / "test.xx").read_text().splitlines()
    into = {lang: translator.translate(sources, tgt_lang=lang) for lang in ("aa", "bb")}
    assert word_share(into["aa"], AA) > 0.9 and word_share(into["aa"], BB) < 0.05
    assert word_share(into["bb"], BB) > 0.9 and word_share(into["bb"], AA) < 0.05
    for lang in ("aa", "bb"):  # and mostly the right words in their places (chance: 1 in 8)
        refs = (toy / f"test.{lang}").read_text().splitlines()
        pairs = [
            (h, r) for hyp, ref in zip(into[lang], refs) for h, r in zip(hyp.split(), ref.split())
        ]
        assert sum(h == r for h, r in pairs) > 0.6 * len(pairs)
    with pytest.raises(NMTError, match="translates into aa, bb"):
        translator.translate(sources[:1], tgt_lang="cs")
    with pytest.raises(NMTError, match="say which with tgt_lang"):
        translator.translate(sources[:1])


def test_evaluate_scores_each_direction(tagged, tmp_path, capsys):
    out = tmp_path / "eval"
    assert cli.evaluate([f"ckpt={tagged}", "direction=xx-bb", f"out_dir={out}"]) == 0
    record = OmegaConf.load(out / "test.xx-bb.scores.json")
    assert record.tgt_lang == "bb" and record.split == "test.xx-bb"
    hyps = (out / "test.xx-bb.hyp").read_text().splitlines()
    assert word_share(hyps, BB) > 0.9
    assert cli.evaluate([f"ckpt={tagged}", "direction=xx-cs", f"out_dir={out}"]) != 0
    assert "the model's corpora are xx-aa, xx-bb" in capsys.readouterr().err
    assert cli.evaluate([f"ckpt={tagged}", f"out_dir={out}"]) == 0  # every direction in turn
    printed = capsys.readouterr().out
    assert "test.xx-aa:" in printed and "test.xx-bb:" in printed
    assert word_share((out / "test.xx-aa.hyp").read_text().splitlines(), AA) > 0.9


def test_validation_scores_each_direction_as_evaluate_does(tagged, tmp_path):
    """Validation logs one BLEU over the mixed validation sets (what `best` is chosen on) and one
    per direction, from the same hypotheses: each the BLEU nmt-evaluate gives that direction's
    validation split with the same (greedy) search."""
    rows = (tagged.parent.parent / "metrics.jsonl").read_text().splitlines()
    valid = [r for r in map(json.loads, rows) if r["split"] == "valid"][-1]
    assert {"bleu", "bleu_xx-aa", "bleu_xx-bb"} <= set(valid)
    assert valid["bleu_xx-aa"] != valid["bleu_xx-bb"]
    for direction in ("xx-aa", "xx-bb"):
        args = [f"ckpt={tagged}", "split=valid", f"direction={direction}", "decode=greedy"]
        assert cli.evaluate([*args, f"out_dir={tmp_path}"]) == 0
        record = OmegaConf.load(tmp_path / f"valid.{direction}.scores.json")
        assert record.bleu == pytest.approx(valid[f"bleu_{direction}"], abs=1e-9)


def test_resume_is_exact_with_tags_mixing_and_sampling(toy, tmp_path):
    common = [UNEVEN, *SAMPLE, "train.valid_every=6", "train.valid_bleu=false"]
    common += ["train.metric=loss", "train.batch_tokens=200"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert cli.train(train_args(toy, straight, *common, "train.max_steps=12")) == 0
    assert cli.train(train_args(toy, split, *common, "train.max_steps=6")) == 0
    resumed = [*common, "train.max_steps=12", "train.resume=true"]
    assert cli.train(train_args(toy, split, *resumed)) == 0
    a = load_checkpoint(straight / "checkpoints" / "last").payload["model"]
    b = load_checkpoint(split / "checkpoints" / "last").payload["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_nmt_translate_takes_tgt_lang(tagged, toy, tmp_path, capsys):
    """tgt_lang=bb: the command's lines are the library's; an unknown one fails before any input
    is read, naming the model's languages."""
    sources = (toy / "test.xx").read_text().splitlines()[:8]
    src = tmp_path / "in.xx"
    src.write_text("\n".join(sources) + "\n")
    out = tmp_path / "out.bb"
    args = [f"ckpt={tagged}", f"input={src}", "device=cpu", "decode=greedy"]
    assert cli.translate([*args, "tgt_lang=bb", f"output={out}"]) == 0
    translator = Translator.from_checkpoint(tagged, DecodeConfig(), device="cpu")
    expected = translator.translate(sources, tgt_lang="bb")
    assert out.read_text().splitlines() == expected
    missing = tmp_path / "never"
    assert cli.translate([*args, "tgt_lang=cs", f"output={missing}"]) != 0
    assert "translates into aa, bb" in capsys.readouterr().err and not missing.exists()
