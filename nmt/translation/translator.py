"""The `Translator`: a trained model with its vocabularies, the library's way to translate.

    translator = Translator.from_checkpoint("runs/NAME/checkpoints/best")
    translator.translate(["Ein Hund läuft."])                                  # best translations
    translator.translate_full(texts, decode=DecodeConfig(strategy=Strategy.beam, n_best=3))
    translator.translate(["Ein Hund läuft."], prefixes=["A dog"])              # "what if"
    translator.translate(["Ein Hund läuft."], banned=["runs", "a dog"])        # never these
    translator.translate(["Ein Hund läuft."], constraints=[["puppy"]])         # always these
    translator.score(["Ein Hund läuft."], ["A dog runs."])                     # log-probabilities

`translate` and `translate_full` are `run(prepare(Request(...)))`: a
`nmt.translation.request.Request` carries a call's texts and options (the merge rules with the
decode settings' defaults are there), `prepare` tokenizes and checks it once, `run` searches. A
server prepares a request when it arrives, and runs the texts of several requests together.

Decode settings are an argument of each call (the default is what the checkpoint validated with,
or the `decode` given at construction), so one Translator serves any mix of requests: nmt-serve
keeps one for its life. Whatever the texts hold (empty, huge, control characters), N texts in give
N translations out in the same order: blank texts give blank translations, and no translation
contains a newline. The input path (`nmt.translation.inputs`) is the one the exported runtimes
share.

A prefix (target text) is tokenized with the target vocabulary and forced at the start of the
translation: the model scores it and goes on from there (`nmt.translation.search`). A prefix the
vocabulary cannot write (a character it lacks) or one longer than the length limit lets a
translation be is an NMTError naming its line. A prefix is cut where its pieces end: "I see eigh"
forces the pieces of "eigh", so the translation continues after them rather than within a longer
word.

Banned phrases never appear in a translation: `nmt.translation.phrases.banned_forms` says which
piece sequences are blocked, and `nmt.translation.search.rules` how. A blank phrase is an NMTError
naming it.

Constraints appear in every translation, each contiguous, in an order the search chooses (beam
search only: `nmt.translation.search.constraints`). `nmt.translation.phrases.constraint_ids` says
which pieces a phrase must appear as: sentencepiece's own segmentation of it, as a word start
("gentleman" -> "▁gentle" "man"), so it is met at the start of the translation or after a space, and
also where it starts a longer word whose pieces begin with its own ("▁gentle" "man" "ly"); a phrase
that starts with a mark that attaches to the word before it ("," "'s" ")" "-based") is matched
without the word start. A forced prefix's pieces count toward them. Constraints that cannot be met
(a piece the vocabulary lacks, a banned phrase inside one, more pieces than the length limit leaves,
a strategy other than beam) are an NMTError naming the text, before anything is translated; a
blank text has a blank translation whatever its constraints.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from nmt.checkpoint import Checkpoint
from nmt.config import DecodeConfig, Precision
from nmt.device import check_precision
from nmt.errors import NMTError
from nmt.lexicon import Lexicon, check_lexicon
from nmt.models.compiled import check_compile
from nmt.models.int8 import holds_int8_only
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import CheckpointsConfig
from nmt.tokenizer import EOS, Vocab, Vocabs, clean
from nmt.translation.attention_map import select_map
from nmt.translation.confidence import Confidence
from nmt.translation.inputs import TargetTags
from nmt.translation.loading import Ensembling, Parts, TextFacts, load_parts
from nmt.translation.phrases import spans
from nmt.translation.request import Prepared, PreparedText, Request, prepare
from nmt.translation.scoring import Scored, read_pairs
from nmt.translation.search import Decoded, SearchJob, search_all
from nmt.translation.search.tree import BeamTree

log = logging.getLogger(__name__)


@dataclass
class Translation:
    source: str
    text: str  # detokenized, on one line
    src_pieces: list[str]  # EOS included, to label attention columns
    tgt_pieces: list[str]  # EOS included when produced, to label attention rows
    maps: Tensor | None  # attention maps (len(tgt_pieces), L, h, len(src_pieces))
    score: float  # log-probability
    nbest: list[tuple[str, float]]  # every hypothesis kept, best first: (text, normalised score)
    # with attention: (target pieces, maps) of each n-best hypothesis, in the order of `nbest`
    nbest_maps: list[tuple[list[str], Tensor | None]] = field(default_factory=list)
    prefix_score: float | None = None  # log-probability of the forced prefix (None: no prefix)
    prefix_pieces: int = 0  # how many of `tgt_pieces` were forced
    tree: BeamTree | None = None  # the search tree, when asked for, with pieces and texts
    # with constraints: where each of the text's constraints is met in the best hypothesis, as
    # (start, end) indices of `tgt_pieces`, in the order the constraints were given
    constraint_spans: list[tuple[int, int]] = field(default_factory=list)
    failure: str | None = None  # why the search found no translation (None: it found one)
    # with `Request.statistics`: (pieces, 1), for each of `tgt_pieces` after the forced language
    # code, its log-probability at the request's temperature
    statistics: Tensor | None = None
    warnings: list[str] = field(default_factory=list)  # what its reader should know (`Prepared`)
    # its confidence, where whoever asked for it judged it (`nmt.translation.confidence`; the
    # server's confidence=true): the search never sets it
    confidence: Confidence | None = None

    def attention(self, layer: int | None = -1, head: int | None = None) -> Tensor | None:
        """(len(tgt_pieces), len(src_pieces)): one layer's map (None: the mean of the layers),
        one head or the mean of the heads; see `select_map`."""
        return None if self.maps is None else select_map(self.maps, layer, head)


def _blank(source: str, failure: str | None = None) -> Translation:
    return Translation(source, "", [], [], None, 0.0, [("", 0.0)], failure=failure)


def raise_failure(translations: list[Translation], request: Request) -> list[Translation]:
    """`translations` when every text has one; else an NMTError naming the first that has none
    (its `noun` and number in the request, and why)."""
    for i, t in enumerate(translations):
        if t.failure is not None:
            raise NMTError(f"{request.noun} {request.first_line + i}: {t.failure}")
    return translations


class Translator:
    def __init__(
        self,
        model: Seq2Seq,
        vocabs: Vocabs,
        device: torch.device,
        lexicon: Lexicon | None = None,
        decode: DecodeConfig | None = None,
        tags: dict[str, str | None] | None = None,
        codes: dict[str, str] | None = None,
        facts: TextFacts | None = None,
    ) -> None:
        """`lexicon` (the checkpoint's) is needed by `decode.shortlist` alone; `decode` is what
        a call without settings of its own decodes with (default: greedy). `tags`: target
        language -> the tag piece put before a source to ask for it (`DataConfig.target_tags`:
        {lang: None} for a model without target tags; None: languages unknown). With language
        `codes` (data.language_codes), the code of `facts.language` is put before each source
        and `tags` names the default target language. `facts`: what the checkpoint knows of
        the text it reads (`nmt.translation.loading.TextFacts`: the source language, the words
        that start and end its sentences, the head trained to align), for documents; none
        for a model built by hand."""
        self.model = model.eval()
        self.vocabs = vocabs
        self.device = device
        self.lexicon = lexicon
        self.decode = decode or DecodeConfig()
        self.facts = facts or TextFacts()
        self.tags = TargetTags(  # languages -> ids
            tags, vocabs.src, codes, self.facts.language, self.facts.code_style
        )
        self._checked: DecodeConfig | None = None  # the settings `check` last passed
        self.check(self.decode)

    @classmethod
    def from_parts(cls, parts: Parts) -> Translator:
        """A translator of parts read from checkpoints (`nmt.translation.loading.load_parts`)."""
        return cls(
            parts.model, parts.vocabs, parts.device, parts.lexicon, parts.decode, parts.tags,
            parts.codes, parts.facts,
        )  # fmt: skip

    @classmethod
    def from_checkpoint(
        cls,
        ckpt: str | Path | Checkpoint,
        decode: DecodeConfig | None = None,
        device: str = "auto",
        src_lang: str | None = None,
    ) -> Translator:
        """The model of a checkpoint (a directory, or one already loaded) on `device`.
        `decode=None` makes the default what the run validated with (greedy unless it was
        trained with decode=beam); `src_lang`: the language of the sources, where the model
        reads a code for it (an NLLB import). A directory read with decode.precision=int8 is
        held as int8 weights alone (`load_parts`)."""
        return cls.from_parts(load_parts([ckpt], decode, device, src_lang=src_lang))

    @classmethod
    def from_checkpoints(
        cls,
        ckpts: Sequence[str | Path | Checkpoint],
        decode: DecodeConfig | None = None,
        device: str = "auto",
        weights: Sequence[float] | None = None,
        combine: str = "prob",
        attention: str | int = "mean",
        src_lang: str | None = None,
    ) -> Translator:
        """Several checkpoints decoded as one model, an ensemble (`nmt.models.ensemble`: its
        members must share their tokenizers; `weights`, `combine` and `attention` as there). One
        checkpoint is that checkpoint's model alone. See `load_parts`."""
        ensembling = Ensembling(weights, combine, attention)
        return cls.from_parts(load_parts(ckpts, decode, device, ensembling, src_lang))

    @classmethod
    def from_command(
        cls,
        cfg: CheckpointsConfig,
        decode: DecodeConfig,
        device: str,
        loaded: list[Checkpoint] | None = None,
    ) -> Translator:
        """The model a decoding command's `ckpt` names (one checkpoint or an ensemble, with its
        `ckpt_weights`, `ensemble_combine` and `ensemble_attention`); `loaded`: its checkpoints
        already read."""
        return cls.from_checkpoints(
            loaded or cfg.ckpts, decode, device, cfg.ckpt_weights, cfg.ensemble_combine.value,
            cfg.attention_member, cfg.src_lang,
        )  # fmt: skip

    def with_facts(self, facts: TextFacts) -> Translator:
        """The same model, vocabularies and settings with other text facts (start words,
        edges, taught head: a checkpoint read without its sentence edges, say); the source
        language, which decides the code put before each source, stays."""
        if facts.language != self.facts.language:
            raise NMTError(f"with_facts keeps the source language {self.facts.language!r}")
        other = copy.copy(self)
        other.facts = facts
        return other

    @property
    def int8_only(self) -> bool:
        """Whether the model holds int8 weights instead of fp32 ones (`from_checkpoint`): every
        call then decodes and scores in decode.precision=int8."""
        return holds_int8_only(self.model)

    def check(self, decode: DecodeConfig) -> None:
        """Raise NMTError if these settings cannot run here (precision, shortlist)."""
        if decode == self._checked:
            return
        check_precision(self.device, decode.precision, "decode.precision")
        if self.int8_only and decode.precision != Precision.int8:
            raise NMTError(
                f"decode.precision={decode.precision.value}: this model was loaded with "
                f"decode.precision=int8 and holds int8 weights only; load it with "
                f"decode.precision={decode.precision.value} to decode so"
            )
        if decode.compile:
            check_compile(self.device)
        if decode.shortlist:
            check_lexicon(self.lexicon, len(self.vocabs.src), len(self.vocabs.tgt))
        self._checked = decode

    def prepare(self, request: Request, warn: bool = True) -> Prepared:
        """The request tokenized and checked against this model (`nmt.translation.request.prepare`):
        an NMTError names what cannot be translated (its settings here, a target language the model
        lacks, a prefix or constraints of a text) before anything is searched. `warn`: log each
        text's warnings (a source cut to decode.max_src_pieces, a crowded beam), which its
        translation carries either way (off for a check ahead of the translation)."""
        self.check(request.settings)
        tags, lang = self.tags, request.tgt_lang
        source = tags.ids(lang, request.src_lang)
        return prepare(request, self.vocabs, source, warn, tags.forced(lang))

    def run(self, prepared: Prepared) -> list[Translation]:
        """The translations of a prepared request, one per text, in order (a blank text's is
        blank): each with its n-best list, and its attention maps and search tree when the
        request asked for them. A text the search found no translation for (its constraints
        could not be met, the step rules blocked every piece) has a blank one whose `failure`
        says why; the other texts' are what they would be without it. `translate` and
        `translate_full` raise the first failure (`raise_failure`); a server answers each
        request's own."""
        live = [text for text in prepared.texts if text.src]
        job = SearchJob(
            [text.src for text in live], prepared.settings,
            prefixes=[t.prefix for t in live] if any(t.prefix for t in live) else None,
            banned=prepared.banned,
            constraints=[t.constraints for t in live] if any(t.constraints for t in live) else None,
            attention=prepared.attention, trees=prepared.tree,
            free_prefix=max((t.free for t in live), default=0), statistics=prepared.statistics,
        )  # fmt: skip
        searched = search_all(self.model, job, self.device, self.lexicon)
        flat = [h.tokens for done in searched for h in done.nbest]
        # byte pieces could decode to a newline: clean() keeps every text on one line
        decoded = iter([clean(t) for t in self.vocabs.tgt.decode(flat)] if flat else [])
        done = iter(searched)
        out = []
        for text in prepared.texts:
            result = next(done) if text.src else None
            if result is None or result.failure is not None:
                out.append(_blank(text.segment.text, result and result.failure))
            else:
                out.append(_translation(text, result, decoded, self.vocabs, prepared.attention))
            out[-1].warnings = list(text.warnings)
        return out

    def translate(
        self,
        texts: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        prefixes: list[str] | None = None,
        banned: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        tgt_lang: str | None = None,
    ) -> list[str]:
        """The best translation of each text (the options as `translate_full`'s)."""
        request = Request(
            texts, decode or self.decode, prefixes, banned, constraints, tgt_lang,
            first_line=first_line,
        )  # fmt: skip
        return [t.text for t in raise_failure(self.run(self.prepare(request)), request)]

    def translate_full(
        self,
        texts: list[str],
        attention: bool = True,
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        prefixes: list[str] | None = None,
        tree: bool = False,
        banned: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        tgt_lang: str | None = None,
    ) -> list[Translation]:
        """The best translation of each text with its n-best list and (when `attention`) its
        attention maps. A text longer than `decode.max_src_pieces` is translated from its first
        pieces, with a warning logged that names its line (`first_line` numbers the first).
        `prefixes` (one per text, "" for none) replace `decode.prefix`; `tree` returns each
        search tree (`nmt.translation.search.tree`); `banned` phrases, with `decode.banned`, appear
        in no translation (a forced prefix is forced even if it holds one); `constraints` (one list
        of phrases per text) replace `decode.constraints`, and appear in every translation (an
        NMTError names a line whose constraints cannot be met; `Translation.constraint_spans`
        says where they are). `tgt_lang` picks the target language of a model trained with
        target tags (data.corpora): its tag is put before each source (`TargetTags.ids`; optional
        where the model has one target language). See `nmt.translation.request.Request`."""
        request = Request(
            texts, decode or self.decode, prefixes, banned, constraints, tgt_lang, attention,
            tree, first_line,
        )  # fmt: skip
        return raise_failure(self.run(self.prepare(request)), request)

    def score(
        self,
        sources: list[str],
        translations: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        tgt_lang: str | None = None,
        src_lang: str | None = None,
    ) -> list[Scored]:
        """What the model thinks of each given translation of its source: the log-probability
        of each of its pieces and of the EOS after them, their total, and the total with
        `decode`'s length penalty (`nmt.translation.scoring`). N pairs in, N scores out, in order;
        the search would have reported the same score for the same pieces. A source longer than
        `decode.max_src_pieces` is cut as `translate` cuts it (a warning names its line); a blank
        source is the empty sentence (EOS alone), a blank translation scores the EOS alone;
        pieces the target vocabulary lacks are scored as <unk> (a warning names the line).
        `tgt_lang` is the language of the translations, for a model with target tags (its tag is
        put before each source, as `translate` puts it); `src_lang` the sources' language, for a
        model with language codes (else the translator's). Of `decode`, the length penalty, batch
        size, source cap, shortlist and precision count; the search's settings (strategy, length
        limits, prefix, banned phrases, constraints, step rules, compile) have no part in
        scoring."""
        decode = decode or self.decode
        self.check(decode)
        pairs = read_pairs(
            self.vocabs, self.tags.ids(tgt_lang, src_lang), sources, translations,
            decode.max_src_pieces, first_line, self.tags.forced(tgt_lang),
        )  # fmt: skip
        stats = pairs.statistics(self.model, decode, self.device, lexicon=self.lexicon,
                                 entropy=False)  # fmt: skip
        return pairs.scored([rows[:, 0].tolist() for rows in stats], decode, self.vocabs.tgt)


def _translation(
    text: PreparedText, done: Decoded, decoded: Iterator[str], vocabs: Vocabs, attention: bool
) -> Translation:
    """One text's Translation from its search result; `decoded` yields its n-best texts."""
    hyps = done.nbest
    nbest = [(next(decoded), h.normalized) for h in hyps]
    pieces = [vocabs.tgt.id_to_piece(h.tokens + [EOS] * h.ended) for h in hyps]
    return Translation(
        source=text.segment.text,
        text=nbest[0][0],
        src_pieces=vocabs.src.id_to_piece(text.src),
        tgt_pieces=pieces[0],
        maps=hyps[0].attention,
        score=hyps[0].score,
        nbest=nbest,
        nbest_maps=[(p, h.attention) for p, h in zip(pieces, hyps)] if attention else [],
        prefix_score=hyps[0].prefix_score if len(text.prefix) > text.free else None,
        prefix_pieces=len(text.prefix),
        tree=None if done.tree is None else _with_pieces(done.tree, vocabs.tgt),
        constraint_spans=spans(hyps[0].tokens, text.constraints),
        statistics=None if hyps[0].statistics is None else hyps[0].statistics[text.free :],
    )


def _with_pieces(tree: BeamTree, vocab: Vocab) -> BeamTree:
    """The tree with each node's piece and the text of the hypothesis ending there."""
    paths: list[list[int]] = []
    for node in tree.nodes:
        path = [] if node.parent < 0 else paths[node.parent]
        paths.append(path + [node.token] if node.parent >= 0 and node.token != EOS else path)
    pieces = vocab.id_to_piece([node.token for node in tree.nodes])
    for node, piece, text in zip(tree.nodes, pieces, vocab.decode(paths)):
        node.piece, node.text = piece, clean(text)
    return tree
