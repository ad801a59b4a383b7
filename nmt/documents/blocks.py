"""Blocks of text as the search sees them: each block split into its sentences (`Plan`), and each
block's translation rejoined from its sentences' with its own whitespace and its inline codes put
back by the word alignment (`finish_blocks`).

    plan = plan_blocks([lift_markup("Ein <b>Hund</b> läuft. Er bellt.")], "de", options)
    plan.sentences                  # ['Ein Hund läuft.', 'Er bellt.']
    finish_blocks(plan, found, 0)   # [BlockResult('A <b>dog</b> runs. He barks.', ...)]

The loop that searches the sentences, checks them and cuts those the model skipped part of is
`nmt.documents.job.TextJob`. A block without codes whose text is one sentence is translated as
that text is alone, byte for byte. Warnings (a source cut to decode.max_src_pieces) and a failure
(the search found no translation of a sentence: the block's translation is then blank) are the
block's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nmt.config import TextOptions
from nmt.data.starts import SentenceEdges
from nmt.documents.alignment import UNTAUGHT, Reading, word_alignment
from nmt.documents.inline import Block
from nmt.documents.placing import place
from nmt.documents.protect import lift_protected, pattern
from nmt.documents.recovery import edge_cuts, recovery_cut
from nmt.documents.sentences import Split, split
from nmt.translation.translator import Translation


@dataclass
class BlockResult:
    text: str  # the block translated, its codes back in it
    plain: str  # the translation without the codes (what `alignment` indexes)
    # (source word, target word) over the block's text: its whitespace words, each cut where a
    # sentence starts glued to the one before it
    alignment: list[tuple[int, int]] | None
    sentences: list[Translation] = field(default_factory=list)
    failure: str | None = None  # why a sentence of it has no translation (then `text` is "")
    warnings: list[str] = field(default_factory=list)


def protected(block: Block, options: TextOptions) -> Block:
    """The block with the spans `options.protect` and `protect_patterns` match lifted out."""
    return lift_protected(block, pattern(options.protect, options.protect_patterns))


@dataclass
class Plan:
    """Blocks as the search sees them: each block's sentences, whether its alignment is needed
    (codes to put back, or `alignments` asked), and whether its sentences are checked for parts
    the model skipped (`nmt.documents.recovery`: a block the splitter cut, of a model with
    sentence edges)."""

    blocks: list[Block]
    splits: list[Split]
    aligned: list[bool]
    checked: list[bool]

    @property
    def sentences(self) -> list[str]:
        return [s for split in self.splits for s in split.sentences]

    def mapped(self, block: int, sentence: str, edges: SentenceEdges) -> bool:
        """Whether a sentence of the block is searched with attention maps: the block's
        alignment is needed, or the sentence is checked and could be cut (`edge_cuts`)."""
        return self.aligned[block] or (self.checked[block] and bool(edge_cuts(sentence, edges)))

    def simple(self) -> bool:
        """Whether every block is one sentence of plain text: translated as it always was."""
        return not any(self.aligned) and all(len(s.sentences) == 1 for s in self.splits)

    def cut(self, cuts: dict[int, int]) -> Plan:
        """The plan with each sentence `i` of `cuts` (an index of `sentences`) cut in two before
        its word `cuts[i]`."""
        splits, at = [], 0
        for parts in self.splits:
            count = len(parts.sentences)
            mine = sorted(((i - at, w) for i, w in cuts.items() if at <= i < at + count),
                          reverse=True)  # fmt: skip
            at += count
            for k, word in mine:  # from the last: the earlier sentences keep their indices
                parts = parts.cut(k, word)
            splits.append(parts)
        return Plan(self.blocks, splits, self.aligned, self.checked)


def plan_blocks(
    blocks: list[Block],
    language: str | None,
    options: TextOptions,
    starts: frozenset[str] = frozenset(),
    edges: SentenceEdges | None = None,
) -> Plan:
    """`language` and `starts` (words that start sentences) for splitting each block; `edges`
    for checking the sentences of a block cut in two or more (`nmt.documents.recovery`)."""
    splits = [_sentences(b.text, language, options.split_sentences, starts) for b in blocks]
    aligned = [options.alignments or bool(b.codes) for b in blocks]
    checked = [bool(edges) and len(s.sentences) > 1 for s in splits]
    return Plan(blocks, splits, aligned, checked)


def recovery_cuts(
    plan: Plan,
    found: list[Translation | None],
    skip: int,
    reading: Reading,
    edges: SentenceEdges,
    among: set[int],
) -> dict[int, int]:
    """Sentence (an index of `plan.sentences`, one of `among`) -> the word to cut it before, for
    each sentence of a checked block whose translation (`found`, in the same order) skipped part
    of it where a sentence could have ended (`recovery_cut`)."""
    cuts, i = {}, 0
    for block, parts in enumerate(plan.splits):
        for sentence in parts.sentences:
            t = found[i]
            if plan.checked[block] and i in among and t is not None and t.source == sentence:
                word = recovery_cut(t, skip, reading, edges)
                if word is not None:
                    cuts[i] = word
            i += 1
    return cuts


def spread(items: list, cuts: dict[int, int]) -> list:
    """`items`, one for each sentence of a plan, laid out for the plan cut by `cuts`: each cut
    sentence's item replaced by None for each of its two parts."""
    out = []
    for i, item in enumerate(items):
        out += [None, None] if i in cuts else [item]
    return out


def finish_blocks(
    plan: Plan, found: list[Translation], skip: int, reading: Reading = UNTAUGHT
) -> list[BlockResult]:
    """Each block's result from its sentences' translations (`found`: in `plan.sentences`' order;
    `skip`: the pieces of the target tag before each source; `reading`: which attention the
    alignments are read off, `reading_of` the model's taught head)."""
    out, k = [], 0
    for block, parts, aligned in zip(plan.blocks, plan.splits, plan.aligned):
        sentences = found[k : k + len(parts.sentences)]
        k += len(parts.sentences)
        out.append(_result(block, parts, sentences, aligned, skip, reading))
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
    texts = [t.text for t in sentences]
    plain = _gaps_after_codes(block, parts).join(texts)
    pairs, breaks = None, ((), ())
    if aligned:
        pairs, src, tgt = [], 0, 0
        for t in sentences:
            pairs += [(s + src, j + tgt) for s, j in word_alignment(t, skip, reading)]
            src, tgt = src + len(t.source.split()), tgt + len(t.text.split())
        # the words are the sentences' own: where two meet with no whitespace between (block
        # tags, "Blumen.</h1><p>Wir"), a word of each side ends there
        breaks = (_glued_starts(block.text, parts.sentences), _glued_starts(plain, texts))
    text = place(block, plain, pairs or [], breaks)
    return BlockResult(text, plain, pairs, sentences, None, warnings)


def _glued_starts(text: str, sentences: list[str]) -> list[int]:
    """The offsets in `text` (the `sentences` in order, whitespace between them or none) where a
    sentence starts right after the one before it, no whitespace between them."""
    starts, at = [], 0
    for k, sentence in enumerate(sentences):
        found = text.find(sentence, at)
        if found < 0:
            break
        if k and found == at and found > 0 and not text[found - 1].isspace():
            starts.append(found)
        at = found + len(sentence)
    return starts
