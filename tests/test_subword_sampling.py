"""Subword regularization (data.tokenizer.sample_alpha): training pairs get a segmentation drawn
afresh each epoch from their n best, the same in every process for the same (seed, epoch, pair),
decoding to the same text; epochs are planned from their draws; evaluation and translation keep
the best segmentation; resume stays exact; and sample_alpha=0 changes nothing."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.config import DataConfig, PieceModel, Split, TokenizerConfig
from nmt.data.batches import EpochSampling, epoch_batches, fixed_shape
from nmt.data.splits import read_split, split_digest
from nmt.data.tokenized import TokenizedCorpus, tokenize
from nmt.tokenizer import EOS, PAD, UNK, PieceSampler, load_vocabs, prune_vocabs, train_vocabs

MAX_LEN = 50  # a unigram model of 400 pieces makes the demo sentences 15 to 65 pieces long
SAMPLING = TokenizerConfig(
    model_type=PieceModel.unigram, vocab_size=400, sample_alpha=0.1, sample_nbest=16
)
SAMPLING_ARGS = [
    "data.tokenizer.model_type=unigram",
    "data.tokenizer.sample_alpha=0.1",
    "data.tokenizer.sample_nbest=16",
]
SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
SMALL_RNN = ["model=gru_bahdanau", "model.emb_size=32", "model.hidden_size=32", "model.dropout=0.2"]


def subset(directory: Path, demo_dir: Path, train: int, other: int = 50) -> Path:
    """The demo corpus's first `train` training pairs and `other` validation and test pairs."""
    for split, n in (("train", train), ("valid", other), ("test", other)):
        for lang in ("de", "en"):
            lines = (demo_dir / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            (directory / f"{split}.{lang}").write_text("\n".join(lines[:n]) + "\n", "utf-8")
    return directory


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, demo_dir):
    """600 demo pairs, a unigram tokenizer with the target side pruned to the pieces its text
    uses (so that draws must avoid the pruned ones), and the corpus with sampling, seed 7."""
    directory = subset(tmp_path_factory.mktemp("pairs"), demo_dir, 600)
    cfg = DataConfig(
        name="files", src_lang="de", tgt_lang="en", local_dir=str(directory), max_len=MAX_LEN,
        cache_dir=str(tmp_path_factory.mktemp("cache")), tokenizer=SAMPLING,
    )  # fmt: skip
    raw = read_split(cfg, Split.train)
    spm_dir = tmp_path_factory.mktemp("spm")
    vocabs = prune_vocabs(
        train_vocabs(raw.src, raw.tgt, spm_dir, cfg.tokenizer), raw.src, raw.tgt, spm_dir, False
    )
    assert vocabs.tgt.kept is not None and len(vocabs.tgt) < len(vocabs.src)
    source, pairs = split_digest(cfg, Split.train)
    entry = tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs)
    corpus = TokenizedCorpus(entry, MAX_LEN, sampling(vocabs, seed=7))
    yield cfg, vocabs, entry, corpus
    corpus.close()


def sampling(vocabs, seed: int, max_len: int = MAX_LEN) -> EpochSampling:
    src, tgt = PieceSampler(vocabs.src, SAMPLING), PieceSampler(vocabs.tgt, SAMPLING)
    return EpochSampling(src, tgt, seed, max_len)


def rows(batch, side: str) -> list[list[int]]:
    """The unpadded id rows of a batch's source (with EOS) or target (without)."""
    if side == "src":
        return [r[:n].tolist() for r, n in zip(batch.src, batch.src_lens.tolist())]
    return [[i for i in r.tolist() if i not in (PAD, EOS)] for r in batch.tgt_out]


def texts(vocab, id_rows: list[list[int]]) -> list[str]:
    return vocab.decode([[i for i in r if i != EOS] for r in id_rows])


def test_each_epoch_draws_new_segmentations_of_the_same_text(sampled):
    _, vocabs, _, corpus = sampled
    plan = epoch_batches(corpus.src_lens, corpus.tgt_lens, 600, seed=7, epoch=0)
    changed = {"src": 0, "tgt": 0}
    between_epochs = total = 0
    for index in plan[:6]:
        best, first, second = corpus.batch(index), corpus.batch(index, 0), corpus.batch(index, 1)
        for side, vocab in (("src", vocabs.src), ("tgt", vocabs.tgt)):
            b, e0, e1 = rows(best, side), rows(first, side), rows(second, side)
            assert texts(vocab, e0) == texts(vocab, e1) == texts(vocab, b)  # the same text
            assert all(0 < i < len(vocab) and i != UNK for r in e0 + e1 for i in r if i != EOS)
            if side == "src":  # every source still ends with its one EOS
                assert all(r[-1] == EOS and EOS not in r[:-1] for r in e0 + e1)
            changed[side] += sum(x != y for x, y in zip(b, e0))
            between_epochs += sum(x != y for x, y in zip(e0, e1))
            total += len(b)
    assert changed["src"] > 0 and changed["tgt"] > 0
    assert between_epochs > total / 3  # most sentences of this corpus have many segmentations


def test_the_same_seed_and_epoch_give_the_same_pieces_in_a_fresh_process(sampled, tmp_path):
    cfg, vocabs, entry, corpus = sampled
    examples = [3, 17, 250, 401]
    script = f"""
import json
from pathlib import Path
from nmt.data.batches import EpochSampling
from nmt.config import PieceModel, TokenizerConfig
from nmt.data.tokenized import TokenizedCorpus
from nmt.tokenizer import PieceSampler, load_vocabs
tok = TokenizerConfig(model_type=PieceModel.unigram, sample_alpha=0.1, sample_nbest=16)
vocabs = load_vocabs(Path({str(vocabs.src.path.parent)!r}))
sampling = EpochSampling(PieceSampler(vocabs.src, tok), PieceSampler(vocabs.tgt, tok), 7, {MAX_LEN})
with TokenizedCorpus(Path({str(entry)!r}), {MAX_LEN}, sampling) as corpus:
    batch = corpus.batch({examples}, 2)
    print(json.dumps([batch.src.tolist(), batch.tgt_out.tolist()]))
"""
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)]
    runs.append(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True))
    assert [run.returncode for run in runs] == [0, 0], runs[0].stderr[-2000:]
    here = corpus.batch(examples, 2)
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)
    assert json.loads(runs[0].stdout) == [here.src.tolist(), here.tgt_out.tolist()]
    # a pair's draw does not depend on the batch it is in, nor on a fresh corpus object
    with TokenizedCorpus(entry, MAX_LEN, sampling(vocabs, 7)) as fresh:
        for position, example in enumerate(examples):
            alone = fresh.batch([example], 2)
            assert rows(alone, "src")[0] == rows(here, "src")[position]
            assert rows(alone, "tgt")[0] == rows(here, "tgt")[position]
    # another seed draws others
    with TokenizedCorpus(entry, MAX_LEN, sampling(vocabs, 8)) as other:
        assert rows(other.batch(examples, 2), "tgt") != rows(here, "tgt")


def test_sources_only_sampling_keeps_the_best_targets(sampled):
    """data.tokenizer.sample_target=false: sources get the very draws they get with both sides
    sampled (a side's draw is keyed by its side alone), targets keep their best segmentation, and
    the epoch is planned from those lengths."""
    _, vocabs, entry, corpus = sampled
    only = EpochSampling(PieceSampler(vocabs.src, SAMPLING), None, 7, MAX_LEN)
    with TokenizedCorpus(entry, MAX_LEN, only) as sources_only:
        for epoch in (0, 3):
            src_lens, tgt_lens = sources_only.lengths(epoch)
            assert np.array_equal(tgt_lens, corpus.tgt_lens)
            assert np.array_equal(src_lens, corpus.lengths(epoch)[0])
            assert not np.array_equal(src_lens, corpus.src_lens)
            plan = epoch_batches(src_lens, tgt_lens, 600, seed=7, epoch=epoch)
            for index in plan[:4]:
                one, both, best = (
                    sources_only.batch(index, epoch),
                    corpus.batch(index, epoch),
                    corpus.batch(index),
                )
                assert rows(one, "tgt") == rows(best, "tgt")
                assert (
                    torch.equal(one.tgt_in, best.tgt_in) and one.n_tgt_tokens == best.n_tgt_tokens
                )
                assert rows(one, "src") == rows(both, "src")


def test_sample_target_false_trains_on_the_best_targets(runs, tmp_path, monkeypatch):
    """Through nmt-train: every batch the model sees has its targets as the best segmentation
    makes them, and sources that are drawn."""
    from nmt.training import trainer as trainer_module

    real_loss, real_update = trainer_module.batch_loss, trainer_module.Trainer.update
    training, compared = [], []

    def loss(model, batch, smoothing, guide=None):
        best = training[-1].data.train.batch(batch.index)  # the same pairs, best segmentation
        assert rows(batch, "tgt") == rows(best, "tgt")
        compared.append(sum(a != b for a, b in zip(rows(batch, "src"), rows(best, "src"))))
        return real_loss(model, batch, smoothing, guide)

    def update(self, group):
        training.append(self)
        return real_update(self, group)

    monkeypatch.setattr(trainer_module, "batch_loss", loss)
    monkeypatch.setattr(trainer_module.Trainer, "update", update)
    args = [*runs["common"], *SAMPLING_ARGS, "data.tokenizer.sample_target=false"]
    assert cli.train([*args, "train.max_steps=10", f"run_dir={tmp_path / 'run'}"]) == 0
    assert len(compared) == 10 and sum(compared) > 0  # sources drawn


def test_an_epoch_is_planned_from_its_draws_within_max_len(sampled):
    _, vocabs, entry, corpus = sampled
    src_lens, tgt_lens = corpus.lengths(3)
    assert (src_lens != corpus.src_lens).any() and (tgt_lens != corpus.tgt_lens).any()
    assert src_lens.max() <= MAX_LEN + 1 and tgt_lens.max() <= MAX_LEN
    plan = epoch_batches(src_lens, tgt_lens, 600, seed=7, epoch=3)
    for index in plan:
        batch = corpus.batch(index, 3)
        assert batch.src_lens.tolist() == src_lens[index].tolist()  # what was planned
        assert [len(r) for r in rows(batch, "tgt")] == tgt_lens[index].tolist()
        assert batch.src.numel() <= 600 or len(index) == 1  # the budget holds
        assert batch.tgt_in.numel() <= 600 or len(index) == 1
    assert corpus.target_tokens(plan[:3], 3) == sum(
        corpus.batch(i, 3).n_tgt_tokens for i in plan[:3]
    )
    # without the limit some draws would be longer than max_len: the limit is what kept them in
    with TokenizedCorpus(entry, MAX_LEN, sampling(vocabs, 7, max_len=10**6)) as unlimited:
        src_free, tgt_free = unlimited.lengths(3)
        assert src_free.max() > MAX_LEN + 1 or tgt_free.max() > MAX_LEN


def test_sampled_batches_keep_the_fixed_shapes_of_length_step(sampled):
    """train.length_step: the plan of a sampled epoch, cut from its draws' lengths, gives batches
    that fill the fixed shapes as unsampled ones do (rows = budget // width), never wider."""
    _, _, _, corpus = sampled
    lengths = corpus.lengths(4)
    plan = epoch_batches(*lengths, 600, seed=7, epoch=4, length_step=8)
    for index in plan:
        batch = fixed_shape(corpus.batch(index, 4), 600, 8)
        rows, width = batch.src.shape
        assert batch.tgt_in.shape == (rows, width) and width % 8 == 0
        assert rows == 600 // width and len(index) <= rows


def test_draws_follow_p_to_the_alpha(sampled):
    """A segmentation x of the n best is drawn with probability P(x)^alpha / sum, measured over
    20,000 examples of one text: within 4 standard errors of every candidate's probability."""
    _, vocabs, _, _ = sampled
    segs = vocabs.src.nbest(["Wir kaufen dreihundertzwölf alte Häuser."], 16)[0]
    scores = np.array([sum(vocabs.src.sp.GetScore(i) for i in s) for s in segs])
    draws = 20_000
    counts = np.full(draws, len(segs))
    lens = np.tile([len(s) for s in segs], draws)
    ids = np.tile(np.concatenate([np.asarray(s) for s in segs]), draws)
    for alpha in (0.1, 0.5):
        sampler = PieceSampler(
            vocabs.src, TokenizerConfig(**{**vars(SAMPLING), "sample_alpha": alpha})
        )
        chosen = sampler.choose(counts, lens, ids, np.arange(draws), (7, 0, 0), limit=100)
        freq = np.bincount(chosen - np.arange(draws) * len(segs), minlength=len(segs)) / draws
        p = np.exp(alpha * (scores - scores.max()))
        p /= p.sum()
        assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / draws) + 1e-9), (alpha, freq, p)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_dir):
    """Runs on 120 demo pairs (about 8 batches an epoch, so 12 updates cross epochs): a straight
    one with sampling, one stopped at step 6 and resumed, and one without sampling."""
    data = subset(tmp_path_factory.mktemp("pairs"), demo_dir, 120)
    root = tmp_path_factory.mktemp("runs")
    common = ["data=demo", f"data.local_dir={data}", *SMALL, *SMALL_RNN, "train.log_every=1"]
    common += ["train.valid_every=6", "train.valid_bleu=false", "train.metric=loss"]

    def train(name: str, *extra: str) -> Path:
        assert cli.train([*common, f"run_dir={root / name}", *extra]) == 0
        return root / name

    straight = train("straight", *SAMPLING_ARGS, "train.max_steps=12")
    train("split", *SAMPLING_ARGS, "train.max_steps=6")
    split = train("split", *SAMPLING_ARGS, "train.max_steps=12", "train.resume=true")
    plain = train("plain", "data.tokenizer.model_type=unigram", "train.max_steps=12")
    return {"straight": straight, "split": split, "plain": plain, "common": common}


def losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["split"] == "train"}


def test_resume_is_exact_with_sampling_on(runs):
    straight, split = losses(runs["straight"]), losses(runs["split"])
    assert sorted(split) == list(range(1, 13))
    assert split == straight  # bit-identical: the same draws, batches, dropout and updates
    epochs = [json.loads(line)["epoch"] for line in (runs["split"] / "metrics.jsonl").open()]
    assert max(epochs) >= 1  # the resumed part crossed into a new epoch's draws
    a = load_checkpoint(runs["straight"] / "checkpoints" / "last").payload["model"]
    b = load_checkpoint(runs["split"] / "checkpoints" / "last").payload["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    # and the sampling was real: the same run without it trains on other batches
    assert losses(runs["plain"]) != straight


def test_resume_refuses_other_sampling_but_init_from_accepts_it(runs, tmp_path, capsys):
    args = [*runs["common"], *SAMPLING_ARGS, "train.max_steps=14", "train.resume=true"]
    code = cli.train([*args, f"run_dir={runs['split']}", "data.tokenizer.sample_alpha=0.3"])
    assert code == cli.EXIT_USAGE
    assert "data.tokenizer.sample_alpha=0.1 (now 0.3)" in capsys.readouterr().err
    # a new run may start from a model trained without sampling and turn it on
    init = runs["plain"] / "checkpoints" / "last"
    new = [*runs["common"], *SAMPLING_ARGS, "train.max_steps=2", f"run_dir={tmp_path / 'new'}"]
    assert cli.train([*new, f"train.init_from={init}"]) == 0


def test_training_plans_from_the_draws_and_counts_their_tokens(runs, tmp_path, monkeypatch):
    """With train.length_step, every batch the model sees has a planned shape (rows = budget //
    width: the plan was cut from the draws' lengths), and each update's loss is normalised by
    the target tokens of its sampled batch."""
    from nmt.training import trainer as trainer_module

    real_loss, real_update = trainer_module.batch_loss, trainer_module.Trainer.update
    seen, counted = [], []

    def loss(model, batch, smoothing, guide=None):
        seen.append((*batch.src.shape, tuple(batch.tgt_in.shape), batch.n_tgt_tokens))
        return real_loss(model, batch, smoothing, guide)

    def update(self, group):
        done = real_update(self, group)
        counted.append(done.tokens)
        return done

    monkeypatch.setattr(trainer_module, "batch_loss", loss)
    monkeypatch.setattr(trainer_module.Trainer, "update", update)
    args = [*runs["common"], *SAMPLING_ARGS, "train.max_steps=10", "train.length_step=8"]
    assert cli.train([*args, f"run_dir={tmp_path / 'run'}"]) == 0
    assert len(seen) == len(counted) == 10
    for (rows, width, tgt_shape, tokens), normaliser in zip(seen, counted):
        assert tgt_shape == (rows, width) and width % 8 == 0 and rows == 600 // width
        assert tokens == normaliser


def test_translation_and_validation_use_the_best_segmentation(runs):
    from nmt.translation.translator import Translator

    ckpt = runs["straight"] / "checkpoints" / "last"
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    sp = load_vocabs(ckpt).src.sp  # a fresh processor: its encoding is the best one
    lines = ["Wir kaufen dreihundertzwölf alte Häuser.", "Er zählt einundzwanzig Katzen."]
    for _ in range(2):
        for line, full in zip(lines, translator.translate_full(lines)):
            assert [p for p in full.src_pieces if p != "</s>"] == sp.Encode(line, out_type=str)
    # the validation loss logged is the best segmentation's: the same at every validation of
    # the same weights (a resumed run's first validation re-scores step 6's checkpoint alike)
    valid = [json.loads(x) for x in (runs["split"] / "metrics.jsonl").open()]
    valid_straight = [json.loads(x) for x in (runs["straight"] / "metrics.jsonl").open()]
    pick = lambda rows: [r["loss"] for r in rows if r["split"] == "valid"]  # noqa: E731
    assert pick(valid) == pick(valid_straight) and len(pick(valid)) == 2


def test_sample_alpha_zero_leaves_batches_as_today(sampled, tmp_path):
    cfg, vocabs, _, _ = sampled
    cfg.tokenizer = TokenizerConfig(model_type=PieceModel.unigram, vocab_size=400)
    source, pairs = split_digest(cfg, Split.train)
    entry = tokenize(cfg, vocabs, Path(cfg.cache_dir), source, pairs)
    with TokenizedCorpus(entry, MAX_LEN) as corpus:
        assert not corpus.has_nbest  # the entry nmt made before sampling existed
        assert corpus.lengths(5) == (corpus.src_lens, corpus.tgt_lens)
        for index in epoch_batches(corpus.src_lens, corpus.tgt_lens, 600, seed=7, epoch=5)[:4]:
            today, epoch = corpus.batch(index), corpus.batch(index, 5)
            for name in ("src", "src_lens", "tgt_in", "tgt_out"):
                assert torch.equal(getattr(today, name), getattr(epoch, name)), name
    cfg.tokenizer = SAMPLING


def test_settings_nmt_cannot_honour_are_refused_before_any_work(tmp_path, demo_dir, capsys):
    base = ["data=demo", f"data.local_dir={demo_dir}", *SMALL, "data.tokenizer.sample_alpha=0.1"]
    cases = {
        "needs model_type=unigram": [],  # the demo's tokenizer is BPE
        "data.tokenizer.sample_nbest=-1": [
            "data.tokenizer.model_type=unigram",
            "data.tokenizer.sample_nbest=-1",
        ],
        "data.tokenizer.sample_nbest=1": [
            "data.tokenizer.model_type=unigram",
            "data.tokenizer.sample_nbest=1",
        ],
    }
    for number, (words, extra) in enumerate(cases.items()):
        run = tmp_path / str(number)
        assert cli.train([*base, *extra, f"run_dir={run}"]) == cli.EXIT_USAGE
        assert words in capsys.readouterr().err
        assert not (run / "spm.model").exists()  # refused before the tokenizer was trained


@pytest.mark.slow  # two torchrun processes and one plain run: about 15 s on 2 cores
def test_two_ranks_draw_what_one_process_draws(tmp_path, demo_dir):
    """Under torchrun each rank samples its share of an update's batches; together they train
    on exactly the draws one process with accum_steps=2 trains on."""
    from test_distributed import COMMON, torchrun, weights

    steps = ["train.max_steps=4", "train.valid_every=4", "model.dropout=0.0", *SAMPLING_ARGS]
    torchrun(tmp_path / "ddp", demo_dir, *steps)
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'one'}", *SMALL]
    one_args = [*args, "model.emb_size=64", "model.hidden_size=64", *COMMON, *steps]
    assert cli.train([*one_args, "train.accum_steps=2"]) == 0
    two, one = weights(tmp_path / "ddp"), weights(tmp_path / "one")
    for name in one:  # float sums in another order: equal up to rounding
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=name)
    assert losses(tmp_path / "ddp") == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
