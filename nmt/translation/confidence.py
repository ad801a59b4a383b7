"""Which translations to trust: calibrated confidence per piece, per word and per sentence.

    calibration = Calibration.load(ckpt_dir) or fit(translator, valid_src, valid_ref).calibration
    found = measure(translator, sources, translations, calibration)
    found[0].sentence   # 0.83: the probability that the translation is good (below)
    found[0].words      # each whitespace word's probability, from its pieces'
    found[0].flags      # ["repeats"], ["copies the source"], ["too short"], ...

The raw signal is the model's own: each piece's probability, read by teacher forcing the
translation (`nmt.translation.scoring.piece_statistics`, one pass). It is miscalibrated at
inference (Wang et al. 2020): a temperature, fitted on the validation split, divides the logits
and a logistic map of the tempered log-probability (Platt scaling), both fitted on the
validation split, make a piece given 0.8 right about 80% of the time (right: in the longest
common subsequence of the translation's and the reference's pieces, difflib's matching, the
labels of Wang et al.'s token-level inference ECE). A word's probability is the product of its
pieces'.

The sentence: "good" means a sentence chrF of at least GOOD_CHRF against the reference. Features
of the tempered pieces (their mean log-probability, TP of Fomicheva et al. 2020, and the mean
entropy of the steps), the source's length and the length ratio feed a linear
predictor of sentence chrF, least squares on valid; a logistic map of the prediction, fitted on
valid too, gives P(good): among sentences given 0.8, about 80% are good. `fit` chose these by
measurement (docs/confidence.md): the predictor ranks sentences better than TP alone.

The calibration travels with the checkpoint as calibration.json. A checkpoint without one (an
import, a run older than it) gives the uncalibrated reading: temperature 1 and P(good) from TP
through a fixed logistic (`Calibration()`), with a warning where a command reads it.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from sacrebleu.metrics import CHRF

from nmt.config import DecodeConfig
from nmt.errors import NMTError
from nmt.tokenizer import EOS, SPECIAL_PIECES
from nmt.translation.flags import Flagger
from nmt.translation.scoring import read_pairs

log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"
GOOD_CHRF = 50.0  # a translation is "good" with a sentence chrF of at least this
TEMPERATURES = tuple(round(0.5 + 0.1 * k, 1) for k in range(26))  # 0.5 .. 3.0, the grid fitted
FEATURES = ("mean_logprob", "mean_entropy", "log_source_pieces", "log_length_ratio")
BINS = 10  # of the expected calibration errors
WORD_START = "\u2581"
EOS_PIECE = SPECIAL_PIECES[-1]  # "</s>", in nmt's vocabularies and in the imported ones


@dataclass
class Calibration:
    temperature: float = 1.0
    # a piece's probability: sigmoid(token_scale * log p + token_shift), p at `temperature`
    token_scale: float = 1.0
    token_shift: float = 0.0
    # sentence chrF ~ weights . features + bias; the uncalibrated default reads TP alone
    weights: list[float] = field(default_factory=lambda: [100.0, 0.0, 0.0, 0.0])
    bias: float = 100.0
    # P(good) = sigmoid(scale * (predicted chrF - GOOD_CHRF) + shift)
    scale: float = 0.1
    shift: float = 0.0
    flags: Flagger = field(default_factory=Flagger)
    fitted: dict = field(default_factory=dict)  # on what: split, sentences, decode; {}: not fitted

    def save(self, directory: Path) -> None:
        data = asdict(self)
        (Path(directory) / CALIBRATION_FILE).write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Calibration | None:
        path = Path(directory) / CALIBRATION_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text())
        data["flags"] = Flagger(**data.get("flags", {}))
        return cls(**data)

    def predict(self, features: list[float]) -> float:
        return sum(w * x for w, x in zip(self.weights, features)) + self.bias

    def probability(self, predicted: float) -> float:
        return _sigmoid(self.scale * (predicted - GOOD_CHRF) + self.shift)

    def piece_probability(self, logprob: float) -> float:
        """A piece's calibrated probability from its log-probability at the temperature; the
        uncalibrated reading (scale 1, shift 0) is the plain probability."""
        if self.token_scale == 1.0 and self.token_shift == 0.0:
            return math.exp(logprob)
        return _sigmoid(self.token_scale * max(logprob, -30.0) + self.token_shift)


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
) -> list[Confidence]:
    """Each translation's confidence (see the module's notes); N pairs in, N out."""
    stats, pairs = _statistics(translator, sources, translations, (calibration.temperature,),
                               tgt_lang, decode)  # fmt: skip
    return [
        _judged(calibration, source, text, len(src), translator.vocabs.tgt.id_to_piece(
            tgt + [EOS]), rows[:, 0], rows[:, -1], len(tgt) + 1)
        for source, text, src, tgt, rows in zip(sources, pairs.texts, pairs.src, pairs.tgt, stats)
    ]  # fmt: skip


def judge(translation, calibration: Calibration) -> Confidence:
    """A translation's confidence read off its own search (a `Translation` of a request with
    `statistics=calibration.temperature`): what `measure` computes from the same pieces by
    teacher forcing, at no second pass. A translation the length limit ended has no EOS row;
    its length counts one, as teacher forcing scores it."""
    rows = translation.statistics
    if rows is None:
        raise NMTError("judge: the translation carries no statistics (Request.statistics)")
    pieces = translation.tgt_pieces[len(translation.tgt_pieces) - rows.size(0) :]
    ended = bool(pieces) and pieces[-1] == EOS_PIECE
    return _judged(
        calibration, translation.source, translation.text, len(translation.src_pieces), pieces,
        rows[:, 0], rows[:, 1], rows.size(0) + (not ended),
    )  # fmt: skip


def judge_all(translator, translations: list, calibration: Calibration,
              tgt_lang: str | None = None) -> list[Confidence]:  # fmt: skip
    """Each `Translation`'s confidence: read off its search where it carries the statistics
    (`judge`), by one teacher-forced pass over the others (`measure`: a blank source's, which
    no search ran for)."""
    out: list[Confidence | None] = [
        None if t.statistics is None else judge(t, calibration) for t in translations
    ]
    rest = [i for i, c in enumerate(out) if c is None]
    if rest:
        found = measure(translator, [translations[i].source for i in rest],
                        [translations[i].text for i in rest], calibration, tgt_lang)  # fmt: skip
        for i, c in zip(rest, found):
            out[i] = c
    return out  # type: ignore[return-value]


def _judged(calibration: Calibration, source: str, text: str, src_len: int, pieces: list[str],
            logprobs: torch.Tensor, entropy: torch.Tensor, length: int) -> Confidence:  # fmt: skip
    """One translation's Confidence from its pieces' tempered log-probabilities and entropies;
    `length`: its pieces and the EOS, `src_len`: its source's pieces (tag and EOS included)."""
    features = _features(logprobs, entropy, src_len, length)
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


def for_checkpoint(path: Path | str) -> Calibration:
    """The calibration stored with a checkpoint, or (with a warning) the uncalibrated reading."""
    found = Calibration.load(Path(path))
    if found is None:
        log.warning(
            "%s has no %s: confidence is uncalibrated (nmt-evaluate ckpt=%s confidence=true fits "
            "it on the valid split)", path, CALIBRATION_FILE, path,
        )  # fmt: skip
        return Calibration()
    return found


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
    """The calibration fitted on a split (valid): the temperature that makes the pieces' token
    ECE least, the sentence predictor and its logistic map, and the flags' length bounds."""
    decode = decode or translator.decode
    if translations is None:
        translations = translator.translate(sources, decode=decode, tgt_lang=tgt_lang)
    stats, pairs = _statistics(translator, sources, translations, TEMPERATURES, tgt_lang, decode)
    labels = [_piece_labels(translator, t, r) for t, r in zip(pairs.tgt, references)]
    flat_labels = torch.tensor([x for row in labels for x in row], dtype=torch.float)
    eces = []
    for k in range(len(TEMPERATURES)):
        probs = torch.cat([rows[:-1, k] for rows in stats]).exp()  # the EOS has no label
        eces.append(expected_calibration_error(probs, flat_labels))
    best = min(range(len(TEMPERATURES)), key=lambda k: eces[k])
    temperature = TEMPERATURES[best]
    # then a logistic map of the tempered log-probability (Platt scaling) takes what a single
    # temperature cannot: measured, the temperature alone barely lowers the token ECE
    tempered = torch.cat([rows[:-1, best] for rows in stats]).clamp(min=-30.0)
    token_scale, token_shift = _logistic(tempered, flat_labels)
    token_probs = torch.sigmoid(token_scale * tempered + token_shift)
    at_t, _ = _statistics(translator, sources, translations, (temperature,), tgt_lang, decode)
    features = torch.tensor(
        [
            _features(rows[:, 0], rows[:, -1], len(src), len(tgt) + 1)
            for rows, src, tgt in zip(at_t, pairs.src, pairs.tgt)
        ]  # fmt: skip
    )  # (N, F)
    chrf = torch.tensor([sentence_chrf(t, r) for t, r in zip(translations, references)])
    weights, bias = _least_squares(features, chrf)
    predicted = features @ weights + bias
    good = (chrf >= GOOD_CHRF).float()
    scale, shift = _logistic(predicted - GOOD_CHRF, good)
    ratios = [(len(t) + 1) / len(s) for t, s in zip(_reference_ids(translator, references),
                                                   pairs.src) if len(s) > 1]  # fmt: skip
    calibration = Calibration(
        temperature, token_scale, token_shift, weights.tolist(), float(bias), scale, shift,
        Flagger.fitted(ratios),
        {"split": split, "sentences": len(sources), "strategy": decode.strategy.value,
         "beam_size": decode.beam_size},
    )  # fmt: skip
    report = {
        "token_ece_t1": round(eces[TEMPERATURES.index(1.0)], 4),
        "token_ece_temperature": round(eces[best], 4),
        "token_ece": round(expected_calibration_error(token_probs, flat_labels), 4),
        "temperature": temperature,
    }
    return Fitted(calibration, report)


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
    tempered = torch.cat([rows[:-1, 1] for rows in stats]).tolist()
    calibrated = torch.tensor([calibration.piece_probability(x) for x in tempered])
    return expected_calibration_error(raw, labels), expected_calibration_error(calibrated, labels)


# --- measures -------------------------------------------------------------------------------------


def expected_calibration_error(confidence: torch.Tensor, correct: torch.Tensor) -> float:
    """ECE over BINS equal-width bins: the mean |accuracy - confidence| of each bin, weighted by
    its share of the items."""
    if confidence.numel() == 0:
        return 0.0
    bins = (confidence.clamp(0, 1 - 1e-9) * BINS).long()
    error = 0.0
    for b in range(BINS):
        inside = bins == b
        if inside.any():
            gap = (correct[inside].mean() - confidence[inside].mean()).abs()
            error += float(gap) * float(inside.float().mean())
    return error


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank)."""
    if len(x) < 2:
        return 0.0
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float(rx.norm() * ry.norm())
    return float((rx * ry).sum()) / denominator if denominator else 0.0


def sentence_chrf(hypothesis: str, reference: str) -> float:
    return CHRF().sentence_score(hypothesis, [reference]).score


def _ranks(values: list[float]) -> torch.Tensor:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = torch.empty(len(values), dtype=torch.double)
    k = 0
    while k < len(order):
        j = k
        while j + 1 < len(order) and values[order[j + 1]] == values[order[k]]:
            j += 1
        for m in range(k, j + 1):
            ranks[order[m]] = (k + j) / 2
        k = j + 1
    return ranks


def _lowest_gap(confidence: list[float], chrf: list[float]) -> float:
    """Mean chrF of the 90% most confident minus that of the 10% least."""
    if len(chrf) < 10:
        return 0.0
    order = sorted(range(len(chrf)), key=lambda i: confidence[i])
    low = order[: len(order) // 10]
    rest = order[len(order) // 10 :]
    return sum(chrf[i] for i in rest) / len(rest) - sum(chrf[i] for i in low) / len(low)


# --- pieces, words and features -------------------------------------------------------------------


def _statistics(translator, sources, translations, temperatures, tgt_lang, decode):
    decode = decode or translator.decode
    tags = translator.tags
    pairs = read_pairs(translator.vocabs, tags.ids(tgt_lang), sources, translations,
                       decode.max_src_pieces, code=tags.forced(tgt_lang))  # fmt: skip
    stats = pairs.statistics(translator.model, decode, translator.device, temperatures,
                             translator.lexicon)  # fmt: skip
    return stats, pairs


def _features(
    logprobs: torch.Tensor, entropy: torch.Tensor, src_pieces: int, length: int
) -> list[float]:
    """FEATURES of one translation: the mean of its pieces' (the EOS included) log-probabilities
    (TP) and entropies at the calibrated temperature, its source's length and its length
    (pieces and EOS) over the source's, in pieces (logarithms)."""
    finite = logprobs.clamp(min=-30.0)  # a piece outside a shortlist is -inf
    return [
        float(finite.mean()),
        float(entropy.mean()),
        math.log(max(src_pieces, 1)),
        math.log(length / max(src_pieces, 1)),
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


def _least_squares(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    """w, b minimising |x w + b - y|^2, with a little ridge so that a constant feature (every
    source of one length) does not make it singular."""
    design = torch.cat([x.double(), torch.ones(x.size(0), 1, dtype=torch.double)], 1)
    ridge = 1e-3 * torch.eye(design.size(1), dtype=torch.double)
    solution = torch.linalg.solve(design.T @ design + ridge, design.T @ y.double())
    return solution[:-1].float(), float(solution[-1])


def _logistic(x: torch.Tensor, y: torch.Tensor, steps: int = 50) -> tuple[float, float]:
    """a, b of P(y=1 | x) = sigmoid(a x + b), by Newton's method on the log-likelihood (a small
    ridge keeps it finite when the classes separate)."""
    a, b = 0.1, 0.0
    x, y = x.double(), y.double()
    for _ in range(steps):
        p = torch.sigmoid(a * x + b)
        w = p * (1 - p)
        grad = torch.stack([((p - y) * x).sum() + 1e-3 * a, (p - y).sum()])
        xw = float((w * x).sum())
        hess = torch.tensor(
            [[float((w * x * x).sum()) + 1e-3, xw], [xw, float(w.sum()) + 1e-9]], dtype=torch.double
        )
        step = torch.linalg.solve(hess, grad)
        a, b = a - float(step[0]), b - float(step[1])
        if float(step.abs().max()) < 1e-8:
            break
    return a, b


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))
