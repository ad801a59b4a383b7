"""What nmt derives from a corpus once and keeps for later runs: its tokenizer and its tokenized
training split (`nmt.data.tokenized`), each in a directory named by a digest of everything it was
made from, so that a changed file, setting or encoding code is never read from a stale entry.

The cache lives in `data.cache_dir`, by default `$XDG_CACHE_HOME/nmt` (`~/.cache/nmt`), as
Hugging Face's own cache does. An entry is built in a temporary directory beside its final name
and renamed into place when complete: a run killed while building leaves only a temporary
directory, which nothing reads and a later build removes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import marshal
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

CHUNK = 1 << 20  # bytes read at a time while hashing a file


def cache_root(configured: str | None) -> Path:
    """`data.cache_dir`, or the user's cache directory."""
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt"


def digest(*parts: object) -> str:
    """A short hex digest of JSON-serialisable parts (settings, other digests, versions)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def file_digest(paths: list[Path]) -> str:
    """The sha256 of the files' contents, in order (names and dates do not matter)."""
    sha = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                sha.update(block)
        sha.update(b"\0")  # two files are not their concatenation
    return sha.hexdigest()[:32]


@functools.cache
def code_digest(parts: tuple[object, ...]) -> str:
    """A digest of the source of `parts` (functions, compiled patterns): what a key holds in
    place of a hand-bumped version number, so that an edit to the code that decides an entry's
    content makes another entry. Computed once per tuple; the cache is keyed by the objects
    themselves, not by a name or a path, so another function is another digest."""
    return digest(*(_source(part) for part in parts))


def _source(part: object) -> str:
    if isinstance(part, re.Pattern):  # a module constant a function reads (its source is a name)
        return f"{part.pattern!r} {int(part.flags)}"
    try:
        return inspect.getsource(part)  # type: ignore[arg-type]
    except (OSError, TypeError):
        code = getattr(part, "__code__", None)
        if code is None:
            raise
        # no source file (a compiled-only install): the bytecode, which also changes when only
        # line numbers move (a needless rebuild, never a stale entry)
        return marshal.dumps(code).hex()


@contextlib.contextmanager
def building(final: Path) -> Iterator[Path]:
    """A fresh temporary directory beside `final`, renamed to `final` when the block ends without
    an exception and removed when it raises. If another process published `final` meanwhile, its
    entry is kept and this one dropped (both were made from the same inputs)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned(final)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _remove_abandoned(final: Path) -> None:
    """Temporary directories beside `final` left by processes that no longer run (killed)."""
    for tmp in final.parent.glob(".*.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def copy_files(src_dir: Path, dst_dir: Path) -> None:
    """Copy the files of a cache entry into a run directory."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    for path in src_dir.iterdir():
        if path.is_file():
            shutil.copy2(path, dst_dir / path.name)
