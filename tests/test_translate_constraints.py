"""nmt-translate with positive constraints: `constraints_tsv=true` (source<TAB>phrase<TAB>...) gives
the library's constrained translations line by line, N lines in and N out, with nbest_tsv,
decode.banned and rerank; bad combinations are refused before any checkpoint is read; a line whose
phrases cannot be met is an error naming it, before anything is written; the prompt's /include,
/avoid and /show set and show the phrases, and a bad one is an error the prompt survives."""

import io
import re
from dataclasses import replace
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.cli.prompt import repl
from nmt.cli.translate import translate_main
from nmt.data.splits import read_lines
from nmt.errors import NMTError
from nmt.translation.rerank import Reranker
from nmt.translation.translator import Translator


@pytest.fixture(scope="module")
def ckpt(train_small) -> Path:
    return train_small("gru")


@pytest.fixture(scope="module")
def cfg(ckpt):
    """nmt-translate's own settings (configs/translate.yaml: decode=beam) for this checkpoint."""
    return cli.compose_config("translate", [f"ckpt={ckpt}", "device=cpu"])


@pytest.fixture(scope="module")
def translator(cfg) -> Translator:
    return Translator.from_command(cfg, cfg.decode, "cpu")


@pytest.fixture(scope="module")
def sources(demo_dir) -> list[str]:
    return read_lines(demo_dir / "test.de")[:5]


def has(text: str, phrase: str) -> bool:
    """`phrase` starts a word of `text` (where a constraint is met:
    nmt.translation.phrases.constraint_ids)."""
    return text.startswith(phrase) or f" {phrase}" in text


def tsv_case(sources: list[str]) -> tuple[list[str], list[list[str]], list[str]]:
    """(input lines, each line's phrases, each line's source): two phrases, none (no tab),
    a blank line, empty and blank fields, phrases for a blank source, a trailing tab."""
    lines = [
        f"{sources[0]}\tbirds",
        sources[1],
        "",
        f"{sources[2]}\tseven hundred\t\told",
        "\tbirds",
        f"{sources[3]}\t \tmy father\t",
        f"{sources[4]}\t",
    ]
    phrases = [["birds"], [], [], ["seven hundred", "old"], [], ["my father"], []]
    texts = [sources[0], sources[1], "", sources[2], "", sources[3], sources[4]]
    return lines, phrases, texts


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def as_stdin(monkeypatch, lines: list[str]) -> None:
    """Standard input as a pipe: a stream with no terminal and no descriptor."""
    data = "".join(line + "\n" for line in lines).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


# --- batch mode: source<TAB>phrase<TAB>phrase... --------------------------------------------------


def test_each_line_is_the_librarys_constrained_translation(
    ckpt, translator, sources, tmp_path, monkeypatch
):
    lines, phrases, texts = tsv_case(sources)
    want = translator.translate(texts, constraints=phrases)
    free = translator.translate(texts)
    assert sum(not all(has(f, p) for p in ps) for f, ps in zip(free, phrases)) >= 2
    out = tmp_path / "out.en"
    args = [f"ckpt={ckpt}", "device=cpu", "constraints_tsv=true", f"output={out}"]
    assert cli.translate([*args, f"input={write(tmp_path / 'in.tsv', lines)}"]) == 0
    got = out.read_text(encoding="utf-8").split("\n")
    assert got[-1] == "" and got[:-1] == want  # N lines in, N out, each the library's
    for text, mine, source in zip(got, phrases, texts):
        assert all(has(text, p) for p in mine), (text, mine)
        assert bool(text) == bool(source)  # a blank source: a blank line, whatever its phrases
    # through a pipe, as the issue checks it (printf ... | nmt-translate ... constraints_tsv=true)
    as_stdin(monkeypatch, lines)
    assert cli.translate(args) == 0
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == want


def test_nbest_rows_and_banned_phrases_keep_the_constraints(ckpt, translator, sources, tmp_path):
    lines, phrases, texts = tsv_case(sources)
    src = write(tmp_path / "in.tsv", lines)
    decode = replace(translator.decode, n_best=3)
    full = translator.translate_full(texts, False, decode=decode, constraints=phrases)
    args = [f"ckpt={ckpt}", "device=cpu", "constraints_tsv=true", f"input={src}"]
    rows_file = tmp_path / "rows"
    argv = [*args, "nbest_tsv=true", "decode.n_best=3", f"output={rows_file}"]
    assert cli.translate(argv) == 0
    rows = [r.split("\t") for r in rows_file.read_text(encoding="utf-8").splitlines()]
    for n, (result, mine) in enumerate(zip(full, phrases), 1):
        own = [r for r in rows if r[0] == str(n)]
        assert [(r[3], float(r[2])) for r in own] == [(t, pytest.approx(s, abs=1e-4))
                                                       for t, s in result.nbest]  # fmt: skip
        assert all(has(r[3], p) for r in own for p in mine)
    assert len({r[0] for r in rows}) == len(lines)
    # a word the constrained translations use, banned: gone, and the constraints still there
    plain = [t.text for t in full]
    word = next(w for t in plain for w in t.split() if w.isalpha() and w not in ("birds", "old"))
    banned = replace(translator.decode, banned=[word])
    want = translator.translate(texts, decode=banned, constraints=phrases)
    out = tmp_path / "out"
    assert cli.translate([*args, f"decode.banned=[{word}]", f"output={out}"]) == 0
    got = out.read_text(encoding="utf-8").splitlines()
    assert got == want and any(has(t, word) for t in plain)
    assert not any(has(t, word) for t in got)
    assert all(has(t, p) for t, mine in zip(got, phrases) for p in mine)


def test_rerank_rescores_each_lines_constrained_nbest(
    ckpt, train_small, translator, sources, tmp_path
):
    lines, phrases, texts = tsv_case(sources)
    other = train_small("transformer")
    src = write(tmp_path / "in.tsv", lines)
    out = tmp_path / "out"
    argv = [f"ckpt={ckpt}", f"rerank=[{other}]", "rerank_weights=[0.2,0.8]", "decode.n_best=4",
            "device=cpu", "constraints_tsv=true", f"input={src}", f"output={out}"]  # fmt: skip
    assert cli.translate(argv) == 0
    got = out.read_text(encoding="utf-8").splitlines()
    decode = replace(translator.decode, n_best=4)
    reranker = Reranker(translator, [Translator.from_checkpoint(other, device="cpu")], [0.2, 0.8])
    want = [
        reranker.translate([text], decode=replace(decode, constraints=mine))[0]
        for text, mine in zip(texts, phrases)
    ]
    assert got == want
    assert all(has(t, p) for t, mine in zip(got, phrases) for p in mine)
    # the rescoring chose another hypothesis than the search's best on some line
    assert got != translator.translate(texts, constraints=phrases)


# --- refused before any work ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["decode=greedy"], "constraints_tsv=true needs decode=beam (got decode.strategy=greedy)"),
        (["decode=sample"], "constraints_tsv=true needs decode=beam (got decode.strategy=sample)"),
        (["prefix_tsv=true"], "prefix_tsv=true and constraints_tsv=true both read the columns"),
        (["decode.constraints=[birds]"], "constraints_tsv=true and decode.constraints=['birds']"),
    ],
)
def test_bad_combinations_are_refused_before_any_checkpoint_is_read(
    overrides, message, tmp_path, capsys
):
    nowhere = tmp_path / "none"  # no such checkpoint: an error about it would mean work began
    argv = [f"ckpt={nowhere}", "constraints_tsv=true", *overrides]
    assert cli.translate(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "not found" not in err and err.count("\n") == 1
    assert cli.translate([f"ckpt={nowhere}", *overrides, "input=x"]) == cli.EXIT_USAGE
    assert "constraints_tsv" not in capsys.readouterr().err  # alone, each is another matter


def test_the_prompt_refuses_constraints_tsv_before_loading(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    cfg = cli.compose_config("translate", [f"ckpt={tmp_path / 'none'}", "constraints_tsv=true"])
    with pytest.raises(NMTError, match=r"constraints_tsv=true reads a file or a pipe .* /include"):
        translate_main(cfg)


@pytest.mark.parametrize(
    "bad, message, repeats",
    [
        ("\t日本", "line 4: the constraint '日本' needs pieces the target vocabulary lacks", 0),
        ("\t" + "seven " * 200, r"line 4: the constraints need \d+ pieces", 0),
        (
            "\tseven seven",
            r"line 4: the constraint 'seven seven' has 'seven' \(1 pieces\) twice",
            1,
        ),
    ],
)
def test_an_unmeetable_line_is_named_and_nothing_is_written(
    ckpt, translator, sources, bad, message, repeats, tmp_path, monkeypatch, capsys
):
    """From a file, every line is checked first: no output file at all, though the bad line is
    in the second chunk. From a pipe the chunk with the bad line is checked before it is
    translated."""
    lines = [f"{sources[0]}\tbirds", sources[1], "", sources[2] + bad]
    monkeypatch.setattr("nmt.cli.lines.CHUNK_LINES", 2)
    out = tmp_path / "out"
    args = [f"ckpt={ckpt}", "device=cpu", "constraints_tsv=true", f"output={out}"]
    args.append(f"decode.no_repeat_ngram={repeats}")  # 1: "seven seven" repeats its one piece
    assert cli.translate([*args, f"input={write(tmp_path / 'in', lines)}"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(nothing was translated)" in err
    assert re.search(f"{re.escape(str(tmp_path / 'in'))}, {message}", err), err
    assert not out.exists()
    # a pipe: the lines of the chunks before the bad line's may be out (each the library's)
    as_stdin(monkeypatch, lines)
    assert cli.translate(args) == cli.EXIT_USAGE
    assert re.search(f"error: {message}", capsys.readouterr().err)
    written = out.read_text(encoding="utf-8").splitlines()
    once = replace(translator.decode, no_repeat_ngram=repeats)
    want = translator.translate(
        [sources[0], sources[1], ""], decode=once, constraints=[["birds"], [], []]
    )
    assert written == want[: len(written)]


@pytest.mark.parametrize("job", [False, True])
def test_a_line_the_search_cannot_translate_is_blank_and_named_and_the_rest_is_translated(
    ckpt, translator, sources, job, tmp_path, capsys
):
    """Two constraints that each need "seven", under no_repeat_ngram=1: no check before the
    search can tell (neither repeats a piece alone), the search finds no translation. That line
    is blank in the output and named on stderr; the others are the library's, and a file job
    (input=FILE output=FILE) finishes, leaving no parts behind."""
    lines = [f"{sources[0]}\tbirds", f"{sources[1]}\tseven hundred\tseven thousand", sources[2]]
    src, out = write(tmp_path / "in", lines), tmp_path / "out"
    args = [f"ckpt={ckpt}", "device=cpu", "constraints_tsv=true", "decode.no_repeat_ngram=1"]
    if job:
        assert cli.translate([*args, f"input={src}", f"output={out}"]) == 0
    else:
        assert cli.translate([*args, f"input={src}"]) == 0
    printed = capsys.readouterr()
    written = out.read_text(encoding="utf-8") if job else printed.out
    once = replace(translator.decode, no_repeat_ngram=1)
    want = translator.translate([sources[0], sources[2]], decode=once, constraints=[["birds"], []])
    assert written.splitlines() == [want[0], "", want[1]]
    assert "line 2 is not translated (a blank line in the output): no translation" in printed.err
    assert not (tmp_path / "out.parts").exists()


def test_a_prefix_file_is_checked_before_anything_is_written(ckpt, sources, tmp_path, capsys):
    """prefix_tsv=true from a file: the same first pass as constraints_tsv."""
    lines = [f"{sources[0]}\tI see", f"{sources[1]}\t漢字"]
    out = tmp_path / "out"
    src = write(tmp_path / "in", lines)
    argv = [f"ckpt={ckpt}", "device=cpu", "prefix_tsv=true", f"input={src}", f"output={out}"]
    assert cli.translate(argv) == cli.EXIT_USAGE
    assert "in, line 2: the prefix '漢字' needs pieces" in capsys.readouterr().err
    assert not out.exists()


# --- the prompt -----------------------------------------------------------------------------------


def type_into_repl(monkeypatch, keys: list[str]) -> None:
    typed = iter(keys)

    def fake_input(prompt: str) -> str:
        key = next(typed, None)
        if key is None:
            raise EOFError
        return key

    monkeypatch.setattr("builtins.input", fake_input)


def test_the_prompt_includes_and_avoids_phrases(cfg, translator, sources, monkeypatch, capsys):
    s = sources[0]
    free = translator.translate([s])[0]
    word = next(w for w in free.split() if w.isalpha())
    type_into_repl(monkeypatch, [
        s,
        "/include birds; seven hundred",  # the last sentence again, with both
        "/show",
        f"/avoid {word}",  # and without the word
        "/include 日本",  # a piece the vocabulary lacks: an error, the phrases kept
        sources[1],
        "/include",  # none
        "/avoid",
        "/show",
    ])  # fmt: skip
    repl(translator, cfg)
    out, err = capsys.readouterr()
    both = [["birds", "seven hundred"]]
    assert (
        out.splitlines()
        == [
            free,
            translator.translate([s], constraints=both)[0],
            translator.translate([s], constraints=both, banned=[word])[0],
            translator.translate(sources[1:2], constraints=both, banned=[word])[0],
            translator.translate(sources[1:2], banned=[word])[0],  # /include alone: none, again
            translator.translate(sources[1:2])[0],
        ]
    )
    assert "(no prefix, include: birds; seven hundred, nothing to avoid)" in err
    assert f"(no prefix, include: birds; seven hundred, avoid: {word})" in err
    assert "nmt: the constraint '日本' needs pieces the target vocabulary lacks" in err
    assert err.rstrip().endswith("(no prefix, nothing to include, nothing to avoid)")


def test_the_prompt_keeps_its_phrases_when_a_sentence_cannot_take_them(
    ckpt, cfg, translator, sources, monkeypatch, capsys
):
    """Too long for the last sentence: an error, the phrases before it kept; greedy: refused."""
    long = "birds; " + "seven " * 100
    type_into_repl(monkeypatch, [sources[0], "/include birds", f"/include {long}", sources[1]])
    repl(translator, cfg)
    out, err = capsys.readouterr()
    assert out.splitlines()[2] == translator.translate(sources[1:2], constraints=[["birds"]])[0]
    assert "nmt: line 1: the constraints need" in err
    greedy = cli.compose_config("translate", [f"ckpt={ckpt}", "decode=greedy"])
    type_into_repl(monkeypatch, ["/include birds", sources[1], "/avoid birds", "/show"])
    plain = Translator.from_command(greedy, greedy.decode, "cpu")
    repl(plain, greedy)
    out, err = capsys.readouterr()
    assert "nmt: constraints need decode=beam" in err
    assert err.rstrip().endswith("(no prefix, nothing to include, avoid: birds)")
    assert out.splitlines() == [
        plain.translate(sources[1:2])[0],
        plain.translate(sources[1:2], banned=["birds"])[0],
    ]
