"""The `Translator`: a trained model with its vocabularies, the library's way to translate.

    translator = Translator.from_checkpoint("runs/NAME/checkpoints/best")
    translator.translate(["Ein Hund läuft."])                                  # best translations
    translator.translate_full(texts, decode=DecodeConfig(strategy=Strategy.beam, n_best=3))
    translator.translate(["Ein Hund läuft."], prefixes=["A dog"])              # "what if"
    translator.translate(["Ein Hund läuft."], banned=["runs", "a dog"])        # never these
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
from nmt.config import DecodeConfig
from nmt.device import check_precision, resolve_device
from nmt.errors import NMTError
from nmt.inputs import clean, prefix_ids, read_sources
from nmt.lexicon import NO_LEXICON, Lexicon
from nmt.models import restore_model
from nmt.models.ensemble import check_options, load_ensemble
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import CheckpointsConfig
from nmt.scoring import Scored, score_ids
from nmt.search import search_all
from nmt.tokenizer import EOS, UNK, Vocab, Vocabs

log = logging.getLogger(__name__)

# the most piece sequences one banned phrase is blocked as (see `banned_ids`)
MAX_BANNED_FORMS = 256


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
    ) -> None:
        """`lexicon` (the checkpoint's) is needed by `decode.shortlist` alone; `decode` is what
        a call without settings of its own decodes with (default: greedy)."""
        self.model = model.eval()
        self.vocabs = vocabs
        self.device = device
        self.lexicon = lexicon
        self.decode = decode or DecodeConfig()
        self.check(self.decode)

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
            restore_model(ckpt, dev), ckpt.vocabs, dev, ckpt.lexicon, decode or ckpt.config.decode
        )

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
        return cls(model, first.vocabs, dev, first.lexicon, decode or first.config.decode)

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
        """Raise NMTError if these settings cannot run here (precision, shortlist)."""
        check_precision(self.device, decode.precision, "decode.precision")
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
        self, texts: list[str], prefixes: list[str], decode: DecodeConfig | None = None
    ) -> None:
        """Raise NMTError if a prefix cannot be forced on its text (see the module's notes),
        without translating: a server checks a request before it joins a batch."""
        decode = decode or self.decode
        sources = read_sources(self.vocabs.src, texts, decode.max_src_pieces, warn=False)
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

    def translate(
        self,
        texts: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        prefixes: list[str] | None = None,
        banned: list[str] | None = None,
    ) -> list[str]:
        """The best translation of each text."""
        full = self.translate_full(
            texts, False, decode=decode, first_line=first_line, prefixes=prefixes, banned=banned
        )
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
    ) -> list[Translation]:
        """The best translation of each text with its n-best list and (when `attention`) its
        attention maps. A text longer than `decode.max_src_pieces` is translated from its first
        pieces, with a warning logged that names its line (`first_line` numbers the first).
        `prefixes` (one per text, "" for none) replace `decode.prefix`; `tree` returns each
        search tree (`nmt.beam_tree`); `banned` phrases, with `decode.banned`, appear in no
        translation (`banned_ids`; a forced prefix is forced even if it holds one)."""
        decode = decode or self.decode
        if decode is not self.decode:
            self.check(decode)
        sources = read_sources(self.vocabs.src, texts, decode.max_src_pieces, first_line)
        wanted = [decode.prefix] * len(texts) if prefixes is None else prefixes
        forced_ids = prefix_ids(self.vocabs.tgt, wanted, sources, decode, first_line)
        blocked = self.banned_ids(banned, decode)
        searched = search_all(
            self.model, sources.ids, decode, self.device, attention, self.lexicon,
            forced_ids if any(forced_ids) else None, tree, blocked or None,
        )  # fmt: skip
        nbests = [d.nbest for d in searched]
        flat = [h.tokens for hyps in nbests for h in hyps]
        # byte pieces could decode to a newline: clean() keeps every text on one line
        decoded = iter([clean(t) for t in self.vocabs.tgt.decode(flat)] if flat else [])
        results = []
        for i, ids, hyps, forced, done in zip(
            sources.index, sources.ids, nbests, forced_ids, searched
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
        read = read_sources(self.vocabs.src, sources, decode.max_src_pieces, first_line)
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


def banned_ids(vocab: Vocab, phrases: list[str]) -> list[list[int]]:
    """The target piece sequences that banning `phrases` blocks, each a list of ids.

    A phrase (whitespace collapsed, as every text) is blocked wherever it starts a word: at the
    start of the translation or after a space, where sentencepiece writes it with its leading
    "▁" ("sleeps" -> "▁sleeps"; "a dog" -> "▁a▁dog"). Every way to write that string with
    pieces of the vocabulary is blocked, not only the one sentencepiece would choose (a model may
    produce "▁s" "leeps" as well as "▁sleeps"), up to MAX_BANNED_FORMS sequences per phrase (the
    ones with the fewest pieces, with a warning). So the phrase is blocked also where it starts
    a longer word whose pieces end where it ends ("sleeps" in "▁sleeps" "y").
    Not blocked: the phrase inside a word or after anything but a space (a quote mark, a
    hyphen), its other casings ("Sleeps"), and pieces that cross its last character ("▁sleep"
    "sy"). A phrase the vocabulary cannot write (a character it lacks) cannot appear, and is
    skipped with a warning; a blank phrase is an NMTError naming it."""
    out: list[list[int]] = []
    for phrase in phrases:
        text = clean(phrase)
        pieces = vocab.sp.Encode(text, out_type=str) if text else []
        if not pieces:
            raise NMTError(f"the banned phrase {phrase!r} has no pieces: nothing to ban")
        written = "".join(pieces)  # normalized, with "▁" where a word starts
        if not written.startswith("▁"):  # no dummy prefix in this tokenizer: the word form
            written = "▁" + written
        forms = _segmentations(vocab, written)
        if not forms:
            log.warning("the banned phrase %r cannot be written by the model: skipped", phrase)
        out.extend(forms)
    return out


def _segmentations(vocab: Vocab, written: str) -> list[list[int]]:
    """Every sequence of the vocabulary's pieces (specials excluded) that spells `written`, the
    fewest pieces first, at most MAX_BANNED_FORMS of them."""
    size = len(written)
    # ends[i]: the (end, id) of every piece that starts at character i
    ends: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    for i in range(size):
        for j in range(i + 1, size + 1):
            piece = vocab.piece_to_id(written[i:j])
            if piece > EOS:  # not PAD, UNK (a piece the vocabulary lacks), BOS or EOS
                ends[i].append((j, piece))
    # complete[i]: the ways to spell written[i:], built from the end, capped as they grow
    complete: list[list[list[int]]] = [[] for _ in range(size)] + [[[]]]
    truncated = False
    for i in range(size - 1, -1, -1):
        ways = [[piece, *rest] for j, piece in ends[i] for rest in complete[j]]
        ways.sort(key=len)
        truncated |= len(ways) > MAX_BANNED_FORMS
        complete[i] = ways[:MAX_BANNED_FORMS]
    if truncated:
        log.warning(
            "the banned phrase %r has more than %d spellings in pieces: only the %d with the "
            "fewest pieces are blocked", written.replace("▁", " ").strip(), MAX_BANNED_FORMS,
            MAX_BANNED_FORMS,
        )  # fmt: skip
    return complete[0]


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
