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
refused by name, rather than mixing two jobs' outputs. When every chunk is done, the process of
rank 0 joins them in order into a temporary file, renames it to OUTPUT (which appears complete or
not at all) and removes OUTPUT.parts. Memory stays what one chunk takes, whatever the file's size.

The processes share nothing but the directory of OUTPUT: on several machines it must be on a
file system they all see (as the checkpoints of a multi-node training are). Rank 0 waits for the
others' chunks by looking at the directory, so no process group (and no timeout of one) spans a
translation of hours.

Progress: rank 0 draws lines done (every process's), lines/s and the time left on standard error
(tqdm), never on standard output.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from nmt.device import resolve_device
from nmt.distributed import Dist
from nmt.errors import NMTError

log = logging.getLogger(__name__)

JOB_FILE = "job.json"
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
        chunks = -(-lines // self.chunk_lines)
        mine = [k for k in range(chunks) if k % self.where.world == self.where.rank]
        todo = [k for k in mine if not self._chunk(k).exists()]
        if check is not None:  # before the job is recorded: a bad line leaves nothing behind
            for k, chunk in self._read(todo):
                check(chunk, k * self.chunk_lines + 1)
        self._claim({"input": {"bytes": size, "sha256": sha, "lines": lines}, **self.settings})
        if len(todo) < len(mine):
            log.info(
                "%s: resuming, %d of this process's %d chunks of %d lines are done",
                self.parts, len(mine) - len(todo), len(mine), self.chunk_lines,
            )  # fmt: skip
        bar = self._bar(lines, chunks)
        try:
            for k, chunk in self._read(todo):
                self._write(k, translate(chunk, k * self.chunk_lines + 1))
                self._show(bar, lines, chunks)
            if self.where.main:
                self._wait(chunks, bar, lines)
                self._join(chunks)
        finally:
            if bar is not None:
                bar.close()

    # --- the job's identity --------------------------------------------------------------------

    def _claim(self, identity: dict) -> None:
        """Record the job in OUTPUT.parts/job.json, or check that the one recorded there is
        this one (a resume): an NMTError names the first thing that differs."""
        self.parts.mkdir(parents=True, exist_ok=True)
        path = self.parts / JOB_FILE
        text = json.dumps({**identity, "chunk_lines": self.chunk_lines}, indent=1, sort_keys=True)
        tmp = self.parts / f".{JOB_FILE}.{os.getpid()}"
        tmp.write_text(text + "\n", encoding="utf-8")
        try:
            os.link(tmp, path)  # created whole, and only if absent (the processes race to it)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        recorded = json.loads(path.read_text(encoding="utf-8"))
        differs = _first_difference(recorded, json.loads(text))
        if differs is not None:
            key, was, now = differs
            raise NMTError(
                f"{self.parts} holds an unfinished translation with another {key} ({was!r} "
                f"there, {now!r} now): give the same command to finish it, or remove "
                f"{self.parts} to start over"
            )

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

    def _write(self, k: int, lines: list[str]) -> None:
        """Chunk k's output, whole or not at all: written and synced under a temporary name,
        then renamed."""
        path = self._chunk(k)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _done(self) -> list[int]:
        """The chunks (of every process) that are done."""
        names = (p.name for p in self.parts.iterdir())
        return [int(name[6:15]) for name in names if name.startswith("chunk-")]

    def _wait(self, chunks: int, bar: tqdm | None, lines: int) -> None:
        """Until every process's chunks are done (rank 0, after its own)."""
        waited = 0.0
        while (done := len(self._done())) < chunks:
            if waited >= 60 and waited % 600 < WAIT_S:  # a word every 10 minutes
                log.info("waiting for %d chunks of the other processes", chunks - done)
            time.sleep(WAIT_S)
            waited += WAIT_S
            self._show(bar, lines, chunks)

    def _join(self, chunks: int) -> None:
        """The chunks in order into the output, which appears complete or not at all; then the
        parts go."""
        tmp = self.target.with_name(f".{self.target.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as out:
            for k in range(chunks):
                with open(self._chunk(k), "rb") as part:
                    shutil.copyfileobj(part, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.target)
        shutil.rmtree(self.parts, ignore_errors=True)

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
