"""API keys and what each may use: who may translate, how much, how often.

    keys = Keys.read("keys.txt")          # or Keys.open(): no keys, every request accepted
    use = keys.admit(key, chars)          # KeyRefused, or the key's use after this request
    keys.usage(key)                       # (characters used this period, the key's quota)

The file holds a key a line, each optionally with its limits (`#` starts a comment):

    s3cret-team-a                                   no limit
    s3cret-team-b  characters=500000                at most 500,000 characters a period
    s3cret-demo    characters=20000  requests=30    ... and 30 requests a minute

as LibreTranslate's per-key limits and DeepL's character quota. With keys, every translating
endpoint of every API shape needs one that is listed; without (no `api_keys` file), any key is
accepted and none is needed, as a LibreTranslate server without --api-keys. A period is
`period_days` long and starts when the server does; the counters live in the server's memory
(a restart starts a new period). Each shape reads the key where its clients send it and answers
a refusal with its own status (`KeyRefused.reason`: LibreTranslate 403 / 429, DeepL 403 / 429 /
456, nmt's own 403 / 429).
"""

from __future__ import annotations

import dataclasses
import hmac
import threading
import time
from collections import deque
from pathlib import Path

from nmt.errors import NMTError

LIMITS = ("characters", "requests")  # the limits a key's line may set
ANONYMOUS = ""  # the account of every request on a server without keys
RATE_WINDOW_S = 60.0  # `requests=N`: at most N requests in any window this long


class KeyRefused(Exception):
    """A request its key does not allow: `reason` is "missing" or "invalid" (no such key:
    forbidden), "rate" (too many requests this minute) or "quota" (its characters this
    period are spent)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Limits:
    """A key's limits; None: no limit."""

    characters: int | None = None  # characters translated per period
    requests: int | None = None  # requests per minute


@dataclasses.dataclass
class _Use:
    characters: int = 0
    period: int = 0  # the period its characters count in
    times: deque = dataclasses.field(default_factory=deque)  # its recent requests' times


class Keys:
    """The server's keys and their counters (see the module's notes). Thread-safe: shapes admit
    requests from the event loop, tests and scripts from anywhere."""

    def __init__(
        self, limits: dict[str, Limits] | None = None, period_days: float = 30.0, clock=time.time
    ) -> None:
        self.limits = limits  # None: keys are neither needed nor checked
        self.period_s = period_days * 86400.0
        self._clock = clock
        self._start = clock()
        self._uses: dict[str, _Use] = {}
        self._lock = threading.Lock()

    @classmethod
    def read(cls, path: str | Path | None, period_days: float = 30.0) -> Keys:
        """The keys of the file at `path` (see the module's notes); None: no keys."""
        if path is None:
            return cls(None, period_days)
        return cls(read_key_file(Path(path)), period_days)

    @property
    def required(self) -> bool:
        return self.limits is not None

    def account(self, key: str | None) -> str:
        """Whose counters (and DeepL glossaries) a request with `key` uses: the key, when the
        server has keys (a missing or unknown one is `KeyRefused`); else everyone's, ANONYMOUS,
        whatever key a client sends (so that no client grows the server's memory by sending a
        new key with each request)."""
        if self.limits is None:
            return ANONYMOUS
        if not key:
            raise KeyRefused("missing", "this server needs an API key")
        self._limits_of(key)
        return key

    def admit(self, key: str | None, chars: int) -> None:
        """Count a request of `chars` characters against `key`'s account, or refuse it
        (`KeyRefused`) without counting it."""
        key = self.account(key)
        limits = Limits() if self.limits is None else self._limits_of(key)
        now = self._clock()
        with self._lock:
            use = self._uses.setdefault(key, _Use())
            period = int((now - self._start) // self.period_s)
            if use.period != period:
                use.characters, use.period = 0, period
            while use.times and use.times[0] <= now - RATE_WINDOW_S:
                use.times.popleft()
            if limits.requests is not None and len(use.times) >= limits.requests:
                raise KeyRefused(
                    "rate", f"too many requests: this key may make {limits.requests} a minute"
                )
            if limits.characters is not None and use.characters + chars > limits.characters:
                left = limits.characters - use.characters
                raise KeyRefused(
                    "quota", f"{chars} characters, and this key has {left} of its "
                    f"{limits.characters} left this period",
                )  # fmt: skip
            use.characters += chars
            use.times.append(now)

    def usage(self, key: str | None) -> tuple[int, int | None]:
        """(characters `key` used this period, its quota or None), as /v2/usage reports them;
        a refused key is a `KeyRefused`."""
        key = self.account(key)
        quota = None if self.limits is None else self._limits_of(key).characters
        with self._lock:
            use = self._uses.get(key)
            period = int((self._clock() - self._start) // self.period_s)
            used = use.characters if use is not None and use.period == period else 0
        return used, quota

    def _limits_of(self, key: str) -> Limits:
        assert self.limits is not None
        for known, limits in self.limits.items():
            # compared in constant time: how long a refusal takes says nothing of the keys
            if hmac.compare_digest(known.encode(), key.encode()):
                return limits
        raise KeyRefused("invalid", "invalid API key")


def read_key_file(path: Path) -> dict[str, Limits]:
    """The keys of an `api_keys` file and their limits; a line it cannot read is an NMTError
    naming its number, before the server starts."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise NMTError(f"api_keys={path}: cannot read it ({err.strerror or err})") from None
    keys: dict[str, Limits] = {}
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        key, settings = words[0], {}
        for word in words[1:]:
            name, _, value = word.partition("=")
            if name not in LIMITS or not value.isdigit() or int(value) < 1:
                raise NMTError(
                    f"{path}:{number}: {word!r}: a key's line is the key and optionally "
                    "characters=N (a quota per period) and requests=N (per minute), N >= 1"
                )
            settings[name] = int(value)
        if key in keys:
            raise NMTError(f"{path}:{number}: the key {key[:4]}... is listed twice")
        keys[key] = Limits(**settings)
    if not keys:
        raise NMTError(f"api_keys={path} lists no key: every request would be refused")
    return keys
