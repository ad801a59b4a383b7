"""Behavioural tests for the toy German -> English demo corpus (nmt.demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.demo import (
    MATRIX_CLAUSES,
    SUBJECTS_VERBS,
    english_number,
    generate_pairs,
    german_number,
    main,
    write_demo_corpus,
)

NUMBERS = [
    (1, "eins", "one"),
    (2, "zwei", "two"),
    (7, "sieben", "seven"),
    (11, "elf", "eleven"),
    (12, "zwölf", "twelve"),
    (13, "dreizehn", "thirteen"),
    (16, "sechzehn", "sixteen"),
    (17, "siebzehn", "seventeen"),
    (21, "einundzwanzig", "twenty-one"),
    (30, "dreißig", "thirty"),
    (60, "sechzig", "sixty"),
    (70, "siebzig", "seventy"),
    (77, "siebenundsiebzig", "seventy-seven"),
    (99, "neunundneunzig", "ninety-nine"),
    (100, "einhundert", "one hundred"),
    (101, "hunderteins", "one hundred one"),
    (111, "hundertelf", "one hundred eleven"),
    (1000, "eintausend", "one thousand"),
    (1001, "eintausendeins", "one thousand one"),
    (21000, "einundzwanzigtausend", "twenty-one thousand"),
    (100000, "einhunderttausend", "one hundred thousand"),
    (101000, "hunderteintausend", "one hundred one thousand"),
    (200000, "zweihunderttausend", "two hundred thousand"),
    (
        312421,
        "dreihundertzwölftausendvierhunderteinundzwanzig",
        "three hundred twelve thousand four hundred twenty-one",
    ),
    (
        999999,
        "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
        "nine hundred ninety-nine thousand nine hundred ninety-nine",
    ),
]

FILES = [f"{s}.{lang}" for s in ("train", "valid", "test") for lang in ("de", "en")]


@pytest.mark.parametrize(("n", "de", "en"), NUMBERS)
def test_number_words(n: int, de: str, en: str) -> None:
    assert german_number(n) == de
    assert english_number(n) == en


@pytest.mark.parametrize("n", [0, 1_000_000])
def test_number_words_out_of_range(n: int) -> None:
    with pytest.raises(ValueError):
        german_number(n)
    with pytest.raises(ValueError):
        english_number(n)


def test_number_words_are_single_tokens_and_distinct() -> None:
    # German numbers are one word; distinct numbers must not collide in either language.
    sample = list(range(1, 2000)) + list(range(998_000, 1_000_000))
    assert all(" " not in german_number(n) for n in sample)
    assert len({german_number(n) for n in sample}) == len(sample)
    assert len({english_number(n) for n in sample}) == len(sample)


def test_generate_pairs_deterministic() -> None:
    a = generate_pairs(200, seed=7)
    assert a == generate_pairs(200, seed=7)
    assert a != generate_pairs(200, seed=8)
    assert len(a) == 200
    assert len({de for de, _ in a}) == 200
    for de, en in a:
        assert de.endswith(".") and en.endswith(".")
        assert de[0].isupper() and en[0].isupper()


def test_subordinate_clause_puts_german_verb_last() -> None:
    pairs = generate_pairs(500, seed=3)
    verbs = {de_verb: en_verb for _, de_verb, _, en_verb in SUBJECTS_VERBS}
    found = 0
    for de, en in pairs:
        for de_matrix, en_matrix in MATRIX_CLAUSES:
            if de.startswith(de_matrix + " "):
                found += 1
                assert en.startswith(en_matrix + " ")
                de_verb = de.rstrip(".").split()[-1]
                assert de_verb in verbs
                # In English the verb comes right after the subject, before the number.
                assert f" {verbs[de_verb]} " in en
    assert found > 100


def test_main_clause_verb_second() -> None:
    pairs = generate_pairs(300, seed=5)
    main_clauses = [de for de, _ in pairs if ", dass " not in de]
    assert main_clauses
    verbs = {de_verb for _, de_verb, _, _ in SUBJECTS_VERBS}
    for de in main_clauses:
        assert any(f" {v} " in de for v in verbs)


def test_write_demo_corpus(tmp_path: Path) -> None:
    out = write_demo_corpus(tmp_path / "a", n_train=300, n_valid=40, n_test=30, seed=2)
    assert out == tmp_path / "a"
    expected = {"train": 300, "valid": 40, "test": 30}
    german: dict[str, set[str]] = {}
    for split, n in expected.items():
        de = (out / f"{split}.de").read_text(encoding="utf-8")
        en = (out / f"{split}.en").read_text(encoding="utf-8")
        assert de.endswith("\n") and "\r" not in de + en
        de_lines, en_lines = de.splitlines(), en.splitlines()
        assert len(de_lines) == len(en_lines) == n
        german[split] = set(de_lines)
        assert len(german[split]) == n
    assert not german["train"] & german["valid"]
    assert not german["train"] & german["test"]
    assert not german["valid"] & german["test"]
    assert (out / "MANIFEST.json").is_file()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    # A fresh directory with the same parameters gives byte-identical files.
    other = write_demo_corpus(tmp_path / "b", n_train=300, n_valid=40, n_test=30, seed=2)
    for name in FILES + ["MANIFEST.json"]:
        assert (out / name).read_bytes() == (other / name).read_bytes()


def test_write_demo_corpus_skips_and_regenerates(tmp_path: Path) -> None:
    out = write_demo_corpus(tmp_path, n_train=50, n_valid=10, n_test=10, seed=1)
    before = {name: (out / name).stat().st_mtime_ns for name in FILES}
    write_demo_corpus(tmp_path, n_train=50, n_valid=10, n_test=10, seed=1)
    assert {name: (out / name).stat().st_mtime_ns for name in FILES} == before

    # Different parameters must regenerate.
    write_demo_corpus(tmp_path, n_train=60, n_valid=10, n_test=10, seed=1)
    assert len((out / "train.de").read_text(encoding="utf-8").splitlines()) == 60

    # A truncated file is detected and rebuilt even though the manifest matches.
    (out / "valid.en").write_text("oops\n", encoding="utf-8")
    write_demo_corpus(tmp_path, n_train=60, n_valid=10, n_test=10, seed=1)
    assert len((out / "valid.en").read_text(encoding="utf-8").splitlines()) == 10


def test_main_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    args = ["nmt.demo", "--out", str(out), "--train", "20", "--valid", "5", "--test", "5"]
    monkeypatch.setattr("sys.argv", args)
    main()
    printed = capsys.readouterr().out
    assert str(out) in printed and "20 lines" in printed
    assert len((out / "test.en").read_text(encoding="utf-8").splitlines()) == 5
