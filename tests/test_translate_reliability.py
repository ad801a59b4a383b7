"""Translation under hostile input and use: over-long lines, a pipe that pauses, Ctrl-C and Ctrl-D.

Each test states the fault it injects; the promise is always the same: N lines in give N lines
out, in order, in bounded time and memory, and nothing is dropped without a word on stderr.
"""

import contextlib
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import default_sigint

from nmt.cli import main as cli
from nmt.cli.lines import arrivals, translate_stream
from nmt.cli.prompt import repl
from nmt.config import DecodeConfig
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig
from nmt.tokenizer import EOS
from nmt.translation.inputs import source_ids
from nmt.translation.translator import Translator

SHORT = ["Ich sehe einundzwanzig rote Äpfel.", "Er zählt zwölf Katzen."]
TRANSLATE = "from nmt.cli.main import main_translate; main_translate()"
GREEDY_CPU = ["decode=greedy", "device=cpu"]  # as DecodeConfig() decodes, to compare with it


@pytest.fixture(scope="module")
def gru_ckpt(train_small) -> Path:
    return train_small("gru")


@pytest.fixture(scope="module")
def transformer_ckpt(train_small) -> Path:
    return train_small("transformer")


@pytest.fixture(params=["gru", "transformer"])
def ckpt(request) -> Path:
    return request.getfixturevalue(f"{request.param}_ckpt")


def fifty_thousand_words() -> str:
    words = " ".join(SHORT).split()
    return " ".join(words[i % len(words)] for i in range(50_000))


# --- 1. over-long lines --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "long_line",
    [pytest.param("Äpfel" * 200_000, id="1M-chars-no-space"), pytest.param(None, id="50k-words")],
)
def test_an_overlong_line_is_cut_with_one_warning_and_keeps_its_place(ckpt, long_line, caplog):
    """Fault: one line of 1,000,000 characters (or 50,000 words) between two short ones."""
    long_line = long_line or fifty_thousand_words()
    translator = Translator.from_checkpoint(ckpt, device="cpu")
    alone = translator.translate(SHORT)
    caplog.clear()
    start = time.perf_counter()
    out = list(translate_stream(translator, [SHORT[0] + "\n", long_line + "\n", SHORT[1] + "\n"]))
    seconds = time.perf_counter() - start
    assert len(out) == 3 and [out[0], out[2]] == alone
    assert out[1] and "\n" not in out[1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "line 2: " in warnings[0] and f"({len(long_line)} characters)" in warnings[0]
    assert "max_src_pieces=1024" in warnings[0]
    assert seconds < 60, seconds  # uncapped: minutes, and gigabytes for the attention


def test_nmt_translate_and_nmt_evaluate_honour_the_cap(gru_ckpt, tmp_path, capsys):
    """Fault: a 50,000-word line in a file given to the command-line tools."""
    lines = [SHORT[0], fifty_thousand_words(), SHORT[1]]
    src = tmp_path / "in.de"
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "out.en"
    # split into its sentences the line would be thousands of short ones: the cap is on one text
    whole = "split_sentences=false"
    assert cli.translate([f"ckpt={gru_ckpt}", f"input={src}", f"output={out}", "device=cpu",
                          whole]) == 0  # fmt: skip
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert "line 2: " in capsys.readouterr().err
    ref = tmp_path / "ref.en"
    ref.write_text("a\nb\nc\n", encoding="utf-8")
    args = [f"ckpt={gru_ckpt}", f"src_file={src}", f"ref_file={ref}", f"out_dir={tmp_path}"]
    assert cli.evaluate([*args, "decode.max_src_pieces=100", "device=cpu", whole]) == 0
    assert "max_src_pieces=100 " in capsys.readouterr().err


def test_cutting_before_tokenizing_gives_the_first_pieces_of_the_whole_line(gru_ckpt):
    vocab = Translator.from_checkpoint(gru_ckpt, device="cpu").vocabs.src
    spaced = fifty_thousand_words()
    unspaced = "einundzwanzigÄpfel" * 20_000
    for text in (spaced, unspaced):
        whole = vocab.encode([text])[0]
        for cap in (50, 1024):
            ids, cut = source_ids(vocab, [text, SHORT[0]], cap)
            assert cut == [0]
            assert ids[0] == whole[: cap - 1] + [EOS]
            assert ids[1] == vocab.encode([SHORT[0]])[0] + [EOS]
        assert source_ids(vocab, [text, SHORT[0]], 2) == (
            [whole[:1] + [EOS], ids[1][:1] + [EOS]],
            [0, 1],
        )
    ids, cut = source_ids(vocab, [spaced], 0)
    assert cut == [] and len(ids[0]) == len(vocab.encode([spaced])[0]) + 1


def test_a_cap_of_one_piece_is_refused():
    with pytest.raises(NMTError, match="max_src_pieces"):
        DecodeConfig(max_src_pieces=1)
    assert DecodeConfig(max_src_pieces=0).max_src_pieces == 0


# --- 2. streaming --------------------------------------------------------------------------------


def test_arrivals_keep_every_line_in_order_in_bounded_chunks():
    lines = [f"{i}\n" for i in range(2500)]
    chunks = list(arrivals(iter(lines), 1000))
    assert [line for chunk in chunks for line in chunk] == lines
    assert all(1 <= len(chunk) <= 1000 for chunk in chunks)
    full = list(arrivals(iter(lines), 1000, wait_full=True))
    assert [len(chunk) for chunk in full] == [1000, 1000, 500]
    assert list(arrivals([], 1000)) == []


def test_a_reader_error_comes_after_the_lines_read_before_it():
    """Fault: the input fails after two lines (a disk error, a closed socket)."""

    def failing():
        yield "a\n"
        yield "b\n"
        raise OSError("input went away")

    got = []
    with pytest.raises(OSError, match="went away"):
        for chunk in arrivals(failing(), 1000):
            got += chunk
    assert got == ["a\n", "b\n"]


def test_leaving_early_stops_the_reader():
    """Fault: the consumer stops reading (`nmt-translate | head`) while the input never ends."""

    def endless():
        while True:
            yield "x\n"

    chunks = arrivals(endless(), 10)
    assert next(chunks)
    chunks.close()
    deadline = time.monotonic() + 10
    while any(t.name == "nmt-line-reader" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the reader thread is still running"
        time.sleep(0.05)


def test_lines_are_translated_before_the_input_ends(gru_ckpt):
    """Fault: the input pauses after 3 lines (a slow pipe) and only goes on 30 s later."""
    translator = Translator.from_checkpoint(gru_ckpt, device="cpu")
    more = threading.Event()
    waited_out = []

    def slow_input():
        yield from (SHORT[0] + "\n", "\n", SHORT[1] + "\n")
        waited_out.append(not more.wait(timeout=30))  # a chunked reader would wait here
        yield SHORT[1] + "\n"

    stream = translate_stream(translator, slow_input())
    first = [next(stream) for _ in range(3)]
    assert not waited_out, "the first translations waited for more input"
    more.set()
    rest = list(stream)
    assert first == [*translator.translate(SHORT[:1]), "", *translator.translate(SHORT[1:])]
    assert rest == translator.translate(SHORT[1:]) and waited_out == [False]


def read_line(lines: queue.Queue, timeout: float = 60) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no output line within {timeout} s")


def test_nmt_translate_answers_through_a_pipe_before_it_is_closed(gru_ckpt):
    """Fault: a slow producer writes 3 lines and waits for their translations before going on."""
    expected = Translator.from_checkpoint(gru_ckpt, DecodeConfig(), "cpu").translate(SHORT[:1])[0]
    proc, lines = start_translate(gru_ckpt)
    try:
        proc.stdin.write(f"{SHORT[0]}\n\n{SHORT[1]}\n".encode())
        proc.stdin.flush()
        first = [read_line(lines) for _ in range(3)]  # the pipe is still open
        assert first[0] == f"{expected}\n".encode() and first[1] == b"\n"
        proc.stdin.write(b"\xff\xfe bad bytes\n" + SHORT[0].encode() + b"\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
        rest = [read_line(lines, 10) for _ in range(2)]
        assert rest[1] == first[0] and lines.empty()
    finally:
        proc.kill()
        proc.wait()


def start_translate(ckpt: Path) -> tuple[subprocess.Popen, queue.Queue]:
    """nmt-translate reading a pipe, and a queue of its output lines (read by a thread)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TRANSLATE, f"ckpt={ckpt}", *GREEDY_CPU],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,  # the test sends it Ctrl-C
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    return proc, lines


def test_ctrl_c_in_batch_mode_exits_130_while_the_input_is_still_open(gru_ckpt):
    """Fault: SIGINT while the reader thread is blocked on a pipe with more to come."""
    proc, lines = start_translate(gru_ckpt)
    try:
        proc.stdin.write(f"{SHORT[0]}\n".encode())
        proc.stdin.flush()
        read_line(lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130  # was SIGABRT: "could not acquire lock for <stdin>"
        assert proc.stderr.read().decode().strip() == "nmt-translate: interrupted"
    finally:
        proc.kill()
        proc.wait()


def test_a_closed_output_ends_nmt_translate_quietly_while_the_input_is_still_open(gru_ckpt):
    """Fault: the reader goes away (`... | nmt-translate | head -1`), the producer does not."""
    proc = subprocess.Popen(
        [sys.executable, "-c", TRANSLATE, f"ckpt={gru_ckpt}", *GREEDY_CPU],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        proc.stdin.write(f"{SHORT[0]}\n".encode())
        proc.stdin.flush()
        # read here, not in a thread: closing a pipe that a thread is reading waits for that read
        read_until(proc.stdout.fileno(), b"\n")
        proc.stdout.close()
        with contextlib.suppress(BrokenPipeError):  # it may be gone already
            for _ in range(3):
                proc.stdin.write(f"{SHORT[1]}\n".encode() * 50)
                proc.stdin.flush()
                time.sleep(0.3)
        assert proc.wait(timeout=30) == 0
        assert b"Fatal" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# --- 4. the interactive prompt -------------------------------------------------------------------


def type_into_repl(monkeypatch, keys: list) -> None:
    """Each item is returned by input(), or raised when it is an exception class."""
    typed = iter(keys)

    def fake_input(prompt: str) -> str:
        key = next(typed, EOFError)
        if isinstance(key, type) and issubclass(key, BaseException):
            raise key
        return key

    monkeypatch.setattr("builtins.input", fake_input)


def test_ctrl_c_while_typing_cancels_the_line_and_ctrl_d_quits(gru_ckpt, monkeypatch, capsys):
    type_into_repl(monkeypatch, [KeyboardInterrupt, SHORT[0], KeyboardInterrupt, EOFError])
    translator = Translator.from_checkpoint(gru_ckpt, device="cpu")
    repl(translator, TranslateRunConfig(str(gru_ckpt)))  # returns: nmt-translate exits 0
    assert capsys.readouterr().out.splitlines() == translator.translate(SHORT[:1])


def test_ctrl_c_during_a_translation_returns_to_the_prompt(gru_ckpt, monkeypatch, capsys):
    translator = Translator.from_checkpoint(gru_ckpt, device="cpu")
    run = translator.run
    calls = []

    def interrupted_once(prepared):
        calls.append(prepared)
        if len(calls) == 1:
            raise KeyboardInterrupt  # as if Ctrl-C came in the middle of the search
        return run(prepared)

    monkeypatch.setattr(translator, "run", interrupted_once)
    type_into_repl(monkeypatch, [SHORT[0], SHORT[1]])
    repl(translator, TranslateRunConfig(str(gru_ckpt)))
    captured = capsys.readouterr()
    assert captured.out.splitlines() == translator.translate(SHORT[1:])
    assert "cancelled" in captured.err


def read_until(fd: int, marker: bytes, timeout: float = 60) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            pytest.fail(f"no {marker!r} within {timeout} s; got {seen!r}")
        try:
            seen += os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            pytest.fail(f"the terminal closed before {marker!r}; got {seen!r}")
    return seen


# slow = deselected by default: it passed in 3 s, then in some runs (after in-process training in
# the same pytest process) the master saw no output for 60 s while the child sat in poll(); not
# understood yet, and a flaky default test is worse than none. The fake-input tests above cover
# the logic; this one covers the real terminal (SIGINT from ^C, readline, EOF from ^D).
@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")
def test_the_prompt_on_a_real_terminal_survives_ctrl_c_and_quits_on_ctrl_d(gru_ckpt):
    """Keys typed into a pseudo-terminal: the line discipline turns ^C into SIGINT, ^D into EOF."""
    expected = Translator.from_checkpoint(gru_ckpt, DecodeConfig(), "cpu").translate(SHORT[1:])[0]
    master, slave = os.openpty()
    # the child makes the terminal its controlling one, so that ^C signals it as it would a user's
    become_tty = "import fcntl, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    proc = subprocess.Popen(
        [sys.executable, "-c", become_tty + TRANSLATE, f"ckpt={gru_ckpt}", *GREEDY_CPU],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    try:
        read_until(master, b"> ")
        os.write(master, b"Ich sehe zw\x03")  # Ctrl-C halfway through a line
        read_until(master, b"> ")
        os.write(master, SHORT[1].encode() + b"\r")
        assert expected.encode() in read_until(master, b"> ")
        os.write(master, b"\x04")  # Ctrl-D on an empty line
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
