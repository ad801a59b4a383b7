"""Translating files at scale (nmt/cli/file_job.py): chunks written whole, a resume after a kill
that redoes nothing done, the same bytes for 1, 2 and 3 processes (in-process ranks, and real
torchrun processes of nmt-translate and nmt-evaluate), a changed input, model or setting refused
by name, progress on a terminal and none in a pipe, memory bounded by a chunk."""

from __future__ import annotations

import fcntl
import logging
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.cli.file_job import FileJob, file_digest
from nmt.distributed import Dist
from nmt.errors import NMTError

BIN = Path(sys.executable).parent
LINES = ["Ein Hund läuft.", "", "Zwei Männer  sitzen.\r", "\ufeffEine Frau\tliest.", "x" * 50]


def write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


def upper(lines: list[str], first: int) -> list[str]:
    """A stand-in translation: each line numbered and upper-cased, one output line each."""
    return [f"{first + i}:{line.upper()}" for i, line in enumerate(lines)]


def job(tmp_path: Path, source: Path, rank: int = 0, world: int = 1, agree=None, **settings):
    where = Dist(rank, world)
    return FileJob(source, tmp_path / "out.txt", {"model": "m", **settings}, 4, where, agree=agree)


class Meeting:
    """What `nmt.distributed.agree_once` does for ranks in one process: each waits for all, and
    every rank gets rank 0's word."""

    def __init__(self, world: int) -> None:
        self.barrier = threading.Barrier(world, timeout=60)
        self.word = None

    def agree(self, rank: int):
        def agree(word):
            if rank == 0:
                self.word = word
            self.barrier.wait()
            return self.word

        return agree


def run_ranks(tmp_path: Path, source: Path, world: int, translate=None, delays=None, **settings):
    """Every rank of a `world`-process job at once, each in a thread (rank r after delays[r]
    seconds); the exceptions they raised, by rank."""
    meeting, errors = Meeting(world), {}

    def rank(r: int) -> None:
        time.sleep((delays or {}).get(r, 0))
        try:
            job(tmp_path, source, r, world, meeting.agree(r), **settings).run(translate or upper)
        except BaseException as err:  # noqa: BLE001 - returned to the test
            errors[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


# --- the job, with a stand-in translation ---------------------------------------------------------


def test_the_output_is_every_line_in_order_and_the_parts_go(tmp_path):
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(10)], end="")
    job(tmp_path, source).run(upper)
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert out == [f"{i + 1}:LINE {i}" for i in range(10)]  # 3 chunks: 4, 4 and 2 lines
    assert not (tmp_path / "out.txt.parts").exists()
    assert file_digest(source)[0] == 10  # a last line without '\n' counts
    empty = write(tmp_path / "empty.txt", [], end="")
    job(tmp_path, empty).run(upper)
    assert (tmp_path / "out.txt").read_bytes() == b""


@pytest.mark.parametrize("world", [2, 3])
def test_any_number_of_processes_gives_the_same_bytes(tmp_path, world):
    """Ranks run at once (threads meeting as torchrun's processes do): the chunks fall to them
    by k % world, and the output is one process's, byte for byte, the parts gone."""
    source = write(tmp_path / "in.txt", [f"{i} {LINES[i % 5]}" for i in range(23)])
    job(tmp_path, source).run(upper)
    alone = (tmp_path / "out.txt").read_bytes()
    (tmp_path / "out.txt").unlink()
    by: dict[int, int] = {}

    def noted(lines, first):
        by[first] = threading.current_thread().ident
        return upper(lines, first)

    assert run_ranks(tmp_path, source, world, noted) == {}
    assert (tmp_path / "out.txt").read_bytes() == alone
    assert not (tmp_path / "out.txt.parts").exists()
    assert len(set(by.values())) == world  # each rank did its own share


def test_a_rank_that_comes_late_finds_the_job_whole_and_makes_no_parts(tmp_path):
    """Every chunk of rank 1 done before a kill; the same job again with rank 1 late: rank 0
    waits for it before it removes the parts, so rank 1 never makes them again (and translates
    nothing twice)."""
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(16)])
    job(tmp_path, source).run(upper)
    want = (tmp_path / "out.txt").read_bytes()
    (tmp_path / "out.txt").unlink()

    def only_odd_chunks(lines, first):
        if (first - 1) // 4 % 2 == 0:
            raise KeyboardInterrupt  # rank 0 killed at its first chunk
        return upper(lines, first)

    errors = run_ranks(tmp_path, source, 2, only_odd_chunks)
    assert isinstance(errors.get(0), KeyboardInterrupt) and 1 not in errors
    again: list[int] = []
    errors = run_ranks(
        tmp_path, source, 2, lambda lines, first: again.append(first) or upper(lines, first),
        delays={1: 1.0},
    )  # fmt: skip
    assert errors == {} and again == [1, 9]  # rank 0's two chunks, nothing of rank 1's
    assert (tmp_path / "out.txt").read_bytes() == want
    assert not (tmp_path / "out.txt.parts").exists()


def test_chunks_without_their_job_json_are_never_read(tmp_path):
    """A cleanup cut short after job.json went: the next job (another input) translates
    everything, whatever chunk files lie there."""
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(8)])
    parts = tmp_path / "out.txt.parts"
    parts.mkdir()
    (parts / "chunk-000000000.txt").write_text("stale\n" * 4, encoding="utf-8")
    (parts / "chunk-000000001.warnings").write_text("line 5: stale\n", encoding="utf-8")
    seen: list[int] = []
    job(tmp_path, source).run(lambda lines, first: seen.append(first) or upper(lines, first))
    assert seen == [1, 5]
    assert "stale" not in (tmp_path / "out.txt").read_text(encoding="utf-8")


def test_a_second_job_on_an_output_being_written_is_refused_by_name(tmp_path):
    """While a job holds OUTPUT.parts/.lock, the same command is refused, naming the output;
    the first then ends as if alone. The lock is the process's: gone when it ends."""
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(8)])
    refused = []

    def second_job_meanwhile(lines, first):
        if first == 1:
            with pytest.raises(NMTError) as err:
                job(tmp_path, source).run(upper)
            refused.append(str(err.value))
        return upper(lines, first)

    job(tmp_path, source).run(second_job_meanwhile)
    assert refused and f"another nmt-translate is writing {tmp_path / 'out.txt'}" in refused[0]
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 8
    job(tmp_path, source).run(upper)  # the lock went with the job


def test_every_ranks_warnings_are_said_by_rank_0(tmp_path, caplog):
    """A warning logged while rank 1 translates its chunk is said again by rank 0, which the
    user watches (ranks other than 0 print none). The ranks warn at the same moment, so a rank
    that also heard the other thread's warning would say it twice."""
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(8)])
    warner = logging.getLogger("nmt.test")
    together = threading.Barrier(2, timeout=30)

    def warns(lines, first):
        together.wait()  # both ranks inside their chunk: each one's handler is listening
        warner.warning("line %d is odd", first)
        together.wait()
        return upper(lines, first)

    with caplog.at_level("WARNING"):
        assert run_ranks(tmp_path, source, 2, warns) == {}
    said = [r.getMessage() for r in caplog.records if r.name == "nmt.cli.file_job"]
    assert said == ["line 5 is odd"]  # rank 1's chunk (lines 5-8); rank 0's own went live


def test_a_killed_job_goes_on_from_the_chunks_done(tmp_path, caplog):
    source = write(tmp_path / "in.txt", [f"{i} {LINES[i % 5]}" for i in range(30)])
    job(tmp_path, source).run(upper)
    want = (tmp_path / "out.txt").read_bytes()
    (tmp_path / "out.txt").unlink()
    calls: list[int] = []

    def dies_at_the_third(lines, first):
        calls.append(first)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as if killed in the middle of the third chunk
        return upper(lines, first)

    with pytest.raises(KeyboardInterrupt):
        job(tmp_path, source).run(dies_at_the_third)
    parts = tmp_path / "out.txt.parts"
    assert sorted(p.name for p in parts.iterdir() if not p.name.startswith(".")) == [
        "chunk-000000000.txt", "chunk-000000001.txt", "job.json"
    ]  # fmt: skip
    assert not (tmp_path / "out.txt").exists()  # complete or not at all
    again: list[int] = []
    with caplog.at_level("INFO", logger="nmt.cli.file_job"):
        job(tmp_path, source).run(lambda lines, first: again.append(first) or upper(lines, first))
    assert again == [9, 13, 17, 21, 25, 29]  # every chunk but the two done: one chunk redone
    assert "resuming, 2 of this process's 8 chunks of 4 lines are done" in caplog.text
    assert (tmp_path / "out.txt").read_bytes() == want


def test_a_chunk_file_is_whole_or_absent(tmp_path, monkeypatch):
    """A kill while a chunk is written leaves its temporary file, never a chunk file."""
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(8)])

    real = os.replace

    def killed(src, dst):
        if Path(dst).name.startswith("chunk-"):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        job(tmp_path, source).run(upper)
    names = [p.name for p in (tmp_path / "out.txt.parts").iterdir()]
    assert not [n for n in names if n.startswith("chunk-")]
    assert [n for n in names if n.startswith(".chunk-000000000.txt.")]  # host, pid, random
    monkeypatch.undo()
    job(tmp_path, source).run(upper)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 8


def test_another_input_model_or_setting_is_refused_by_name(tmp_path):
    source = write(tmp_path / "in.txt", [f"line {i}" for i in range(12)])

    def stop(lines, first):
        if first > 1:
            raise KeyboardInterrupt
        return upper(lines, first)

    with pytest.raises(KeyboardInterrupt):
        job(tmp_path, source, beam=5).run(stop)
    with pytest.raises(NMTError, match=r"another beam \(5 there, 4 now\).*remove .*out.txt.parts"):
        job(tmp_path, source, beam=4).run(upper)
    with pytest.raises(NMTError, match=r"another model \('m' there, 'other' now\)"):
        FileJob(source, tmp_path / "out.txt", {"model": "other", "beam": 5}, 4, Dist()).run(upper)
    write(source, [f"line {i}" for i in range(13)])
    with pytest.raises(NMTError, match=r"another input.bytes"):
        job(tmp_path, source, beam=5).run(upper)
    assert not (tmp_path / "out.txt").exists()


def test_memory_stays_what_a_chunk_takes(tmp_path):
    """The peak memory of a job over 2,000,000 lines is within 8 MB of one over 20,000 (each
    process reads its input a chunk at a time; nothing grows with the file)."""
    script = (
        "import resource, sys; from pathlib import Path; from nmt.cli.file_job import FileJob; "
        "from nmt.distributed import Dist; "
        "FileJob(Path(sys.argv[1]), Path(sys.argv[2]), {}, 1000, Dist()).run("
        "lambda lines, first: [line[::-1] for line in lines]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    peaks = {}
    for lines in (20_000, 2_000_000):
        source = tmp_path / f"in{lines}.txt"
        with open(source, "w", encoding="utf-8") as f:
            for i in range(lines):
                f.write(f"Ein Hund läuft über die Wiese, Zeile {i}.\n")
        done = subprocess.run([sys.executable, "-c", script, str(source), str(tmp_path / "o")],
                              capture_output=True, text=True, check=True)  # fmt: skip
        peaks[lines] = int(done.stdout) / 1024  # MB (Linux reports KB)
        assert file_digest(tmp_path / "o")[0] == lines
    assert peaks[2_000_000] - peaks[20_000] < 8, peaks


# --- nmt-translate and nmt-evaluate on a trained model ------------------------------------------


@pytest.fixture(scope="module")
def ckpt(train_small) -> Path:
    return train_small("gru")


@pytest.fixture(scope="module")
def source(demo_dir, tmp_path_factory) -> Path:
    lines = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:90]
    return write(tmp_path_factory.mktemp("src") / "in.de", [*lines[:40], *LINES, *lines[40:]])


def translate_args(ckpt: Path, source: Path, out: Path, *extra: str) -> list[str]:
    return [f"ckpt={ckpt}", f"input={source}", f"output={out}", "device=cpu", "chunk_lines=16",
            "progress=false", *extra]  # fmt: skip


def test_a_file_is_translated_as_the_stream_is(ckpt, source, tmp_path, monkeypatch):
    """input=FILE output=FILE (a file job) writes the bytes that the same lines through a pipe
    give, n-best rows included."""
    for extra in ([], ["decode.n_best=3", "nbest_tsv=true"]):
        out = tmp_path / "file.txt"
        assert cli.translate(translate_args(ckpt, source, out, *extra)) == 0
        with open(source, "rb") as stdin:
            piped = subprocess.run(
                [str(BIN / "nmt-translate"), f"ckpt={ckpt}", "device=cpu", *extra],
                stdin=stdin, capture_output=True, check=True,
            )  # fmt: skip
        assert out.read_bytes() == piped.stdout
        assert out.read_text(encoding="utf-8").count("\n") >= 95


def torchrun(procs: int, command: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
         str(procs), "--no-python", str(BIN / command), *args],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("procs", [2, 3])
def test_torchrun_processes_write_one_processs_bytes(ckpt, source, tmp_path, procs):
    alone = tmp_path / "alone.en"
    assert cli.translate(translate_args(ckpt, source, alone)) == 0
    out = tmp_path / f"ranks{procs}.en"
    done = torchrun(procs, "nmt-translate", *translate_args(ckpt, source, out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_bytes() == alone.read_bytes()
    assert not Path(f"{out}.parts").exists()


def test_nmt_evaluate_under_torchrun_scores_once_what_one_process_scores(ckpt, demo_dir, tmp_path):
    args = [f"ckpt={ckpt}", "split=test", "device=cpu", "chunk_lines=32", "progress=false"]
    assert cli.evaluate([*args, f"out_dir={tmp_path / 'one'}"]) == 0
    done = torchrun(2, "nmt-evaluate", *args, f"out_dir={tmp_path / 'two'}")
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("test.hyp", "test.src"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    assert done.stdout.count("BLEU") == 1  # rank 0 alone scores and prints


@pytest.mark.parametrize("after", [1, 3])
def test_sigkill_then_the_same_command_gives_the_same_bytes(ckpt, source, tmp_path, after):
    """nmt-translate killed with SIGKILL once `after` chunks are done: the same command keeps
    them and writes what an uninterrupted run writes."""
    whole = tmp_path / "whole.en"
    assert cli.translate(translate_args(ckpt, source, whole, "decode.beam_size=3")) == 0
    out = tmp_path / "killed.en"
    args = translate_args(ckpt, source, out, "decode.beam_size=3", "chunk_lines=4")
    run = subprocess.Popen([str(BIN / "nmt-translate"), *args], stderr=subprocess.DEVNULL)
    parts = Path(f"{out}.parts")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        if parts.is_dir() and sum(p.name.startswith("chunk-") for p in parts.iterdir()) >= after:
            break
        time.sleep(0.01)
    run.send_signal(signal.SIGKILL)
    run.wait()
    kept = sum(p.name.startswith("chunk-") for p in parts.iterdir())
    assert kept >= after and not out.exists()
    again = subprocess.run([str(BIN / "nmt-translate"), *args], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert f"resuming, {kept} of this process's" in again.stderr
    assert out.read_bytes() == whole.read_bytes()


def test_progress_is_drawn_on_a_terminal_and_not_in_a_pipe(ckpt, source, tmp_path):
    args = translate_args(ckpt, source, tmp_path / "o.en")[:-1] + ["progress=auto"]
    piped = subprocess.run([str(BIN / "nmt-translate"), *args], capture_output=True, text=True)
    assert piped.returncode == 0 and "lines/s" not in piped.stderr and not piped.stdout
    (tmp_path / "o.en").unlink()
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    run = subprocess.Popen([str(BIN / "nmt-translate"), *args], stderr=follower)
    os.close(follower)
    seen = b""
    while True:
        try:
            block = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not block:
            break
        seen += block
    assert run.wait() == 0
    text = seen.decode("utf-8", "replace")
    assert "o.en" in text and re.search(r"\d+/\d+ \[", text), text[-500:]
    assert re.search(r"lines/s", text), text[-500:]
