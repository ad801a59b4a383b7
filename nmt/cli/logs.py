"""Where the library's log records go when nmt runs as a command.

Library code logs through `logging.getLogger(__name__)` and never configures anything, so a program
that imports nmt decides what it sees (records propagate to the root logger as usual). A command
adds one handler to the "nmt" logger for as long as it runs: `nmt-train: message` for information,
`nmt-train: warning: message` for warnings, on standard error, and under torchrun from rank 0 only,
so that N processes print one copy of each line. Progress bars stay tqdm's (`nmt.training.trainer`
routes records around its bar while it is drawn).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator


class RankZero(logging.Filter):
    """Pass records of the process torchrun numbered 0 (or of a process outside torchrun)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return os.environ.get("RANK", "0") == "0"


class CommandFormatter(logging.Formatter):
    """`prog: message`, `prog: warning: message`; a traceback (exc_info) follows its line."""

    def __init__(self, prog: str) -> None:
        super().__init__()
        self.prog = prog

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        text = f"{self.prog}: {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever sys.stderr is when a record comes (a test may have
    replaced it since the handler was made)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # noqa: ANN201 - logging's own attribute
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ and setStream assign it
        pass


@contextlib.contextmanager
def command_logging(prog: str, level: int = logging.INFO) -> Iterator[None]:
    """The "nmt" logger prints to stderr as `prog` while the block runs, then is as it was."""
    logger = logging.getLogger("nmt")
    handler = _Stderr()
    handler.setFormatter(CommandFormatter(prog))
    handler.addFilter(RankZero())
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
