"""Translating a file of any size: in chunks, with progress, resumable after a kill, and split over
the processes of a torchrun job, the output in input order and the same bytes whatever the number
of processes.

    nmt-translate ckpt=... input=big.de output=big.en      # killed? the same command goes on
    torchrun --standalone --nproc_per_node 2 --no-python nmt-translate ckpt=... input=big.de \\
        output=big.en

The unit of work is a chunk of `chunk_lines` input lines (the last may be shorter), translated in
one call (its sentences sorted by length, so batches stay full) and written to OUTPUT.parts/ as
one file, under a temporary name renamed when whole: a chunk's file is complete or absent. Chunk
k belongs to process k % N of N, so each chunk is translated the same way whoever translates it,
and a job may resume with another number of processes. OUTPUT.parts/job.json records what
decides the output: the input (its size and sha256), the models (their ckpt.pt files' sha256)
and the settings. The same command after a kill (SIGKILL included) finds it, keeps the chunks
done and redoes at most the one each process had under way; a changed input, model or setting is
refused by name, rather than mixing two jobs' outputs. Chunk files count only under a job.json
of the same job: without one (a cleanup cut short) they are removed, never read.

The start. Every process checks its own chunks' lines (`check`: a line that cannot be
translated fails before anything is written). Then rank 0 takes the job's lock (`fcntl.flock` on
OUTPUT.parts/.lock, held for the job's life and gone with the process, so a SIGKILL never leaves
it stuck): a second job on the same output, the same command run twice or a requeue while the
old job still runs, is refused by name. It records the job, and tells every rank, through a
process group made for that one word (`nmt.distributed.agree_once`), that the job may start or
why not, and a word naming this attempt.

The end. A process that has written its chunks writes a mark of this attempt. When every chunk
is done, rank 0 joins them in order into a temporary file, renames it to OUTPUT (which appears
complete or not at all), waits for every rank's mark (so no rank still reads or writes the parts,
and none, late, makes them again) and removes OUTPUT.parts. Memory stays what one chunk takes,
whatever the file's size.

The processes share the directory of OUTPUT: on several machines it must be on a file system
they all see (as the checkpoints of a multi-node training are); temporary names carry the host,
the process and a random part, and job.json and every rename are synced. Beyond the word at the
start, rank 0 waits for the others' chunks by looking at the directory, so no collective (and no
timeout of one) spans a translation of hours.

Warnings. The warnings a chunk's lines give (a line cut to max_src_pieces, one not translated)
are written beside it; rank 0 says those of every other process's chunks as they appear, so a
user who watches rank 0 sees every line's, on any number of machines.

Progress: rank 0 draws lines done (every process's), lines/s and the time left on standard error
(tqdm), never on standard output.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
from tqdm import tqdm

from nmt.device import resolve_device
from nmt.distributed import Dist, agree_once
from nmt.errors import NMTError

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
LOCK_FILE = ".lock"  # held by rank 0 of the job that writes OUTPUT (fcntl.flock)
WAIT_S = 1.0  # how often rank 0 looks for the other processes' chunks

# translate(lines, first_line) -> the output lines of those input lines (without newlines)
Translate = Callable[[list[str], int], list[str]]


def file_digest(path: Path) -> tuple[int, str, int]:
    """(lines, sha256, bytes) of a file, lines counted as nmt reads them: split at '\\n', a last
    line without one counted too."""
    sha, lines, size, last = hashlib.sha256(), 0, 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
            lines += block.count(b"\n")
            size += len(block)
            last = block[-1:]
    return lines + (last != b"\n"), sha.hexdigest(), size


def model_digests(paths: list[str]) -> list[str]:
    """The sha256 of each checkpoint's ckpt.pt (the weights: what a retrained model changes)."""
    out = []
    for path in paths:
        ckpt = Path(path)
        ckpt = ckpt if ckpt.is_file() else ckpt / "ckpt.pt"
        out.append(file_digest(ckpt)[1])
    return out


def show_progress(setting: str) -> bool:
    """progress=auto|true|false: auto draws the bar when standard error is a terminal."""
    if setting == "auto":
        return sys.stderr.isatty()
    return setting == "true"


def rank_device(name: str, where: Dist) -> str:
    """The device of this process of a torchrun job: its own GPU (cuda:LOCAL_RANK) for
    device=auto or cuda where there are GPUs, else `name`; on a CPU, the cores are shared
    among the machine's processes (torch threads: cores / processes, unless OMP_NUM_THREADS
    says)."""
    if not where.active:
        return name
    device = resolve_device(name, where.local_rank)
    if device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", where.world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    return str(device)


@dataclass
class FileJob:
    """One file's translation by this process, among `where.world` (see the module's notes)."""

    source: Path
    target: Path
    settings: dict  # what decides the output besides the input: models, settings (JSON values)
    chunk_lines: int
    where: Dist
    progress: bool = False
    # rank 0's word to every rank at the start: `nmt.distributed.agree` (a process group made
    # for it); a test's ranks in one process pass their own
    agree: Callable[[Any], Any] | None = None

    @property
    def parts(self) -> Path:
        return self.target.with_name(self.target.name + ".parts")

    def run(self, translate: Translate, check: Translate | None = None) -> None:
        """Translate this process's chunks that are not done; on rank 0, then wait for every
        chunk and join them into the output. `check(lines, first_line)`, when given, is called on
        each chunk before any of this process's chunks is translated (a line that cannot be
        translated fails before anything is written)."""
        if not self.source.is_file():
            raise NMTError(f"input={self.source}: no such file")
        lines, sha, size = file_digest(self.source)
        identity = {
            "input": {"bytes": size, "sha256": sha, "lines": lines}, **self.settings,
            "chunk_lines": self.chunk_lines,
        }  # fmt: skip
        chunks = -(-lines // self.chunk_lines)
        mine = [k for k in range(chunks) if k % self.where.world == self.where.rank]
        # chunk files count only under a job.json of this very job: without one they are the
        # leftovers of a job whose cleanup was cut short, and rank 0 removes them
        valid = self._recorded() == identity
        todo = [k for k in mine if not (valid and self._chunk(k).exists())]
        if check is not None:  # before the job is recorded: a bad line leaves nothing behind
            for k, chunk in self._read(todo):
                check(chunk, k * self.chunk_lines + 1)
        lock = None
        word: dict = {}
        if self.where.main:
            try:
                lock = self._claim(identity)
                word = {"attempt": secrets.token_hex(8)}
            except NMTError as err:  # said to every rank, which all stop with it
                word = {"error": str(err)}
        agree = self.agree or (lambda value: agree_once(value, self.where))
        word = agree(word)
        if "error" in word:
            raise NMTError(word["error"])
        if len(todo) < len(mine):
            log.info(
                "%s: resuming, %d of this process's %d chunks of %d lines are done",
                self.parts, len(mine) - len(todo), len(mine), self.chunk_lines,
            )  # fmt: skip
        bar = self._bar(lines, chunks)
        try:
            for k, chunk in self._read(todo):
                with _Warnings() as warned:
                    out = translate(chunk, k * self.chunk_lines + 1)
                self._write(k, out, warned.messages)
                self._show(bar, lines, chunks)
            _write_whole(self._mark(word["attempt"], self.where.rank), "")
            if self.where.main:
                told = set(range(chunks)) - set(todo) if valid else set()
                self._wait(chunks, bar, lines, told | set(todo))
                self._join(chunks)
                self._wait_for_ranks(word["attempt"])
                shutil.rmtree(self.parts, ignore_errors=True)
        finally:
            if bar is not None:
                bar.close()
            if lock is not None:
                lock.close()

    # --- the job's identity and its lock --------------------------------------------------------

    def _recorded(self) -> dict | None:
        """The job OUTPUT.parts/job.json records (None: no record, or a damaged one)."""
        try:
            return json.loads((self.parts / JOB_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _claim(self, identity: dict) -> IO:
        """Rank 0: take the job's lock, then record the job in OUTPUT.parts/job.json or check
        that the one recorded there is this one (a resume). An NMTError names another job that
        holds the lock, or the first thing that differs. Returns the open lock file: the lock
        lasts as long as this process holds it, and dies with it (a SIGKILL leaves none)."""
        self.parts.mkdir(parents=True, exist_ok=True)
        lock = open(self.parts / LOCK_FILE, "a")  # noqa: SIM115 - held for the job's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise NMTError(
                f"another nmt-translate is writing {self.target} ({self.parts / LOCK_FILE} is "
                "locked): wait for it to end, or stop it, then give the command again"
            ) from None
        try:
            recorded = self._recorded()
            if recorded is None:
                self._clear()
                _write_whole(self.parts / JOB_FILE, json.dumps(identity, indent=1, sort_keys=True))
                return lock
            differs = _first_difference(recorded, identity)
            if differs is not None:
                key, was, now = differs
                raise NMTError(
                    f"{self.parts} holds an unfinished translation with another {key} ({was!r} "
                    f"there, {now!r} now): give the same command to finish it, or remove "
                    f"{self.parts} to start over"
                )
        except BaseException:
            lock.close()
            raise
        return lock

    def _clear(self) -> None:
        """Remove what a job without a record left: chunks, their warnings, marks, temporaries."""
        for path in self.parts.iterdir():
            if path.name != LOCK_FILE and path.is_file():
                path.unlink(missing_ok=True)

    def _mark(self, attempt: str, rank: int) -> Path:
        """The file rank `rank` writes when it is done with this attempt's chunks."""
        return self.parts / f".done-{attempt}-{rank}"

    def _wait_for_ranks(self, attempt: str) -> None:
        """Rank 0, before it removes the parts: until every rank of this attempt has said it is
        done, so that no rank still reads or writes there (and none, late, makes them again)."""
        while not all(self._mark(attempt, r).exists() for r in range(self.where.world)):
            time.sleep(WAIT_S / 10)

    # --- chunks ----------------------------------------------------------------------------------

    def _chunk(self, k: int) -> Path:
        return self.parts / f"chunk-{k:09d}.txt"

    def _read(self, wanted: list[int]) -> Iterator[tuple[int, list[str]]]:
        """(k, lines) of the chunks `wanted` (ascending), the file read once and split as nmt
        reads lines (at '\n'; bad UTF-8 replaced), one chunk in memory at a time."""
        if not wanted:
            return
        wanted_set, n, last = set(wanted), self.chunk_lines, max(wanted)
        with open(self.source, encoding="utf-8", errors="replace", newline="\n") as f:
            chunk: list[str] = []
            k = 0
            for i, line in enumerate(f):
                k = i // n
                if k > last:
                    break
                if k in wanted_set:
                    chunk.append(line.rstrip("\n"))
                    if len(chunk) == n:
                        yield k, chunk
                        chunk = []
            if chunk:
                yield k, chunk

    def _write(self, k: int, lines: list[str], warnings: list[str]) -> None:
        """Chunk k's output, whole or not at all, and before it the warnings its lines gave (for
        rank 0 to say, whichever rank translated it)."""
        path = self._chunk(k)
        if warnings:
            _write_whole(path.with_suffix(".warnings"), "".join(w + "\n" for w in warnings))
        _write_whole(path, "".join(line + "\n" for line in lines))

    def _done(self) -> list[int]:
        """The chunks (of every process) that are done."""
        names = (p.name for p in self.parts.iterdir())
        return [
            int(name[6:15]) for name in names if name.startswith("chunk-") and name[15:] == ".txt"
        ]

    def _wait(self, chunks: int, bar: tqdm | None, lines: int, told: set[int]) -> None:
        """Until every process's chunks are done (rank 0, after its own), saying the warnings
        of each chunk another process did as it appears (`told`: chunks whose warnings need no
        saying: rank 0's own, and those done before this attempt)."""
        waited = 0.0
        while True:
            done = self._done()
            for k in sorted(set(done) - told):
                told.add(k)
                notes = self._chunk(k).with_suffix(".warnings")
                if notes.exists():
                    for message in notes.read_text(encoding="utf-8").splitlines():
                        log.warning("%s", message)
            if len(done) >= chunks:
                return
            if waited >= 60 and waited % 600 < WAIT_S:  # a word every 10 minutes
                log.info("waiting for %d chunks of the other processes", chunks - len(done))
            time.sleep(WAIT_S)
            waited += WAIT_S
            self._show(bar, lines, chunks)

    def _join(self, chunks: int) -> None:
        """The chunks in order into the output, which appears complete or not at all."""
        tmp = _temporary(self.target)
        with open(tmp, "wb") as out:
            for k in range(chunks):
                with open(self._chunk(k), "rb") as part:
                    shutil.copyfileobj(part, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.target)
        _sync_directory(self.target.parent)

    # --- progress --------------------------------------------------------------------------------

    def _bar(self, lines: int, chunks: int) -> tqdm | None:
        """Rank 0's progress bar, from the lines already done (its rate counts from now)."""
        if not (self.progress and self.where.main):
            return None
        done = self._lines_done(lines)
        return tqdm(
            total=lines, initial=done, unit=" lines", file=sys.stderr, dynamic_ncols=True,
            desc=self.target.name, smoothing=0.1,
        )  # fmt: skip

    def _lines_done(self, lines: int) -> int:
        n = self.chunk_lines
        return sum(min(n, lines - k * n) for k in self._done())

    def _show(self, bar: tqdm | None, lines: int, chunks: int) -> None:
        """Bring the bar to the lines of every chunk done so far."""
        if bar is not None:
            bar.update(self._lines_done(lines) - bar.n)


class _Warnings(logging.Handler):
    """The warnings nmt logs while a block runs (a chunk's translation), as their messages:
    only this thread's, since a handler on the "nmt" logger hears every thread of the process
    (another job's chunk in a library caller, the ranks of a test)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread:
            self.messages.append(record.getMessage())

    def __enter__(self) -> _Warnings:
        logging.getLogger("nmt").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("nmt").removeHandler(self)


def _temporary(path: Path) -> Path:
    """A name beside `path` that no other process, on this machine or another that shares the
    directory, picks: the host, the process and a random part."""
    return path.with_name(
        f".{path.name}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}"
    )


def _write_whole(path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all: written and synced under a temporary name, then
    renamed, and the directory synced (the rename survives a crash of the machine)."""
    tmp = _temporary(path)
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_directory(path.parent)


def _sync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _first_difference(was: dict, now: dict, prefix: str = "") -> tuple[str, object, object] | None:
    """The first key (dotted) whose value differs between two JSON objects, with both values."""
    for key in sorted(set(was) | set(now)):
        a, b = was.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _first_difference(a, b, f"{prefix}{key}.")
            if found is not None:
                return found
        elif a != b:
            return f"{prefix}{key}", a, b
    return None
