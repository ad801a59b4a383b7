"""Which translations to trust: calibrated confidence per piece, per word and per sentence.

    calibration = Calibration.load(ckpt_dir, "beam") or fit(translator, src, ref).calibration
    found = measure(translator, sources, translations, calibration)
    found[0].sentence   # 0.83: the probability that the translation is good (below)
    found[0].words      # each whitespace word's probability, from its pieces'
    found[0].flags      # ["repeats"], ["copies the source"], ["too short"], ...

The raw signal is the model's own: each piece's log-probability, read off the search's own steps
(`Request.statistics`, `judge`) or by teacher forcing the translation (`measure`,
`nmt.translation.scoring.piece_statistics`): the same numbers. It is miscalibrated at inference
(Wang et al. 2020): an isotonic map of the log-probability, fitted on the validation split
(`nmt.translation.calibrators.isotonic`), makes a piece given 0.8 right about 80% of the time
(right: in the longest common subsequence of the translation's and the reference's pieces,
difflib's matching, the labels of Wang et al.'s token-level inference ECE). Measured against a
temperature with a logistic map after it (Platt scaling) on Multi30k, it leaves a fifth of
their error on held-out data (docs/confidence.md). A word's probability is the product of its
pieces'.

The sentence: "good" means a sentence chrF of at least GOOD_CHRF against the reference. The
mean log-probability of the pieces (TP of Fomicheva et al. 2020), the source's length, the
length ratio and the translation's lexical agreement with its source
(`nmt.translation.agreement`: words the source does not hold, words of it left out) feed a linear
predictor of sentence chrF, least squares on valid; a logistic map of the prediction, fitted on
valid too, gives P(good): among sentences given 0.8, about 80% are good. `fit` chose these by
measurement (docs/confidence.md): the predictor ranks sentences better than TP alone.

The calibration travels with the checkpoint as calibration.json. A checkpoint without one (an
import, a run older than it), or with one fitted on other features by an older nmt, gives the
uncalibrated reading: each piece's own probability and P(good) from TP through a fixed logistic
(`Calibration()`), with a warning where a command reads it.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from sacrebleu.metrics import CHRF

from nmt.config import DecodeConfig, Strategy
from nmt.errors import NMTError
from nmt.tokenizer import EOS, SPECIAL_PIECES
from nmt.translation.agreement import agreement
from nmt.translation.calibrators import (
    expected_calibration_error,
    isotonic,
    isotonic_at,
    least_squares,
    logistic,
    sigmoid,
    spearman,
)
from nmt.translation.flags import Flagger
from nmt.translation.scoring import read_pairs

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"
GOOD_CHRF = 50.0  # a translation is "good" with a sentence chrF of at least this
FEATURES = ("mean_logprob", "log_source_pieces", "log_length_ratio", "lexical_precision",
            "lexical_recall")  # fmt: skip
WORD_START = "\u2581"
EOS_PIECE = SPECIAL_PIECES[-1]  # "</s>", in nmt's vocabularies and in the imported ones


@dataclass
class Calibration:
    # the logits are divided by it before the log-probabilities are read (1: as the model
    # gives them; the isotonic map below needs no other)
    temperature: float = 1.0
    # a piece's probability: the isotonic map of its log-probability, a step function (each
    # step's largest log-probability, ascending, and its probability); none: exp(log p)
    token_knots: list[float] = field(default_factory=list)
    token_values: list[float] = field(default_factory=list)
    # sentence chrF ~ weights . features + bias; the uncalibrated default reads TP alone
    features: list[str] = field(default_factory=lambda: list(FEATURES))
    weights: list[float] = field(default_factory=lambda: [100.0, 0.0, 0.0, 0.0, 0.0])
    bias: float = 100.0
    # P(good) = sigmoid(scale * (predicted chrF - GOOD_CHRF) + shift)
    scale: float = 0.1
    shift: float = 0.0
    flags: Flagger = field(default_factory=Flagger)
    fitted: dict = field(default_factory=dict)  # on what: split, sentences, decode; {}: not fitted

    def save(self, directory: Path) -> None:
        """Into the directory's CALIBRATION_FILE, beside the fits it holds for the other kind of
        search (`search_kind`), replacing one for the same kind."""
        path = Path(directory) / CALIBRATION_FILE
        fits = _read_fits(path)
        fits[self.fitted.get("search", "greedy")] = asdict(self)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"fits": fits}, indent=1) + "\n")
        os.replace(tmp, path)  # a reader sees the whole file or none

    @classmethod
    def load(cls, directory: Path, kind: str) -> Calibration | None:
        """The calibration a checkpoint directory holds for a kind of search (`search_kind`);
        None where it has none (or one fitted on other features, by an older nmt)."""
        data = _read_fits(Path(directory) / CALIBRATION_FILE).get(kind)
        if data is None:
            return None
        data["flags"] = Flagger(**data.get("flags", {}))
        return cls(**data)

    def predict(self, features: list[float]) -> float:
        return sum(w * x for w, x in zip(self.weights, features)) + self.bias

    def probability(self, predicted: float) -> float:
        return sigmoid(self.scale * (predicted - GOOD_CHRF) + self.shift)

    def piece_probability(self, logprob: float) -> float:
        """A piece's calibrated probability from its log-probability at the temperature; the
        uncalibrated reading is the plain probability."""
        if not self.token_knots:
            return math.exp(logprob)
        return isotonic_at(self.token_knots, self.token_values, max(logprob, -30.0))


@dataclass
class Confidence:
    sentence: float  # P(good)
    words: list[float]  # each whitespace word of the translation
    pieces: list[float]  # each target piece, the end of sentence last
    flags: list[str]  # why the translation looks degenerate ([] when it does not)
    predicted_chrf: float
    features: list[float]


def measure(
    translator,
    sources: list[str],
    translations: list[str],
    calibration: Calibration,
    tgt_lang: str | None = None,
    decode: DecodeConfig | None = None,
    src_lang: str | None = None,
) -> list[Confidence]:
    """Each translation's confidence (see the module's notes); N pairs in, N out. `src_lang`:
    the sources' language, where the model reads a code for it (else the translator's)."""
    stats, pairs = _statistics(translator, sources, translations, (calibration.temperature,),
                               tgt_lang, decode, src_lang)  # fmt: skip
    agreed = agreement(translator.lexicon, pairs.src, pairs.tgt)
    return [
        _judged(calibration, source, text, len(src), translator.vocabs.tgt.id_to_piece(
            tgt + [EOS]), rows[:, 0], len(tgt) + 1, lexical)
        for source, text, src, tgt, rows, lexical in zip(sources, pairs.texts, pairs.src,
                                                          pairs.tgt, stats, agreed)
    ]  # fmt: skip


def judge(
    translation, calibration: Calibration, lexical: tuple[float, float] = (0.0, 0.0)
) -> Confidence:
    """A translation's confidence read off its own search (a `Translation` of a request with
    `statistics=calibration.temperature`): what `measure` computes from the same pieces by
    teacher forcing, at no second pass. A translation the length limit ended has no EOS row;
    its length counts one, as teacher forcing scores it. `lexical`: its `agreement` with its
    source (`judge_all` computes it)."""
    rows = translation.statistics
    if rows is None:
        raise NMTError("judge: the translation carries no statistics (Request.statistics)")
    pieces = translation.tgt_pieces[len(translation.tgt_pieces) - rows.size(0) :]
    ended = bool(pieces) and pieces[-1] == EOS_PIECE
    return _judged(
        calibration, translation.source, translation.text, len(translation.src_pieces), pieces,
        rows[:, 0], rows.size(0) + (not ended), lexical,
    )  # fmt: skip


def judge_all(
    translator,
    translations: list,
    calibration: Calibration,
    tgt_lang: str | None = None,
    src_lang: str | None = None,
) -> list[Confidence]:
    """Each `Translation`'s confidence: read off its search where it carries the statistics
    (`judge`), by one teacher-forced pass over the others (`measure`: a blank source's, which
    no search ran for; `tgt_lang` and `src_lang` as the translations were asked)."""
    agreed = iter(_agreement_of(translator, [t for t in translations if t.statistics is not None]))
    out: list[Confidence | None] = [
        None if t.statistics is None else judge(t, calibration, next(agreed)) for t in translations
    ]
    rest = [i for i, c in enumerate(out) if c is None]
    if rest:
        found = measure(translator, [translations[i].source for i in rest],
                        [translations[i].text for i in rest], calibration, tgt_lang,
                        src_lang=src_lang)  # fmt: skip
        for i, c in zip(rest, found):
            out[i] = c
    return out  # type: ignore[return-value]


def _agreement_of(translator, translations: list) -> list[tuple[float, float]]:
    """`agreement` of translations by their pieces."""
    src, tgt = translator.vocabs.src, translator.vocabs.tgt
    sources = [[src.piece_to_id(p) for p in t.src_pieces] for t in translations]
    targets = [[tgt.piece_to_id(p) for p in t.tgt_pieces] for t in translations]
    return agreement(translator.lexicon, sources, targets)


def _judged(calibration: Calibration, source: str, text: str, src_len: int, pieces: list[str],
            logprobs: torch.Tensor, length: int,
            lexical: tuple[float, float]) -> Confidence:  # fmt: skip
    """One translation's Confidence from its pieces' log-probabilities (at the temperature);
    `length`: its pieces and the EOS, `src_len`: its source's pieces (tag and EOS included),
    `lexical`: its agreement with its source."""
    features = _features(logprobs, src_len, length, lexical)
    predicted = calibration.predict(features)
    probs = [calibration.piece_probability(x) for x in logprobs.tolist()]
    flags = calibration.flags.check(source, text, src_len, length)
    return Confidence(
        calibration.probability(predicted), _word_probs(pieces, probs), probs, flags, predicted,
        features,
    )  # fmt: skip


def combine(parts: list[Confidence]) -> Confidence:
    """A text's confidence from its sentences' (a paragraph split): the least confident
    sentence's P(good), every word's and flag in order. A text of no sentence is certain."""
    if not parts:
        return Confidence(1.0, [], [], [], 100.0, [])
    weakest = min(parts, key=lambda c: c.sentence)
    flags = list(dict.fromkeys(f for c in parts for f in c.flags))
    words = [w for c in parts for w in c.words]
    pieces = [p for c in parts for p in c.pieces]
    return Confidence(weakest.sentence, words, pieces, flags, weakest.predicted_chrf,
                      weakest.features)  # fmt: skip


SEARCH_KINDS = ("beam", "greedy")


def search_kind(decode: DecodeConfig) -> str:
    """Which of a checkpoint's calibrations serves `decode`: "beam", or "greedy" (sampling
    too). A calibration belongs to the search it was fitted on: how often a piece of a given
    probability is right differs between the two kinds' outputs (docs/confidence.md)."""
    return "beam" if decode.strategy == Strategy.beam else "greedy"


def for_checkpoint(path: Path | str, kind: str) -> Calibration:
    """The calibration stored with a checkpoint for a kind of search (`search_kind`); else the
    one for the other kind, or the uncalibrated reading, with a warning."""
    found = Calibration.load(Path(path), kind)
    if found is not None:
        return found
    other = "greedy" if kind == "beam" else "beam"
    found = Calibration.load(Path(path), other)
    how = f"nmt-evaluate ckpt={path} decode={kind} confidence=true fits one"
    if found is not None:
        log.warning("%s has no confidence calibration for %s search, only for %s: it serves "
                    "(%s)", path, kind, other, how)  # fmt: skip
        return found
    log.warning("%s has no %s: confidence is uncalibrated (%s)", path, CALIBRATION_FILE, how)
    return Calibration()


def _read_fits(path: Path) -> dict[str, dict]:
    """The fits a calibration file holds, by kind of search; those of other features left out,
    with a warning (fitted by an older nmt)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    fits = data.get("fits", {}) if isinstance(data, dict) else {}
    current = {k: v for k, v in fits.items() if v.get("features") == list(FEATURES)}
    if len(current) < len(fits) or "fits" not in data:
        log.warning("%s holds a calibration fitted on other features, by an older nmt: it is not "
                    "read (nmt-evaluate confidence=true fits it again)", path)  # fmt: skip
    return current


@dataclass
class Fitted:
    calibration: Calibration
    report: dict  # what the fit measured on its split (docs/confidence.md)


def fit(
    translator,
    sources: list[str],
    references: list[str],
    translations: list[str] | None = None,
    tgt_lang: str | None = None,
    decode: DecodeConfig | None = None,
    split: str = "valid",
) -> Fitted:
    """The calibration fitted on a split (valid): the pieces' isotonic map, the sentence
    predictor and its logistic map, and the flags' length bounds."""
    decode = decode or translator.decode
    if translations is None:
        translations = translator.translate(sources, decode=decode, tgt_lang=tgt_lang)
    stats, pairs = _statistics(translator, sources, translations, 1.0, tgt_lang, decode)
    labels = [_piece_labels(translator, t, r) for t, r in zip(pairs.tgt, references)]
    flat_labels = torch.tensor([x for row in labels for x in row], dtype=torch.float)
    # the EOS has no label
    log_probs = torch.cat([rows[:-1, 0] for rows in stats]).clamp(min=-30.0)
    knots, values = isotonic(log_probs, flat_labels)
    agreed = agreement(translator.lexicon, pairs.src, pairs.tgt)
    features = torch.tensor(
        [
            _features(rows[:, 0], len(src), len(tgt) + 1, lexical)
            for rows, src, tgt, lexical in zip(stats, pairs.src, pairs.tgt, agreed)
        ]  # fmt: skip
    )  # (N, F)
    chrf = torch.tensor([sentence_chrf(t, r) for t, r in zip(translations, references)])
    weights, bias = least_squares(features, chrf)
    predicted = features @ weights + bias
    good = (chrf >= GOOD_CHRF).float()
    scale, shift = logistic(predicted - GOOD_CHRF, good)
    ratios = [(len(t) + 1) / len(s) for t, s in zip(_reference_ids(translator, references),
                                                   pairs.src) if len(s) > 1]  # fmt: skip
    calibration = Calibration(
        1.0, knots, values, list(FEATURES), weights.tolist(), float(bias), scale, shift,
        Flagger.fitted(ratios),
        {"split": split, "sentences": len(sources), "search": search_kind(decode),
         "strategy": decode.strategy.value, "beam_size": decode.beam_size},
    )  # fmt: skip
    report = {
        "token_ece_t1": round(expected_calibration_error(log_probs.exp(), flat_labels), 4),
        # on its own labels the map is exact: this is the error of maps fitted on either half
        # of the split, each judged on the other
        "token_ece": round(_held_out_ece(log_probs, flat_labels, [len(r) for r in labels]), 4),
    }
    return Fitted(calibration, report)


def _held_out_ece(log_probs: torch.Tensor, labels: torch.Tensor, lengths: list[int]) -> float:
    """The pieces' ECE under isotonic maps fitted on the pieces of every other sentence (of
    `lengths` pieces each), judged on the rest, and the other way round: what the map fitted on
    all of them should give on new sentences."""
    parity = torch.arange(len(lengths)) % 2 == 0
    halves = torch.repeat_interleave(parity, torch.tensor(lengths, dtype=torch.long))
    errors = []
    for fitted_on in (halves, ~halves):
        knots, values = isotonic(log_probs[fitted_on], labels[fitted_on])
        judged = log_probs[~fitted_on].tolist()
        probs = torch.tensor([isotonic_at(knots, values, x) for x in judged])
        errors.append(expected_calibration_error(probs, labels[~fitted_on]))
    return sum(errors) / 2


def quality_report(confidences: list[Confidence], translations: list[str], references: list[str],
                   token_ece: tuple[float, float] | None = None) -> dict:  # fmt: skip
    """How well `confidences` tell good translations from bad on a split with references:
    Spearman's rho of the sentence confidence and of TP against sentence chrF, the ECE of the
    sentence confidence for "good", and the mean chrF of the 10% least confident against the
    rest."""
    chrf = [sentence_chrf(t, r) for t, r in zip(translations, references)]
    ours = [c.sentence for c in confidences]
    tp = [c.features[0] for c in confidences]
    good = torch.tensor([float(x >= GOOD_CHRF) for x in chrf])
    report = {
        "sentences": len(chrf),
        "good": f"sentence chrF >= {GOOD_CHRF:g}",
        "good_share": round(float(good.mean()), 4) if chrf else 0.0,
        "spearman": round(spearman(ours, chrf), 4),
        "spearman_tp": round(spearman(tp, chrf), 4),
        "ece": round(expected_calibration_error(torch.tensor(ours), good), 4),
        "lowest_10pct_chrf_gap": round(_lowest_gap(ours, chrf), 2),
        "lowest_10pct_chrf_gap_tp": round(_lowest_gap(tp, chrf), 2),
        "flagged": sum(bool(c.flags) for c in confidences),
    }
    if token_ece is not None:
        report["token_ece_t1"], report["token_ece"] = (round(x, 4) for x in token_ece)
    return report


def token_eces(translator, sources, translations, references, calibration, tgt_lang=None,
               decode=None) -> tuple[float, float]:  # fmt: skip
    """The pieces' token-level ECE uncalibrated (temperature 1) and calibrated."""
    temperatures = (1.0, calibration.temperature)
    stats, pairs = _statistics(translator, sources, translations, temperatures, tgt_lang, decode)
    labels = torch.tensor(
        [x for t, r in zip(pairs.tgt, references) for x in _piece_labels(translator, t, r)],
        dtype=torch.float,
    )
    raw = torch.cat([rows[:-1, 0] for rows in stats]).exp()
    tempered = torch.cat([rows[:-1, -1] for rows in stats]).tolist()
    calibrated = torch.tensor([calibration.piece_probability(x) for x in tempered])
    return expected_calibration_error(raw, labels), expected_calibration_error(calibrated, labels)


# --- measures -------------------------------------------------------------------------------------


def sentence_chrf(hypothesis: str, reference: str) -> float:
    return CHRF().sentence_score(hypothesis, [reference]).score


def _lowest_gap(confidence: list[float], chrf: list[float]) -> float:
    """Mean chrF of the 90% most confident minus that of the 10% least."""
    if len(chrf) < 10:
        return 0.0
    order = sorted(range(len(chrf)), key=lambda i: confidence[i])
    low = order[: len(order) // 10]
    rest = order[len(order) // 10 :]
    return sum(chrf[i] for i in rest) / len(rest) - sum(chrf[i] for i in low) / len(low)


# --- pieces, words and features -------------------------------------------------------------------


def _statistics(translator, sources, translations, temperatures, tgt_lang, decode,
                src_lang=None):  # fmt: skip
    """Each pair's pieces' log-probabilities (EOS included) by teacher forcing, (pieces, K) at
    each of the K `temperatures` (one: a number), and the pairs as read."""
    decode = decode or translator.decode
    tags = translator.tags
    temperatures = temperatures if isinstance(temperatures, tuple) else (temperatures,)
    pairs = read_pairs(translator.vocabs, tags.ids(tgt_lang, src_lang), sources, translations,
                       decode.max_src_pieces, code=tags.forced(tgt_lang))  # fmt: skip
    stats = pairs.statistics(translator.model, decode, translator.device, temperatures,
                             translator.lexicon, entropy=False)  # fmt: skip
    return stats, pairs


def _features(
    logprobs: torch.Tensor, src_pieces: int, length: int, lexical: tuple[float, float]
) -> list[float]:
    """FEATURES of one translation: the mean of its pieces' (the EOS included) log-probabilities
    (TP) at the calibration's temperature, its source's length and its length (pieces and EOS)
    over the source's, in pieces (logarithms), and its lexical agreement with its source
    (`nmt.translation.agreement`: precision, recall)."""
    finite = logprobs.clamp(min=-30.0)  # a piece outside a shortlist is -inf
    return [
        float(finite.mean()),
        math.log(max(src_pieces, 1)),
        math.log(length / max(src_pieces, 1)),
        *lexical,
    ]


def _word_probs(pieces: list[str], probs: list[float]) -> list[float]:
    """Each whitespace word's probability: the product of its pieces' (the EOS is no word's)."""
    words: list[float] = []
    for piece, p in zip(pieces, probs):
        if piece == "</s>":
            continue
        if not words or piece.startswith(WORD_START):
            words.append(p)
        else:
            words[-1] *= p
    return words


def _piece_labels(translator, tgt: list[int], reference: str) -> list[float]:
    """1.0 for each piece of the translation in the longest matching of its pieces with the
    reference's (difflib), else 0.0."""
    ref = translator.vocabs.tgt.encode([reference])[0] if reference.strip() else []
    labels = [0.0] * len(tgt)
    matcher = difflib.SequenceMatcher(None, tgt, ref, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.a, block.a + block.size):
            labels[k] = 1.0
    return labels


def _reference_ids(translator, references: list[str]) -> list[list[int]]:
    texts = [r if r.strip() else "" for r in references]
    return translator.vocabs.tgt.encode(texts) if any(texts) else [[] for _ in texts]
