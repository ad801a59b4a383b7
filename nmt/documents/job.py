"""The text loop, written once: blocks of text split into sentences, the sentences searched, those
whose translation skipped part of them cut and their parts searched again, each block rejoined
with its codes put back. `TextJob` holds the loop and never searches: it says which searches a
round needs and takes their results, so a blocking caller (nmt-translate) and an async one
(nmt-serve) drive the same object.

    job = TextJob.for_translator(translator, blocks, request, options)
    while requests := job.next():                        # one round: 1 or 2 requests
        job.take([translator.run(translator.prepare(r, warn=False)) for r in requests])
    results = job.results()                              # one BlockResult per block

which is `run_job` (and `translate_blocks`). A round's sentences go out in at most two requests,
those searched without attention maps and those with: maps are kept only for a sentence whose
alignment is needed (a block with codes, or `alignments` asked), that the caller asked maps for, or
that is checked and could be cut (`Plan.mapped`), so the others pay nothing for them. After each of
the first ROUNDS searches, the sentences just found are checked for parts the model skipped
(`nmt.documents.recovery`); a cut sentence's parts are searched in the next round.

The requests are the job's `request` with its texts replaced by sentences: its settings,
banned phrases, target and source language, search trees and piece statistics hold for every
sentence. What a block gets depends on that block alone, whoever drives the job and whatever
else is searched beside it.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from nmt.config import TextOptions
from nmt.documents.alignment import Reading, reading_of
from nmt.documents.blocks import (
    BlockResult,
    Plan,
    finish_blocks,
    plan_blocks,
    recovery_cuts,
    spread,
)
from nmt.documents.inline import Block
from nmt.documents.recovery import ROUNDS
from nmt.translation.loading import TextFacts
from nmt.translation.request import Request
from nmt.translation.translator import Translation, Translator

log = logging.getLogger(__name__)


class TextJob:
    """The loop over one request's blocks (see the module's notes)."""

    def __init__(
        self,
        blocks: list[Block],
        request: Request,
        options: TextOptions,
        facts: TextFacts | None = None,
        skip: int = 0,
    ) -> None:
        """`blocks`: the texts read, their codes lifted (`nmt.documents.texts.read_block`);
        `request`: the settings and flags every search shares (its own texts are not read:
        the blocks are); `options`: sentence splitting and alignments; `facts`: the model's
        text facts (language, start words, edges, taught head); `skip`: the pieces put before
        each source (its target tag or language code), which no word owns."""
        facts = facts or TextFacts()
        language = request.src_lang or facts.language  # the splitter's rules
        self.plan: Plan = plan_blocks(blocks, language, options, facts.starts, facts.edges)
        self.request = request
        self.edges = facts.edges
        self.reading: Reading = reading_of(facts.taught)
        self.skip = skip
        # one per sentence of `plan`, in order: None until searched
        self.found: list[Translation | None] = [None] * len(self.plan.sentences)
        self.rounds = 0  # rounds taken
        self._asked: list[list[int]] = []  # the sentences of each request of the round out

    @classmethod
    def for_translator(
        cls, translator: Translator, blocks: list[Block], request: Request, options: TextOptions
    ) -> TextJob:
        """A job of `blocks` for `translator`'s model: its text facts and target tags."""
        skip = len(translator.tags.ids(request.tgt_lang, request.src_lang))
        return cls(blocks, request, options, translator.facts, skip)

    @property
    def simple(self) -> bool:
        """Whether every block is one sentence of plain text, with nothing to put back: such a
        request may be searched as it came and answered sentence by sentence."""
        return self.plan.simple()

    def next(self) -> list[Request]:
        """The searches of the next round: the sentences not yet translated, in a request
        without attention maps and one with (a request only where it has sentences); [] when
        every sentence is translated. Each request's results go back through `take`, in
        order, before the next round."""
        if self._asked:
            raise RuntimeError("TextJob.next: take() the last round's results first")
        plan, edges = self.plan, self.edges
        sentences = [(b, s) for b, split in enumerate(plan.splits) for s in split.sentences]
        wanted = self.request.attention
        fresh = [n for n, t in enumerate(self.found) if t is None]
        mapped = {n: wanted or plan.mapped(*sentences[n], edges) for n in fresh}
        requests = []
        for with_maps in (False, True):
            where = [n for n in fresh if mapped[n] == with_maps]
            if where:
                texts = [sentences[n][1] for n in where]
                requests.append(replace(self.request, texts=texts, attention=with_maps))
                self._asked.append(where)
        return requests

    def take(self, results: list[list[Translation]]) -> None:
        """The translations of the requests `next` gave, one list per request in its order.
        After each of the first ROUNDS rounds the sentences found are checked, and each whose
        translation skipped part of it is cut in two, its parts left to the next round."""
        if len(results) != len(self._asked):
            raise ValueError(f"{len(results)} results for {len(self._asked)} requests")
        for where, found in zip(self._asked, results):
            if len(found) != len(where):
                raise ValueError(f"{len(found)} translations for {len(where)} sentences")
            for n, t in zip(where, found):
                self.found[n] = t
        fresh = {n for where in self._asked for n in where}
        self._asked = []
        self.rounds += 1
        if self.rounds > ROUNDS:
            return
        cuts = recovery_cuts(self.plan, self.found, self.skip, self.reading, self.edges, fresh)
        if cuts:
            self.plan = self.plan.cut(cuts)
            self.found = spread(self.found, cuts)

    def results(self) -> list[BlockResult]:
        """Each block's result (`BlockResult`), in order; the loop must be done (`next` gave
        [])."""
        if any(t is None for t in self.found):
            raise RuntimeError("TextJob.results: sentences are still to be searched")
        return finish_blocks(self.plan, self.found, self.skip, self.reading)


def run_job(translator: Translator, job: TextJob) -> list[BlockResult]:
    """The job driven to its end by blocking searches (nmt-translate's driver; nmt-serve's is
    `nmt.serving.server.Server.translate`), each block's warnings logged, naming it (the job
    request's `noun` and number from its `first_line`)."""
    while requests := job.next():
        job.take([translator.run(translator.prepare(r, warn=False)) for r in requests])
    results = job.results()
    noun, first = job.request.noun, job.request.first_line
    for i, result in enumerate(results):
        for message in result.warnings:
            log.warning("%s %d: %s", noun, first + i, message)
    return results


def translate_blocks(
    translator: Translator, blocks: list[Block], request: Request, options: TextOptions
) -> list[BlockResult]:
    """Each block translated (see the module's notes) with `request`'s settings and flags."""
    return run_job(translator, TextJob.for_translator(translator, blocks, request, options))
