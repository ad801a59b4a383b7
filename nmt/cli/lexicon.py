"""`python -m nmt.cli.lexicon CKPT_DIR`: learn lexicon.pt (for `decode.shortlist`) into a checkpoint
written before nmt learned one, from its run's training data."""

from __future__ import annotations

import argparse
import sys

from nmt.checkpoint import load_checkpoint
from nmt.config import Split
from nmt.data.cache import cache_root
from nmt.data.splits import split_digest
from nmt.data.tokenized import TokenizedCorpus, tokenize
from nmt.errors import NMTError
from nmt.lexicon import LEXICON_FILE
from nmt.training.lexicon import corpus_lexicon


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m nmt.cli.lexicon",
        description="learn lexicon.pt (for decode.shortlist) into a checkpoint directory",
    )
    parser.add_argument("ckpt", help="checkpoint directory, e.g. runs/NAME/checkpoints/best")
    args = parser.parse_args(argv)
    try:
        ckpt = load_checkpoint(args.ckpt)
        data = ckpt.config.data
        source, pairs = split_digest(data, Split.train)
        entry = tokenize(data, ckpt.vocabs, cache_root(data.cache_dir), source, pairs)
        with TokenizedCorpus(entry, data.max_len) as corpus:
            corpus_lexicon(corpus, ckpt.vocabs, data.max_len).save(ckpt.path / LEXICON_FILE)
            pairs = len(corpus)
    except NMTError as err:
        sys.exit(f"nmt: error: {err}")
    print(f"wrote {ckpt.path / LEXICON_FILE} ({pairs} training pairs)")


if __name__ == "__main__":
    main()
