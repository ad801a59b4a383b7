"""Shared fixtures: a small demo corpus and tiny trained runs, made once per session."""

import signal
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.demo import write_demo_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    return write_demo_corpus(tmp_path_factory.mktemp("demo"), n_train=3000, n_valid=100, n_test=100)


SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
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
