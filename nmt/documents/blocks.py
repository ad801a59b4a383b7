"""Blocks of text translated: each split into sentences, every sentence of every block searched in
one batch, each block's translation rejoined with its own whitespace and its inline codes put
back by the word alignment.

    results = translate_blocks(translator, [lift_markup("Ein <b>Hund</b> läuft. Er bellt.")],
                               decode, TextOptions(format=TextFormat.html))
    results[0].text        # 'A <b>dog</b> runs. He barks.'
    results[0].alignment   # [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]

The translator sees sentences and nothing else (`nmt.translation`): a block without codes whose
text is one sentence is translated as that text is alone, byte for byte. The search keeps the
attention maps only of the sentences whose alignment is needed (a block with codes, or
`alignments` asked for), in a request of their own, so the others pay nothing for them.
Warnings (a source cut to decode.max_src_pieces) and a failure (the search found no translation
of a sentence: the block's translation is then blank) name the block by its number, `first`
numbering the first (a file's line).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from nmt.config import DecodeConfig, TextOptions
from nmt.documents.alignment import UNTAUGHT, Reading, reading_of, word_alignment
from nmt.documents.inline import Block, place
from nmt.documents.protect import lift_protected, pattern
from nmt.documents.sentences import Split, split
from nmt.translation.request import Request
from nmt.translation.translator import Translation, Translator

log = logging.getLogger(__name__)


@dataclass
class BlockResult:
    text: str  # the block translated, its codes back in it
    plain: str  # the translation without the codes (what `alignment` indexes)
    alignment: list[tuple[int, int]] | None  # (source word, target word) over the block's text
    sentences: list[Translation] = field(default_factory=list)
    failure: str | None = None  # why a sentence of it has no translation (then `text` is "")
    warnings: list[str] = field(default_factory=list)


def protected(block: Block, options: TextOptions) -> Block:
    """The block with the spans `options.protect` and `protect_patterns` match lifted out."""
    return lift_protected(block, pattern(options.protect, options.protect_patterns))


@dataclass
class Plan:
    """Blocks as the search sees them: each block's sentences, and whether its alignment is
    needed (codes to put back, or `alignments` asked), so its sentences keep attention maps."""

    blocks: list[Block]
    splits: list[Split]
    aligned: list[bool]

    @property
    def sentences(self) -> list[str]:
        return [s for split in self.splits for s in split.sentences]

    def where(self, aligned: bool) -> list[tuple[int, int]]:
        """(block, sentence) of every sentence whose block's alignment is (not) needed."""
        return [(i, k) for i, s in enumerate(self.splits) if self.aligned[i] == aligned
                for k in range(len(s.sentences))]  # fmt: skip

    def simple(self) -> bool:
        """Whether every block is one sentence of plain text: translated as it always was."""
        return not any(self.aligned) and all(len(s.sentences) == 1 for s in self.splits)


def plan_blocks(
    blocks: list[Block], language: str, options: TextOptions, starts: frozenset[str] = frozenset()
) -> Plan:
    """`language` and `starts` (words that start sentences) for splitting each block."""
    splits = [_sentences(b.text, language, options.split_sentences, starts) for b in blocks]
    return Plan(blocks, splits, [options.alignments or bool(b.codes) for b in blocks])


def finish_blocks(
    plan: Plan, found: list[Translation], skip: int, reading: Reading = UNTAUGHT
) -> list[BlockResult]:
    """Each block's result from its sentences' translations (`found`: in `plan.sentences`' order;
    `skip`: the pieces of the target tag before each source; `reading`: which attention the
    alignments are read off, `reading_of` the translator)."""
    out, k = [], 0
    for block, parts, aligned in zip(plan.blocks, plan.splits, plan.aligned):
        sentences = found[k : k + len(parts.sentences)]
        k += len(parts.sentences)
        out.append(_result(block, parts, sentences, aligned, skip, reading))
    return out


def translate_blocks(
    translator: Translator,
    blocks: list[Block],
    decode: DecodeConfig,
    options: TextOptions,
    tgt_lang: str | None = None,
    first: int = 1,
    noun: str = "line",
    statistics: float | None = None,
) -> list[BlockResult]:
    """Each block translated (see the module's notes); the blocks' codes already lifted
    (`nmt.documents.inline`, `protected`). `statistics`: each sentence's translation carries
    its piece statistics at this temperature (`Request.statistics`, for its confidence)."""
    plan = plan_blocks(blocks, translator.source_language, options, translator.sentence_starts)
    found: dict[tuple[int, int], Translation] = {}
    for with_maps in (False, True):
        where = plan.where(with_maps)
        if not where:
            continue
        texts = [plan.splits[i].sentences[k] for i, k in where]
        request = Request(texts, decode, tgt_lang=tgt_lang, attention=with_maps, noun=noun,
                          statistics=statistics)  # fmt: skip
        done = translator.run(translator.prepare(request, warn=False))
        found.update(zip(where, done))
    skip = len(translator.tags.ids(tgt_lang))  # the target tag before each source
    order = [(i, k) for i, s in enumerate(plan.splits) for k in range(len(s.sentences))]
    out = finish_blocks(plan, [found[w] for w in order], skip, reading_of(translator))
    for i, result in enumerate(out):
        for message in result.warnings:
            log.warning("%s %d: %s", noun, first + i, message)
    return out


def _sentences(text: str, language: str | None, wanted: bool, starts: frozenset[str]) -> Split:
    """A block's sentences, the whitespace between them kept and around them dropped (the
    format's reader keeps a block's outer whitespace where it was)."""
    parts = split(text, language or "en", starts) if wanted else Split([text], ["", ""])
    return Split(parts.sentences, ["", *parts.gaps[1:-1], ""])


def _gaps_after_codes(block: Block, parts: Split) -> Split:
    """The split with each gap between sentences that holds codes cut to the whitespace after
    its last code: the codes go back after the previous sentence's last word with a space of
    their own (`place`), so "läuft. 2 Kinder" (the number lifted out, "läuft.  Kinder" read)
    comes back as "runs. 2 Children", not with the lifted number's two spaces."""
    if not block.codes or len(parts.sentences) < 2:
        return parts
    gaps, at = list(parts.gaps), len(parts.gaps[0])
    for k, sentence in enumerate(parts.sentences[:-1], 1):
        at += len(sentence)
        end = at + len(gaps[k])
        inside = [c for c in block.at if at < c < end]
        if inside:
            gaps[k] = block.text[max(inside) : end]
        at = end
    return Split(parts.sentences, gaps)


def _result(
    block: Block,
    parts: Split,
    sentences: list[Translation],
    aligned: bool,
    skip: int,
    reading: Reading,
) -> BlockResult:
    warnings = [w for t in sentences for w in t.warnings]
    failed = next((t.failure for t in sentences if t.failure is not None), None)
    if failed is not None:
        return BlockResult("", "", None, sentences, failed, warnings)
    plain = _gaps_after_codes(block, parts).join([t.text for t in sentences])
    pairs = None
    if aligned:
        pairs, src, tgt = [], 0, 0
        for t in sentences:
            pairs += [(s + src, j + tgt) for s, j in word_alignment(t, skip, reading)]
            src, tgt = src + len(t.source.split()), tgt + len(t.text.split())
    text = place(block, plain, pairs or [])
    return BlockResult(text, plain, pairs, sentences, None, warnings)
