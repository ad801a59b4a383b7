"""Stop training cleanly when asked to: SIGTERM (what SLURM and Kubernetes send some time before
they kill a job) and SIGINT (Ctrl-C) set a flag that the training loop reads after each update; it
then writes a checkpoint and returns, so the run resumes exactly where it stopped.

The first signal asks; a second one of the same kind acts as it would without us (Ctrl-C raises
KeyboardInterrupt, SIGTERM terminates), which is safe because checkpoint saves are atomic.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    """Context manager that turns SIGTERM/SIGINT into `self.signal` (the signal's name, or None
    while none arrived). Handlers can only be installed from the main thread; elsewhere (a
    library user's worker thread) it does nothing and signals keep their usual effect."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal = signal.Signals(signum).name
        self._restore()  # a second signal takes the default way out
        log.warning(
            "%s received: finishing this update, then saving a checkpoint (send it again to stop "
            "at once)",
            self.signal,
        )
