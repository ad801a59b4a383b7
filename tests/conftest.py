"""Shared fixtures: a small demo corpus and tiny trained runs, made once per session."""

import os
import signal
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.demo import write_demo_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Tokenizers and tokenized corpora go to a cache of the test session's own (nmt/data/cache.py),
    for the commands the tests run in this process and in subprocesses alike."""
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield Path(os.environ["XDG_CACHE_HOME"]) / "nmt"
    if saved is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = saved


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    return write_demo_corpus(tmp_path_factory.mktemp("demo"), n_train=3000, n_valid=100, n_test=100)


SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
# a fitted confidence calibration costs a decode of the valid split: the tests that want one ask
SMALL += ["train.calibrate=false"]
SMALL_MODELS = {
    "gru": ["model=gru_bahdanau", "model.emb_size=64", "model.hidden_size=64"],
    "transformer": [
        "model=transformer_small",
        "model.d_model=32",
        "model.ff_size=64",
        "model.encoder_layers=2",
        "model.decoder_layers=2",
    ],
}


@pytest.fixture(scope="session")
def train_small(tmp_path_factory, demo_dir):
    """`train_small(family, *overrides)` -> the best checkpoint of a small model ("gru": GRU +
    Bahdanau, "transformer": 2+2 layers, d 32) trained for 150 updates on the demo corpus, enough
    to end most sentences with EOS. Each distinct request trains once per session, so test files
    asking for the same model share it."""
    trained: dict[tuple[str, ...], Path] = {}

    def train(family: str, *overrides: str) -> Path:
        key = (family, *overrides)
        if key not in trained:
            run = tmp_path_factory.mktemp(family)
            args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}", *SMALL]
            args += [*SMALL_MODELS[family], *overrides]
            assert cli.train([*args, "train.max_steps=150", "train.valid_every=150"]) == 0
            trained[key] = run / "checkpoints" / "best"
        return trained[key]

    return train


def default_sigint() -> None:
    """Popen(preexec_fn=...): give the child the default Ctrl-C. A test run started in the
    background of a non-interactive shell (`make test &`) ignores SIGINT, children inherit the
    ignore, and Python then never installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def hf_sandbox(tmp_path, monkeypatch):
    """Offline `datasets` with every cache under tmp_path (env and the already-read constants)."""
    import datasets
    import huggingface_hub.constants as hub_constants

    home = tmp_path / "hf_home"
    cache = tmp_path / "hf_datasets"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Both libraries read these at import time, so the environment alone is not enough.
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", home / "modules")
    monkeypatch.setattr(datasets.config, "DOWNLOADED_DATASETS_PATH", cache / "downloads")
    monkeypatch.setattr(
        datasets.config, "EXTRACTED_DATASETS_PATH", cache / "downloads" / "extracted"
    )
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HOME", str(home))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(home / "hub"))
    return cache


def demo_pairs(demo_dir: Path) -> tuple[list[str], list[str]]:
    """The demo corpus's training sides, German and English."""
    src = (demo_dir / "train.de").read_text("utf-8").splitlines()
    return src, (demo_dir / "train.en").read_text("utf-8").splitlines()


def fairseq_spm(out: Path, demo_dir: Path, model_type: str) -> Path:
    """One sentencepiece model of 300 pieces over both sides of the demo corpus, as the
    sentencepiece.bpe.model that M2M-100, NLLB-200 and mBART-50 ship."""
    import sentencepiece as spm

    src, tgt = demo_pairs(demo_dir)
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(src + tgt), model_prefix=str(out / "sp"), vocab_size=300,
        model_type=model_type, character_coverage=1.0, num_threads=1, minloglevel=2,
    )  # fmt: skip
    (out / "sp.vocab").unlink()
    return (out / "sp.model").rename(out / "sentencepiece.bpe.model")


def train_hf(model, tokenizer, src: list[str], tgt: list[str], steps: int) -> None:  # noqa: ANN001
    """`steps` updates of a transformers seq2seq model on batches of 32 pairs in corpus order
    (Adam, lr 3e-3), then eval mode: enough that its translations depend on the source."""
    import torch

    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        rows = slice((step * 32) % (len(src) - 32), (step * 32) % (len(src) - 32) + 32)
        batch = tokenizer(src[rows], text_target=tgt[rows], padding=True, return_tensors="pt")
        batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


T5_CODES = ["<2de>", "<2en>", "<2fr>"]


def write_t5(out: Path, demo_dir: Path, steps: int = 300, **overrides) -> Path:
    """A small MADLAD-style T5 in the Hugging Face layout: spiece.model with the `<2xx>` pieces,
    T5Tokenizer's tokenizer.json, and the weights with an lm_head of their own (what T5 v1.1
    saves; transformers 5 ties the head only where the saved tensors are equal)."""
    import json

    import sentencepiece as spm
    import torch
    import transformers

    out.mkdir(parents=True)
    src, tgt = demo_pairs(demo_dir)
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(src + tgt), model_prefix=str(out / "spiece"), vocab_size=320,
        model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2, pad_id=0,
        eos_id=1, unk_id=2, bos_id=-1, user_defined_symbols=T5_CODES,
    )  # fmt: skip
    (out / "spiece.vocab").unlink()

    tokenizer = transformers.T5Tokenizer.from_pretrained(str(out), extra_ids=4)
    settings = dict(
        vocab_size=len(tokenizer) + 3, d_model=32, d_kv=16, d_ff=48, num_layers=2,
        num_decoder_layers=2, num_heads=4, feed_forward_proj="gated-gelu",
        tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
        relative_attention_num_buckets=8, relative_attention_max_distance=20, dropout_rate=0.1,
    )  # fmt: skip
    settings.update(overrides)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(**settings))
    untied = not settings["tie_word_embeddings"]
    if untied:  # an output layer of its own, trained as such
        model.lm_head.weight = torch.nn.Parameter(model.shared.weight.detach().clone() * 2)
    train_hf(model, tokenizer, [f"<2en> {s}" for s in src], tgt, steps)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if untied:  # transformers 5 writes tie_word_embeddings=true whatever the model
        config = json.loads((out / "config.json").read_text("utf-8"))
        config["tie_word_embeddings"] = False
        (out / "config.json").write_text(json.dumps(config), "utf-8")
    return out


@pytest.fixture(scope="session")
def madlad(tmp_path_factory, demo_dir) -> tuple[Path, Path]:
    """(a MADLAD-style T5 in the Hugging Face layout, its nmt import): one per test session,
    for every test of the T5 family (tests/test_t5_*.py); the tests do not change them."""
    from nmt.pretrained.importer import import_model

    root = tmp_path_factory.mktemp("madlad")
    hf = write_t5(root / "hf", demo_dir)
    return hf, import_model(str(hf), root / "nmt")
