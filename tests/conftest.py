"""Shared fixtures: a small demo corpus and a tiny trained run, made once per session."""

from pathlib import Path

import pytest

from nmt.demo import write_demo_corpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory) -> Path:
    return write_demo_corpus(tmp_path_factory.mktemp("demo"), n_train=3000, n_valid=100, n_test=100)
