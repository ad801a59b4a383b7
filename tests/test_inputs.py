"""The input path every translator shares (nmt.translation.inputs): cleaning, blank texts set aside
and put back, and length-sorted batches. The three translators are compared on the same odd lines in
tests/test_export.py."""

import random

from nmt.tokenizer import clean
from nmt.translation.inputs import Sources, length_batches


def test_clean_folds_every_kind_of_whitespace_and_the_byte_order_mark():
    assert clean("\ufeff") == ""
    assert clean("\ufeffEin\u00a0Hund\tläuft.\r\n") == "Ein Hund läuft."
    assert clean("  a \u2003 b\u3000") == "a b"


def test_length_batches_cover_every_source_once_shortest_first():
    rng = random.Random(0)
    lengths = [rng.randint(1, 30) for _ in range(200)]
    batches = length_batches(lengths, 16)
    assert sorted(i for batch in batches for i in batch) == list(range(200))
    assert all(1 <= len(batch) <= 16 for batch in batches)
    flat = [lengths[i] for batch in batches for i in batch]
    assert flat == sorted(lengths)
    # ties keep the input order, so batching is a pure function of the lengths
    same = [i for batch in batches for i in batch if lengths[i] == 7]
    assert same == sorted(same)


def test_a_batch_never_mixes_what_same_tells_apart():
    lengths = [3, 9, 4, 10, 5, 11, 6]
    limit = lambda n: min(n // 4, 2)  # noqa: E731 - a length limit that grows, then caps
    batches = length_batches(lengths, 2, same=limit)
    assert all(len({limit(lengths[i]) for i in batch}) == 1 for batch in batches)
    assert [lengths[i] for batch in batches for i in batch] == sorted(lengths)
    assert all(len(batch) <= 2 for batch in batches)


def test_results_go_back_to_their_texts_and_blanks_stay_blank():
    sources = Sources(ids=[[5, 3], [6, 3]], index=[1, 3], total=4)
    assert sources.place(["one", "three"], lambda i: f"blank {i}") == [
        "blank 0", "one", "blank 2", "three",
    ]  # fmt: skip
