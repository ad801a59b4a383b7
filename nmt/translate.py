"""The `Translator`: a trained model with its vocabularies, the library's way to translate.

    translator = Translator.from_checkpoint("runs/NAME/checkpoints/best")
    translator.translate(["Ein Hund läuft."])                                  # best translations
    translator.translate_full(texts, decode=DecodeConfig(strategy=Strategy.beam, n_best=3))
    translator.translate(["Ein Hund läuft."], prefixes=["A dog"])              # "what if"
    translator.translate(["Ein Hund läuft."], banned=["runs", "a dog"])        # never these
    translator.translate(["Ein Hund läuft."], constraints=[["puppy"]])         # always these
    translator.score(["Ein Hund läuft."], ["A dog runs."])                     # log-probabilities

Decode settings are an argument of each call (the default is what the checkpoint validated with,
or the `decode` given at construction), so one Translator serves any mix of requests: nmt-serve
keeps one for its life. Whatever the texts hold (empty, huge, control characters), N texts in give
N translations out in the same order: blank texts give blank translations, and no translation
contains a newline. The input path (`nmt.inputs`) is the one the exported runtimes share.

A prefix (target text) is tokenized with the target vocabulary and forced at the start of the
translation: the model scores it and goes on from there (`nmt.search`). A prefix the vocabulary
cannot write (a character it lacks) or one longer than the length limit lets a translation be is
an NMTError naming its line. A prefix is cut where its pieces end: "I see eigh" forces the pieces
of "eigh", so the translation continues after them rather than within a longer word.

Banned phrases (`decode.banned`, and a call's `banned`, which add to it) never appear in a
translation: `banned_ids` says which piece sequences are blocked, and `nmt.search.constraints`
how. A blank phrase is an NMTError naming it.

Constraints (`decode.constraints`, one list for every text, or a call's `constraints`, one list
per text, which take its place) appear in every translation, each contiguous, in an order the
search chooses (beam search only: `nmt.search.positive`). `constraint_ids` says which pieces a
phrase must appear as: sentencepiece's own segmentation of it, as a word start ("gentleman" ->
"▁gentle" "man"), so it is met at the start of the translation or after a space, and also where
it starts a longer word whose pieces begin with its own ("▁gentle" "man" "ly"); a phrase that
starts with a mark that attaches to the word before it ("," "'s" ")" "-based") is matched
without the word start. A forced prefix's pieces count toward them. Constraints that cannot be
met (a piece the vocabulary lacks, a banned phrase inside one, more pieces than the length limit
leaves, a strategy other than beam) are an NMTError naming the text, before anything is
translated; a blank text has a blank translation whatever its constraints.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from nmt.attention_map import select_map
from nmt.beam_tree import BeamTree
from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.config import DecodeConfig, Strategy
from nmt.device import check_precision, resolve_device
from nmt.errors import NMTError
from nmt.inputs import Sources, clean, prefix_ids, read_sources
from nmt.lexicon import NO_LEXICON, Lexicon
from nmt.models import restore_model
from nmt.models.ensemble import check_options, load_ensemble
from nmt.models.seq2seq import Seq2Seq
from nmt.phrases import banned_ids, constraint_ids
from nmt.run_config import CheckpointsConfig
from nmt.scoring import Scored, score_ids
from nmt.search import Unmet, search_all
from nmt.search.positive import NEED_BEAM, holds, problem, spans
from nmt.tokenizer import EOS, UNK, Vocab, Vocabs

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

    def attention(self, layer: int | None = -1, head: int | None = None) -> Tensor | None:
        """(len(tgt_pieces), len(src_pieces)): one layer's map (None: the mean of the layers),
        one head or the mean of the heads; see `select_map`."""
        return None if self.maps is None else select_map(self.maps, layer, head)


def _blank(source: str) -> Translation:
    return Translation(source, "", [], [], None, 0.0, [("", 0.0)])


class Translator:
    def __init__(
        self,
        model: Seq2Seq,
        vocabs: Vocabs,
        device: torch.device,
        lexicon: Lexicon | None = None,
        decode: DecodeConfig | None = None,
        tags: dict[str, str | None] | None = None,
    ) -> None:
        """`lexicon` (the checkpoint's) is needed by `decode.shortlist` alone; `decode` is what
        a call without settings of its own decodes with (default: greedy). `tags`: target
        language -> the tag piece put before a source to ask for it (`DataConfig.target_tags`:
        {lang: None} for a model without target tags; None: languages unknown)."""
        self.model = model.eval()
        self.vocabs = vocabs
        self.device = device
        self.lexicon = lexicon
        self.decode = decode or DecodeConfig()
        self.tags = dict(tags or {})
        self._tag_ids = {  # a tag the tokenizer lacks fails here, not at the first translation
            lang: self._tag_id(tag) for lang, tag in self.tags.items() if tag is not None
        }
        self.check(self.decode)

    @property
    def languages(self) -> list[str]:
        """The target languages this model translates into (the tgt_lang values it takes)."""
        return list(self.tags)

    def _tag_id(self, tag: str) -> int:
        i = self.vocabs.src.piece_to_id(tag)
        if i == UNK or self.vocabs.src.id_to_piece([i]) != [tag]:
            raise NMTError(f"the model's tokenizer has no piece {tag!r} for its target tag")
        return i

    def target_prefix(self, tgt_lang: str | None) -> list[int]:
        """The ids put before each source to translate into `tgt_lang`: its tag, or nothing
        for a model without target tags. An NMTError names the languages when `tgt_lang` is
        not one of them, or is None for a model with several."""
        if tgt_lang is None:
            if not self._tag_ids:
                return []
            if len(self._tag_ids) == 1:
                return list(self._tag_ids.values())
            raise NMTError(
                f"this model translates into {', '.join(self.languages)}: say which with "
                f"tgt_lang (one of {', '.join(self.languages)})"
            )
        if tgt_lang not in self.tags:
            known = ", ".join(self.languages) or "a language its checkpoint does not name"
            raise NMTError(f"tgt_lang={tgt_lang!r}: this model translates into {known}")
        tag = self._tag_ids.get(tgt_lang)
        return [] if tag is None else [tag]

    def sources(
        self,
        texts: list[str],
        decode: DecodeConfig,
        tgt_lang: str | None,
        first_line: int = 1,
        warn: bool = True,
    ) -> Sources:
        """The texts as the search reads them: `read_sources` with the target tag for `tgt_lang`
        put before each source (after the cut to decode.max_src_pieces, so a long text keeps its
        tag). A server checks a request's prefixes and cost on them before any decode."""
        prefix = self.target_prefix(tgt_lang)
        sources = read_sources(self.vocabs.src, texts, decode.max_src_pieces, first_line, warn)
        if prefix:
            sources.ids = [prefix + ids for ids in sources.ids]
        return sources

    @classmethod
    def from_checkpoint(
        cls, ckpt: str | Path | Checkpoint, decode: DecodeConfig | None = None, device: str = "auto"
    ) -> Translator:
        """The model of a checkpoint (a directory, or one already loaded) on `device`.
        `decode=None` makes the default what the run validated with (greedy unless it was
        trained with decode=beam)."""
        if not isinstance(ckpt, Checkpoint):
            ckpt = load_checkpoint(ckpt)
        dev = resolve_device(device)
        return cls(
            restore_model(ckpt, dev), ckpt.vocabs, dev, ckpt.lexicon, decode or ckpt.config.decode,
            ckpt.config.data.target_tags(),
        )  # fmt: skip

    @classmethod
    def from_checkpoints(
        cls,
        ckpts: Sequence[str | Path | Checkpoint],
        decode: DecodeConfig | None = None,
        device: str = "auto",
        weights: Sequence[float] | None = None,
        combine: str = "prob",
        attention: str | int = "mean",
    ) -> Translator:
        """Several checkpoints decoded as one model, an ensemble (`nmt.models.ensemble`: its
        members must share their tokenizers; `weights`, `combine` and `attention` as there). The
        first checkpoint's vocabularies, lexicon and (`decode=None`) decode settings serve it. One
        checkpoint is that checkpoint's model alone."""
        check_options(len(ckpts), weights, combine, attention)
        if len(ckpts) == 1:
            return cls.from_checkpoint(ckpts[0], decode, device)
        dev = resolve_device(device)
        model, loaded = load_ensemble(ckpts, dev, weights, combine, attention)
        first = loaded[0]
        return cls(
            model, first.vocabs, dev, first.lexicon, decode or first.config.decode,
            first.config.data.target_tags(),
        )  # fmt: skip

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
            cfg.attention_member,
        )  # fmt: skip

    def check(self, decode: DecodeConfig) -> None:
        """Raise NMTError if these settings cannot run here (precision, shortlist,
        constraints without beam search)."""
        check_precision(self.device, decode.precision, "decode.precision")
        if decode.constraints and decode.strategy != Strategy.beam:
            raise NMTError(f"decode.constraints={decode.constraints}: {NEED_BEAM}")
        if not decode.shortlist:
            return
        if self.lexicon is None:
            raise NMTError(NO_LEXICON)
        if self.lexicon.shape != (len(self.vocabs.src), len(self.vocabs.tgt)):
            raise NMTError(
                "the checkpoint's lexicon.pt was learned for another vocabulary: "
                "python -m nmt.cli.lexicon CKPT_DIR learns it again"
            )

    def check_prefixes(
        self,
        texts: list[str],
        prefixes: list[str],
        decode: DecodeConfig | None = None,
        tgt_lang: str | None = None,
    ) -> None:
        """Raise NMTError if a prefix cannot be forced on its text (see the module's notes),
        without translating: a server checks a request before it joins a batch."""
        decode = decode or self.decode
        sources = self.sources(texts, decode, tgt_lang, warn=False)
        prefix_ids(self.vocabs.tgt, prefixes, sources, decode, 1, "text")

    def banned_ids(
        self, banned: list[str] | None = None, decode: DecodeConfig | None = None
    ) -> list[list[int]]:
        """The piece sequences `decode.banned` and `banned` block (`banned_ids`); an NMTError for
        a phrase that cannot be banned, without translating: a server checks a request with it
        before the request joins a batch."""
        decode = decode or self.decode
        if isinstance(banned, str):  # a string would ban each of its characters
            raise NMTError(f"banned must be a list of phrases, got the string {banned!r}")
        return banned_ids(self.vocabs.tgt, [*decode.banned, *(banned or [])])

    def constraint_ids(
        self,
        texts: list[str],
        constraints: list[list[str]] | None = None,
        decode: DecodeConfig | None = None,
        *,
        prefixes: list[str] | None = None,
        banned: list[str] | None = None,
        first_line: int = 1,
        tgt_lang: str | None = None,
    ) -> list[list[list[int]]]:
        """The piece sequences each text's translation must contain (`constraints`: one list of
        phrases per text; None: `decode.constraints` for every text), one list per text ([] for
        a blank text), without translating: a server checks a request with it before the request
        joins a batch. An NMTError names the text (numbered from `first_line`) whose constraints
        cannot be met: a blank phrase, a piece the target vocabulary lacks, a banned phrase
        (`decode.banned` and `banned`) inside one, more pieces than the length limit leaves after
        the text's forced prefix (`prefixes`, or `decode.prefix`), or decode.strategy other than
        beam. `tgt_lang` as `translate_full`."""
        decode = decode or self.decode
        sources = self.sources(texts, decode, tgt_lang, warn=False)
        wanted = [decode.prefix] * len(texts) if prefixes is None else prefixes
        forced = prefix_ids(self.vocabs.tgt, wanted, sources, decode, first_line, "text")
        required = self._required(sources, constraints, forced, banned, decode, first_line, "text")
        return sources.place(required, lambda i: [])

    def _required(
        self,
        sources: Sources,
        constraints: list[list[str]] | None,
        forced: list[list[int]],
        banned: list[str] | None,
        decode: DecodeConfig,
        first_line: int,
        noun: str,
    ) -> list[list[list[int]]]:
        """`constraint_ids` of the non-blank texts, in the order of `sources.ids`."""
        total = sources.total
        if constraints is None:
            constraints = [decode.constraints] * total
        elif isinstance(constraints, str) or len(constraints) != total:
            raise NMTError(
                f"constraints must be one list of phrases per text: {total} texts, got "
                f"{constraints!r}"[:300]
            )
        if any(constraints) and decode.strategy != Strategy.beam:
            raise NMTError(NEED_BEAM)
        blocked = [*decode.banned, *(banned or [])]
        forms = {b: banned_ids(self.vocabs.tgt, [b]) for b in blocked if any(constraints)}
        out = []
        for k, i in enumerate(sources.index):
            where = f"{noun} {first_line + i}: "
            phrases = constraints[i] or []
            if isinstance(phrases, str):  # a string would be a list of its characters
                raise NMTError(f"{where}constraints must be a list of phrases, got {phrases!r}")
            ids = [constraint_ids(self.vocabs.tgt, phrase, where) for phrase in phrases]
            for phrase, pieces in zip(phrases, ids):
                for word, spellings in forms.items():
                    if any(holds(pieces, form) for form in spellings):
                        raise NMTError(
                            f"{where}the constraint {phrase!r} contains the banned phrase "
                            f"{word!r}: no translation could hold it"
                        )
            why = ids and problem(ids, forced[k], decode.max_len(len(sources.ids[k])), [])
            if why:
                raise NMTError(where + why)
            out.append(ids)
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
        """The best translation of each text (into `tgt_lang`: see `translate_full`)."""
        full = self.translate_full(
            texts, False, decode=decode, first_line=first_line, prefixes=prefixes, banned=banned,
            constraints=constraints, tgt_lang=tgt_lang,
        )  # fmt: skip
        return [t.text for t in full]

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
        search tree (`nmt.beam_tree`); `banned` phrases, with `decode.banned`, appear in no
        translation (`banned_ids`; a forced prefix is forced even if it holds one);
        `constraints` (one list of phrases per text) replace `decode.constraints`, and appear in
        every translation (`constraint_ids` says which are refused: an NMTError naming the line;
        `Translation.constraint_spans` says where they are). `tgt_lang` picks the target
        language of a model trained with target tags (data.corpora): its tag is put before each
        source (`target_prefix`; optional where the model has one target language)."""
        decode = decode or self.decode
        if decode is not self.decode:
            self.check(decode)
        sources = self.sources(texts, decode, tgt_lang, first_line)
        wanted = [decode.prefix] * len(texts) if prefixes is None else prefixes
        forced_ids = prefix_ids(self.vocabs.tgt, wanted, sources, decode, first_line)
        blocked = self.banned_ids(banned, decode)
        required = self._required(
            sources, constraints, forced_ids, banned, decode, first_line, "line"
        )
        try:
            searched = search_all(
                self.model, sources.ids, decode, self.device, attention, self.lexicon,
                forced_ids if any(forced_ids) else None, tree, blocked or None,
                required if any(required) else None,
            )  # fmt: skip
        except Unmet as err:  # name the line rather than the source's place among the non-blank
            raise NMTError(
                f"line {first_line + sources.index[err.source]}: no translation could meet its "
                "constraints within the length limit (a banned phrase or decode.no_repeat_ngram "
                "blocks a piece they need)"
            ) from err
        nbests = [d.nbest for d in searched]
        flat = [h.tokens for hyps in nbests for h in hyps]
        # byte pieces could decode to a newline: clean() keeps every text on one line
        decoded = iter([clean(t) for t in self.vocabs.tgt.decode(flat)] if flat else [])
        results = []
        for i, ids, hyps, forced, done, phrases in zip(
            sources.index, sources.ids, nbests, forced_ids, searched, required
        ):
            nbest = [(next(decoded), h.normalized) for h in hyps]
            pieces = [self.vocabs.tgt.id_to_piece(h.tokens + [EOS] * h.ended) for h in hyps]
            results.append(
                Translation(
                    source=texts[i],
                    text=nbest[0][0],
                    src_pieces=self.vocabs.src.id_to_piece(ids),
                    tgt_pieces=pieces[0],
                    maps=hyps[0].attention,
                    score=hyps[0].score,
                    nbest=nbest,
                    nbest_maps=[(p, h.attention) for p, h in zip(pieces, hyps)]
                    if attention
                    else [],
                    prefix_score=hyps[0].prefix_score if forced else None,
                    prefix_pieces=len(forced),
                    tree=None if done.tree is None else _with_pieces(done.tree, self.vocabs.tgt),
                    constraint_spans=spans(hyps[0].tokens, phrases),
                )
            )
        return sources.place(results, lambda i: _blank(texts[i]))

    def score(
        self,
        sources: list[str],
        translations: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        tgt_lang: str | None = None,
    ) -> list[Scored]:
        """What the model thinks of each given translation of its source: the log-probability
        of each of its pieces and of the EOS after them, their total, and the total with
        `decode`'s length penalty (`nmt.scoring`). N pairs in, N scores out, in order; the search
        would have reported the same score for the same pieces. A source longer than
        `decode.max_src_pieces` is cut as `translate` cuts it (a warning names its line); a blank
        source is the empty sentence (EOS alone), a blank translation scores the EOS alone;
        pieces the target vocabulary lacks are scored as <unk> (a warning names the line).
        Of `decode`, the length penalty, batch size, source cap, shortlist and precision count;
        the search's settings (strategy, length limits, `prefix`) have no part in scoring."""
        if len(sources) != len(translations):
            raise NMTError(f"{len(sources)} sources but {len(translations)} translations")
        decode = decode or self.decode
        if decode is not self.decode:
            self.check(decode)
        read = self.sources(sources, decode, tgt_lang, first_line)
        src_ids = read.place(read.ids, lambda i: [EOS])
        texts = [clean(t) for t in translations]
        tgt_ids = self.vocabs.tgt.encode(texts) if any(texts) else [[] for _ in texts]
        for i, ids in enumerate(tgt_ids):
            if UNK in ids:
                log.warning(
                    "line %d: the translation has characters the target vocabulary lacks; "
                    "they are scored as <unk>", first_line + i,
                )  # fmt: skip
        logprobs = score_ids(self.model, src_ids, tgt_ids, decode, self.device, self.lexicon)
        return [
            Scored(
                source=source,
                translation=text,
                score=math.fsum(values),
                normalized=decode.normalize(math.fsum(values), len(values)),
                pieces=self.vocabs.tgt.id_to_piece(ids + [EOS]),
                piece_scores=values,
            )
            for source, text, ids, values in zip(sources, texts, tgt_ids, logprobs)
        ]


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
