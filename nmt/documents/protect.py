"""Protected spans: text that must come out verbatim, lifted out of a block as point codes before
the search (`nmt.documents.inline`), so that no model can rewrite it, and put back by the
alignment where its neighbours went.

The kinds on by default, in every format: URLs (`https://...`, `www....`), e-mail addresses,
placeholders (`{name}`, `{0}`, `{{ var }}`, `${var}`, printf's `%s`, `%(count)d`, `%5.2f`) and
numbers with digits (`3`, `3.50`, `1,000`, `10:30`, `2024-01-05`, codes such as `XK-4711`);
`protect_patterns` adds regular expressions of the user's own. A span that would cut through a
tag of the block is left as it is.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence

from nmt.documents.inline import Block, Code
from nmt.errors import NMTError

# the patterns of nmt.config.PROTECT_KINDS, the names a config gives. Each starts a match only
# where a span can start (a lookbehind) and bounds what it scans, so that text from a user (a
# run of 100,000 letters, of "a-", of "{{") costs linear time, not a scan to its end per character;
# a printf width starts with a digit other than 0 (a 0 before it is a flag), so that "%" and
# 100,000 zeros is not split between flags and width in every way
KINDS = {
    "url": r"(?:https?://|ftp://|www\.)[^\s<>\"']*[^\s<>\"'.,;:!?)\]}]",
    "email": r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]+(?:\.[\w-]+)+",
    "placeholder": (
        r"\{\{[^{}\n]{0,200}?\}\}|\$\{\w+\}|\{[\w.:]*\}"
        r"|%(?:\(\w+\))?[-#0 +]*(?:[^\D0]\d*)?(?:\.\d+)?[diouxXeEfFgGcrsa]"
    ),
    "number": r"(?<![\w-])[\w-]{0,64}\d(?:[\w.,:/-]*[\w])?",
}


def pattern(kinds: Sequence[str], extra: Sequence[str] = ()) -> re.Pattern | None:
    """One pattern for the `kinds` (of KINDS) and the user's `extra` regular expressions, the
    first alternative that matches winning; None when there are none. An unknown kind or a bad
    expression is an NMTError naming it."""
    parts = []
    for kind in kinds:
        if kind not in KINDS:
            raise NMTError(f"protect: unknown kind {kind!r}; the kinds: {', '.join(KINDS)}")
        parts.append(KINDS[kind])
    for expression in extra:
        try:
            re.compile(expression)
        except re.error as err:
            message = f"protect_patterns: {expression!r} is not a regular expression: {err}"
            raise NMTError(message) from None
        parts.append(expression)
    return re.compile("|".join(f"(?:{p})" for p in parts)) if parts else None


def lift_protected(block: Block, found: re.Pattern | None) -> Block:
    """The block with every span of its text that `found` matches lifted out as a point code."""
    if found is None:
        return block
    # a span must not hold a code's place inside it (it would cut through a tag)
    spans = [m.span() for m in found.finditer(block.text) if m.end() > m.start()]
    spans = [(s, e) for s, e in spans if not _holds_code(block.at, s, e)]
    if not spans:
        return block
    text, new_codes, new_at, index = [], [], [], {}
    removed, done, k = 0, 0, 0
    codes = list(zip(block.at, block.codes))

    def keep_codes_until(offset: int, before_span: bool) -> None:
        nonlocal k
        while k < len(codes) and (codes[k][0] < offset or (before_span and codes[k][0] == offset)):
            index[k] = len(new_codes)
            new_codes.append(codes[k][1])
            new_at.append(codes[k][0] - removed)
            k += 1

    for start, end in spans:
        keep_codes_until(start, True)
        text.append(block.text[done:start])
        new_codes.append(Code(block.text[start:end], "point"))
        new_at.append(start - removed)
        removed += end - start
        done = end
    keep_codes_until(len(block.text) + 1, True)
    text.append(block.text[done:])
    # a pair's partner by its new index
    final = [c if c.pair < 0 else Code(c.raw, c.kind, index[c.pair]) for c in new_codes]
    return Block("".join(text), final, new_at, block.markup, block.source)


def _holds_code(at: list[int], start: int, end: int) -> bool:
    """Whether a code's place (of `at`, in order) is inside (start, end): the first after `start`
    found by bisection, not by a pass over all codes for every span."""
    k = bisect_right(at, start)
    return k < len(at) and at[k] < end
