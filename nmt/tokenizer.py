"""SentencePiece tokenizers: trained on the training split, stored beside the model, or an
imported Marian model's (`MarianVocab`).

The special ids are defined here once; every other module imports them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import sentencepiece as spm

from nmt.config import TokenizerConfig
from nmt.errors import NMTError

log = logging.getLogger(__name__)

PAD, UNK, BOS, EOS = 0, 1, 2, 3
CHUNK_LINES = 10_000  # lines encoded at a time when a whole text is read as a stream
# sentencepiece's list calls start a pool of threads each time: for one sentence 160 us against
# 10 us one text at a time (1.5 ms beside a translation's torch threads on 2 cores); the pool
# pays from a few dozen texts on
ONE_BY_ONE = 32

JOINT_FILE = "spm.model"
SRC_FILE = "spm.src.model"
TGT_FILE = "spm.tgt.model"
# the sentencepiece ids a side keeps when its vocabulary is pruned (id, tab, piece per line)
KEPT_FILES = {"src": "pieces.src.tsv", "tgt": "pieces.tgt.tsv"}
# an imported Marian model's tokenizer (`MarianVocab`): one sentencepiece model per side and the
# piece list both share
MARIAN_FILES = {"src": "source.spm", "tgt": "target.spm", "pieces": "pieces.marian.json"}
# an imported NLLB-200 / M2M-100 model's: one sentencepiece model for both sides, and the piece
# list with the ids decoding leaves out (language codes, fairseq's extra specials)
M2M_FILES = {"spm": "sentencepiece.bpe.model", "pieces": "pieces.m2m.json"}
# an imported T5 / mT5 / MADLAD-400 model's: the same, under T5's name for its sentencepiece model
T5_FILES = {"spm": "spiece.model", "pieces": "pieces.t5.json"}
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # PAD, UNK, BOS, EOS
_SPACE = re.compile(r"[\s\ufeff]+")  # whitespace, and a byte-order mark left by some editors


def clean(text: str) -> str:
    """Collapse whitespace runs (tabs, newlines, NBSP, byte-order marks...) to one space and strip
    the ends. Applied to sources, references and outputs alike: no output holds a newline."""
    return _SPACE.sub(" ", text).strip()


class Vocab:
    """One sentencepiece model: raw text <-> ids.

    With `kept` (distinct sentencepiece ids, the specials first), the vocabulary is pruned to
    those pieces: id i is the piece `kept[i]`, and a piece outside the list encodes as UNK. A
    target side pruned to the pieces of its training text makes the output layer, the costliest
    layer of training and decoding, as small as the data allows (Multi30k's English uses 3,849
    of a joint model's 8,000 pieces)."""

    def __init__(self, path: Path, kept_path: Path | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise NMTError(f"tokenizer model not found: {self.path}")
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.Load(str(self.path))
        except (OSError, RuntimeError) as err:
            raise NMTError(f"cannot read tokenizer model {self.path}: {err}") from err
        if (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (
            PAD,
            UNK,
            BOS,
            EOS,
        ):
            raise NMTError(f"{self.path} was not trained by nmt (special ids differ)")
        self.kept_path = None if kept_path is None else Path(kept_path)
        self.kept: list[int] | None = None  # our id -> sentencepiece id
        self._ours: list[int] = []  # sentencepiece id -> our id
        if self.kept_path is not None:
            self.kept = _read_kept(self.kept_path, self.sp.GetPieceSize())
            self._ours = [UNK] * self.sp.GetPieceSize()
            for ours, piece in enumerate(self.kept):
                self._ours[piece] = ours

    def __len__(self) -> int:
        return self.sp.GetPieceSize() if self.kept is None else len(self.kept)

    def encode(self, texts: list[str]) -> list[list[int]]:
        ids = _encode(self.sp, texts, int)
        if self.kept is None:
            return ids
        ours = self._ours
        return [[ours[i] for i in line] for line in ids]

    def nbest(self, texts: list[str], n: int) -> list[list[list[int]]]:
        """Per text, its `n` best segmentations (fewer where a short text has fewer), best first,
        in our ids. With a pruned vocabulary, those that use a piece it lacks are left out (they
        would read as <unk>): the best one stays wherever `encode` gives no pruned <unk>."""
        out = self.sp.NBestEncode(texts, nbest_size=n, out_type=int)
        if self.kept is None:
            return out
        ours = self._ours
        return [
            [[ours[i] for i in seg] for seg in segs if all(ours[i] != UNK or i == UNK for i in seg)]
            for segs in out
        ]

    def pieces(self, text: str) -> list[str]:
        return self.id_to_piece(self.encode([text])[0])  # pruned pieces show as <unk>

    def _sp_ids(self, ids: list[int]) -> list[int]:
        return ids if self.kept is None else [self.kept[i] for i in ids]

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.sp.IdToPiece(i) for i in self._sp_ids(ids)]

    def piece_to_id(self, piece: str) -> int:
        sp_id = self.sp.PieceToId(piece)
        return sp_id if self.kept is None else self._ours[sp_id]

    def decode(self, ids: list[list[int]]) -> list[str]:
        lines = [self._sp_ids(line) for line in ids]
        if len(lines) <= ONE_BY_ONE:  # (see ONE_BY_ONE)
            return [self.sp.Decode(line) for line in lines]
        return self.sp.Decode(lines)

    @cached_property
    def piece_ids(self) -> dict[str, int]:
        """Every piece a model with this vocabulary can produce, by its text: the specials
        (PAD, UNK, BOS, EOS) and pruned pieces left out. What a phrase is spelled with
        (`nmt.translation.phrases`)."""
        out = {}
        for sp_id in range(self.sp.GetPieceSize()):
            ours = sp_id if self.kept is None else self._ours[sp_id]
            if ours > EOS:
                out[self.sp.IdToPiece(sp_id)] = ours
        return out

    @cached_property
    def longest_piece(self) -> int:
        """The characters of the longest of `piece_ids` (at least 1)."""
        return max(map(len, self.piece_ids), default=1)

    def files(self) -> list[Path]:
        return [self.path] + ([] if self.kept_path is None else [self.kept_path])

    def digest(self) -> str:
        """A fingerprint of the model file (and the pruned list), stored in checkpoints to catch a
        swapped vocabulary."""
        sha = hashlib.sha256(self.path.read_bytes())
        if self.kept is not None:
            sha.update(",".join(map(str, self.kept)).encode())
        return sha.hexdigest()


class MarianVocab(Vocab):
    """An imported model's tokenizer (`nmt.pretrained`): a sentencepiece model cuts text into
    pieces, and a piece list gives their ids (rewritten with nmt's four specials first: item i
    is the piece of id i). A piece the list lacks is UNK. Decoding leaves the specials out, and
    the `hidden` ids too (an NLLB model's language codes). Subword sampling is not offered
    (`nbest`).

    Marian (OPUS-MT) has one sentencepiece model per side and one list for both (Hugging Face's
    vocab.json); a text that starts with a language code (">>fra<<") keeps it as one piece, as
    `MarianTokenizer` does (`codes_in_text`). NLLB-200 and M2M-100 have one sentencepiece model
    for both sides (`M2M_FILES`)."""

    def __init__(
        self,
        path: Path,
        pieces_path: Path,
        list_: list[str] | None = None,
        hidden: Sequence[int] = (),
        codes_in_text: bool = True,
    ) -> None:
        self.path, self.kept_path = Path(path), Path(pieces_path)
        self.kept = None
        self.sp = spm.SentencePieceProcessor()
        try:
            self.sp.Load(str(self.path))
            self.list = list_ or json.loads(self.kept_path.read_text("utf-8"))
        except (OSError, RuntimeError, ValueError) as err:
            raise NMTError(f"cannot read the tokenizer {self.path}: {err}") from err
        if tuple(self.list[: EOS + 1]) != SPECIAL_PIECES:
            raise NMTError(f"{self.kept_path} is not a piece list written by nmt")
        self._ids = {piece: i for i, piece in enumerate(self.list)}
        self.hidden = frozenset(hidden)
        self.codes_in_text = codes_in_text

    def __len__(self) -> int:
        return len(self.list)

    def encode(self, texts: list[str]) -> list[list[int]]:
        if self.codes_in_text:
            codes, rest = zip(*map(_language_code, texts)) if texts else ((), ())
        else:
            codes, rest = [[]] * len(texts), texts
        pieces = _encode(self.sp, list(rest), str)
        ids = self._ids
        return [[ids.get(p, UNK) for p in code + line] for code, line in zip(codes, pieces)]

    def nbest(self, texts: list[str], n: int) -> list[list[list[int]]]:
        raise NMTError("subword sampling (data.tokenizer.sample_alpha) needs nmt's own tokenizer")

    def id_to_piece(self, ids: list[int]) -> list[str]:
        return [self.list[i] for i in ids]

    def piece_to_id(self, piece: str) -> int:
        return self._ids.get(piece, UNK)

    def decode(self, ids: list[list[int]]) -> list[str]:
        hidden = self.hidden
        pieces = [[self.list[i] for i in line if i > EOS and i not in hidden] for line in ids]
        return [self.sp.DecodePieces(line) for line in pieces]

    @cached_property
    def piece_ids(self) -> dict[str, int]:
        return {p: i for i, p in enumerate(self.list) if i > EOS and i not in self.hidden}

    def digest(self) -> str:
        return hashlib.sha256(self.path.read_bytes() + self.kept_path.read_bytes()).hexdigest()


def _encode(sp: spm.SentencePieceProcessor, texts: list[str], out_type: type) -> list[list]:
    """sentencepiece's Encode of each text: one call per text for a few (see ONE_BY_ONE)."""
    if len(texts) <= ONE_BY_ONE:
        return [sp.Encode(text, out_type=out_type) for text in texts]
    return sp.Encode(texts, out_type=out_type)


def _language_code(text: str) -> tuple[list[str], str]:
    """A leading ">>xx<<" as a piece of its own, and the rest of the text."""
    end = text.find("<<") if text.startswith(">>") else -1
    return ([text[: end + 2]], text[end + 2 :]) if end != -1 else ([], text)


@dataclass
class Vocabs:
    src: Vocab
    tgt: Vocab

    @property
    def joint(self) -> bool:
        """One id space for both sides (what shared embeddings need): one sentencepiece model,
        and the target's ids the same pieces as the first len(tgt) source ids (`prune_vocabs`
        puts the target's pieces first)."""
        if isinstance(self.src, MarianVocab) or isinstance(self.tgt, MarianVocab):
            return self.src.kept_path == self.tgt.kept_path  # one piece list, one id space
        if self.src.path != self.tgt.path:
            return False
        if self.src.kept is None or self.tgt.kept is None:
            return self.src.kept == self.tgt.kept
        return self.src.kept[: len(self.tgt.kept)] == self.tgt.kept

    def files(self) -> list[Path]:
        return sorted(set(self.src.files()) | set(self.tgt.files()))


# the TokenizerConfig fields that decide how training text is segmented each epoch, not what the
# tokenizer is: a run may change them and keep its tokenizer (train.init_from, the cache)
SAMPLING_KEYS = ("sample_alpha", "sample_nbest", "sample_target")


class PieceSampler:
    """Draws one of a text's n best segmentations x with probability proportional to
    P(x)^alpha: subword regularization (Kudo 2018) as sentencepiece's nbest_size > 0 sampling
    does it, but from a random stream that is a pure function of (key, example, candidate), so
    another process draws the same. Why not sentencepiece's own sampler: in 0.2.3 the seed of
    SetRandomGeneratorSeed is mixed with entropy drawn once per process, so a resumed run (a new
    process) would draw other segmentations; hence a unigram model and a finite n-best size,
    which `TokenizerConfig` requires. The candidates come from `Vocab.nbest`, computed once per
    corpus (`nmt.data.tokenized`); a segmentation's log-probability is the sum of its pieces'
    scores."""

    def __init__(self, vocab: Vocab, cfg: TokenizerConfig) -> None:
        self.alpha = cfg.sample_alpha
        sp = vocab.sp
        sp_ids = range(sp.GetPieceSize()) if vocab.kept is None else vocab.kept
        self._scores = np.array([sp.GetScore(i) for i in sp_ids])  # our id -> log-probability

    def choose(
        self,
        counts: np.ndarray,
        lens: np.ndarray,
        ids: np.ndarray,
        examples: np.ndarray,
        key: tuple[int, ...],
        limit: int,
    ) -> np.ndarray:
        """Row i has `counts[i]` candidates, one after the other in `lens` (their lengths) and
        `ids` (theirs, flat); row i is example `examples[i]`. Returns, per row, the index of the
        candidate drawn among all of them, or -1 where none has at most `limit` pieces. Row i's
        draw is a pure function of (`key`, examples[i], its candidates)."""
        n, total = len(counts), len(lens)
        chosen = np.full(n, -1, dtype=np.int64)
        if total == 0:
            return chosen
        cand_of = np.repeat(np.arange(total), lens)
        score = np.bincount(cand_of, weights=self._scores[ids], minlength=total)
        # Gumbel-max: the argmax of alpha * score + Gumbel noise is a draw with probabilities
        # proportional to exp(alpha * score) = P(x)^alpha
        row_of = np.repeat(np.arange(n), counts)
        firsts = np.cumsum(counts) - counts
        rank = np.arange(total) - np.repeat(firsts, counts)
        noise = _gumbel(key, np.asarray(examples, dtype=np.int64)[row_of], rank)
        draw = np.where((lens > 0) & (lens <= limit), self.alpha * score + noise, -np.inf)
        order = np.lexsort((-draw, row_of))  # per row, the highest draw first
        has = counts > 0
        chosen[has] = order[firsts[has]]
        chosen[has & ~np.isfinite(draw[np.maximum(chosen, 0)])] = -1  # none fits
        return chosen


_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64s: a bijection that scatters nearby inputs."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _gumbel(key: tuple[int, ...], examples: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise, one value per (example, rank), a pure function of (key, example,
    rank): counter-based, so a draw never depends on which other examples share its batch."""
    state = 0x9E3779B97F4A7C15
    for part in key:  # the key's parts folded in, in order (a negative seed included)
        state = int(_mix(np.array([(state + part) & _MASK], dtype=np.uint64))[0])
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as splitmix64 means it to
        x = _mix(np.uint64(state) + examples.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        x = _mix(x + rank.astype(np.uint64))
    uniform = ((x >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53  # in (0, 1)
    return -np.log(-np.log(uniform))


def _read_kept(path: Path, size: int) -> list[int]:
    try:
        kept = [int(line.split("\t", 1)[0]) for line in path.read_text("utf-8").splitlines()]
    except (OSError, ValueError) as err:
        raise NMTError(f"cannot read the pruned vocabulary {path}: {err}") from err
    if kept[: EOS + 1] != [PAD, UNK, BOS, EOS] or len(set(kept)) != len(kept) or max(kept) >= size:
        raise NMTError(f"{path} is not a pruned vocabulary written by nmt")
    return kept


def prune_vocabs(
    vocabs: Vocabs,
    src_lines: Iterable[str],
    tgt_lines: Iterable[str],
    out_dir: Path,
    shared: bool,
    symbols: Sequence[str] = (),
) -> Vocabs:
    """Prune the target side to the pieces its training text uses (the output layer never has to
    score a piece it was never shown). `shared` (one embedding table for both sides) keeps the
    union on the source side, ordered so that the target's pieces come first: the target ids are
    then the first ids of the source's, one id space, and a tied output layer scores only the
    first len(tgt) rows of the table. The source side keeps `symbols` (language tags: pieces of
    the source that no text holds). Writes KEPT_FILES into `out_dir`. The lines are read as a
    stream, a chunk at a time."""
    specials = list(range(EOS + 1))  # the specials keep their ids
    target = set(specials) | _pieces_used(vocabs.tgt.sp, tgt_lines)
    kept = {"tgt": specials + sorted(target - set(specials))}
    if shared:
        source = _pieces_used(vocabs.src.sp, src_lines) | {
            vocabs.src.sp.PieceToId(s) for s in symbols
        }
        kept["src"] = kept["tgt"] + sorted(source - target)
    for side, ids in kept.items():
        sp = getattr(vocabs, side).sp
        lines = (f"{i}\t{sp.IdToPiece(i)}\n" for i in ids)
        (out_dir / KEPT_FILES[side]).write_text("".join(lines), "utf-8")
    return load_vocabs(out_dir)


def _pieces_used(sp: spm.SentencePieceProcessor, lines: Iterable[str]) -> set[int]:
    used: set[int] = set()
    for chunk in _chunks(lines, CHUNK_LINES):
        for ids in sp.Encode(chunk, out_type=int):
            used.update(ids)
    return used


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def train_piece_model(
    sides: list[Iterable[str]], prefix: Path, cfg: TokenizerConfig, symbols: Sequence[str] = ()
) -> Path:
    """Train one sentencepiece model on the lines of `sides` (one or two texts, each iterable
    twice: once to count, once to read); returns the path of ``prefix``.model. `symbols` (language
    tags) become pieces of their own, never split, ids EOS + 1 onwards; a text that holds one is
    an NMTError (it would read as the tag)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    try:
        _train(_sample(sides, cfg.max_sentences, symbols), prefix, cfg, symbols)
    except RuntimeError as err:  # e.g. a vocabulary smaller than the character set
        reason = str(err).split("]")[-1].strip() or str(err).strip()
        raise NMTError(f"sentencepiece training failed: {reason}") from err
    Path(f"{prefix}.vocab").unlink(missing_ok=True)  # human-readable copy; not needed
    path = Path(f"{prefix}.model")
    size = spm.SentencePieceProcessor(model_file=str(path)).GetPieceSize()
    if size < cfg.vocab_size:
        log.warning(
            "the training text holds %d pieces, fewer than data.tokenizer.vocab_size=%d: the "
            "tokenizer has %d (a small corpus; lower vocab_size to silence this)",
            size, cfg.vocab_size, size,
        )  # fmt: skip
    return path


def _sample(sides: list[Iterable[str]], most: int, symbols: Sequence[str] = ()) -> Iterator[str]:
    """The non-blank lines of `sides` in order, or, when there are more than `most`, `most` of
    them drawn reproducibly (a fixed seed; sentencepiece's own sampling is seeded per process).
    Streamed: the text is never held whole. The counting pass refuses a line holding one of
    `symbols`."""
    total = sum(1 for side in sides for line in side if line and _no_symbol(line, symbols))
    if total == 0:
        raise NMTError("the training split has no text to train the tokenizer on")
    chosen = None
    if total > most:
        chosen = np.sort(np.random.default_rng(0).choice(total, size=most, replace=False))
    k = n = 0
    for side in sides:
        for line in side:
            if not line:
                continue
            if chosen is None:
                yield line
            elif k < most and chosen[k] == n:
                k += 1
                yield line
            n += 1


def _no_symbol(line: str, symbols: Sequence[str]) -> bool:
    for symbol in symbols:
        if symbol in line:
            raise NMTError(
                f"the training text holds the tag {symbol!r} ({line[:80]!r}): a tag is a piece of "
                "its own, and text holding it would read as the tag; choose another tag "
                "(data.corpora[].src_tag / tgt_tag)"
            )
    return True


def _train(
    lines: Iterator[str], prefix: Path, cfg: TokenizerConfig, symbols: Sequence[str] = ()
) -> None:
    # only given when there are tags: the models of runs without them stay byte for byte
    extra = {"user_defined_symbols": list(symbols)} if symbols else {}
    spm.SentencePieceTrainer.Train(
        **extra,
        sentence_iterator=lines,
        model_prefix=str(prefix),
        model_type=cfg.model_type.value,
        vocab_size=cfg.vocab_size,
        byte_fallback=cfg.byte_fallback,
        character_coverage=cfg.character_coverage,
        input_sentence_size=0,  # all of `lines`: `_sample` has drawn them reproducibly
        hard_vocab_limit=False,  # tiny corpora (tests, the demo) may not fill the vocabulary
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=1,  # multi-threaded training is not bit-reproducible
        minloglevel=2,
    )


def train_vocabs(
    src_lines: Iterable[str],
    tgt_lines: Iterable[str],
    out_dir: Path,
    cfg: TokenizerConfig,
    symbols: Sequence[str] = (),
) -> Vocabs:
    """Train joint or separate models on the training split and write them into `out_dir`.
    The lines may be lists or streams that can be iterated more than once. `symbols` (language
    tags, put before sources) are reserved pieces of the source side's model."""
    for name in KEPT_FILES.values():  # a pruned list of an earlier run in this directory
        (out_dir / name).unlink(missing_ok=True)
    if cfg.joint:
        path = train_piece_model(
            [src_lines, tgt_lines], out_dir / JOINT_FILE.removesuffix(".model"), cfg, symbols
        )
        vocab = Vocab(path)
        return Vocabs(vocab, vocab)
    src = train_piece_model([src_lines], out_dir / SRC_FILE.removesuffix(".model"), cfg, symbols)
    tgt = train_piece_model([tgt_lines], out_dir / TGT_FILE.removesuffix(".model"), cfg)
    return Vocabs(Vocab(src), Vocab(tgt))


def load_vocabs(directory: Path) -> Vocabs:
    """Load the models written by `train_vocabs` (from a run or a checkpoint directory), pruned
    where `prune_vocabs` left its lists."""
    for files in (M2M_FILES, T5_FILES):
        listed = directory / files["pieces"]
        if not listed.is_file():
            continue
        try:
            table = json.loads(listed.read_text("utf-8"))
        except (OSError, ValueError) as err:
            raise NMTError(f"cannot read {listed}: {err}") from err
        vocab = MarianVocab(directory / files["spm"], listed, table["pieces"],
                            table["hidden"], codes_in_text=False)  # fmt: skip
        return Vocabs(vocab, vocab)
    if (directory / MARIAN_FILES["pieces"]).is_file():
        pieces = directory / MARIAN_FILES["pieces"]
        return Vocabs(
            MarianVocab(directory / MARIAN_FILES["src"], pieces),
            MarianVocab(directory / MARIAN_FILES["tgt"], pieces),
        )
    if (directory / JOINT_FILE).is_file():
        src_model = tgt_model = directory / JOINT_FILE
    elif (directory / SRC_FILE).is_file():
        src_model, tgt_model = directory / SRC_FILE, directory / TGT_FILE
    else:
        raise NMTError(f"no tokenizer ({JOINT_FILE} or {SRC_FILE}) in {directory}")
    kept = {side: directory / name for side, name in KEPT_FILES.items()}
    kept = {side: path if path.is_file() else None for side, path in kept.items()}
    src = Vocab(src_model, kept["src"])
    if tgt_model == src_model and kept["tgt"] == kept["src"]:
        return Vocabs(src, src)
    return Vocabs(src, Vocab(tgt_model, kept["tgt"]))
