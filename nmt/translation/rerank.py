"""N-best reranking: other models rescore the main model's n-best list, and a weighted sum of
their scores chooses each line's translation; and the search for those weights on a valid set.

    reranker = Reranker(main, [other], weights=[0.6, 0.4])   # Translators; None = equal weights
    reranker.translate(["Ein Hund läuft."], decode=beam_with_n_best_5)
    reranker.candidates(Request(texts, beam_with_n_best_5, constraints=..., tgt_lang="de"))

The features of one hypothesis h of a source x, in this order (`Candidates.features`):

- the main model's (or ensemble's) score of h: the normalised score its search ranked the n-best
  list by (`Translation.nbest`, decode.length_penalty: gnmt, average or none). Weight on it alone
  gives the main model's own 1-best, whatever the length penalty;
- for each rerank model, the log-probability per piece it gives h: its total log-probability
  (`Translator.score`, the EOS included) divided by its number of pieces, EOS counted. Each rerank
  model reads the detokenized text of h through its own tokenizer, so models with other
  vocabularies (another family, another segmentation) rescore it too; per piece, because a model
  whose tokenizer cuts h into more pieces would otherwise score it lower for that alone. A rerank
  model scores over its whole vocabulary (decode.shortlist is the main search's speed-up, and a
  rerank checkpoint need not have a lexicon) and ignores what the search was asked (prefix,
  banned phrases, constraints: the text is given), but for the target language: a multilingual
  rerank model scores each hypothesis into the request's `tgt_lang`.

The chosen hypothesis maximises sum_k w_k * feature_k; ties go to the earlier hypothesis in the
main model's order, so the 1-best wins a tie. A score of -inf counts as FLOOR, so a weight of 0
ignores a feature entirely. Only the direction of the weights matters (scaling them all changes
no choice), so `tune_weights` searches the simplex (weights >= 0 summing to 1) on a grid, and
keeps the weights with the best metric (corpus BLEU on a valid set: `ChoiceBleu`). The main
feature under decode.length_penalty=gnmt or none is on another scale than the per-piece ones, so
equal weights are a start, not a tuned choice: scripts/rerank_tune.py chooses them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from sacrebleu.metrics import BLEU
from torch import Tensor

from nmt.config import DecodeConfig, LengthPenalty, Precision
from nmt.errors import NMTError
from nmt.run_config import TranslateRunConfig, check_rerank_nbest, check_rerank_weights
from nmt.tokenizer import clean
from nmt.translation.request import Request
from nmt.translation.translator import Translator

FLOOR = -1e9  # a score of -inf as a feature: finite, so that a weight of 0 leaves it out
MAX_GRID = 100_000  # most weight vectors `tune_weights` tries


@dataclass
class Candidates:
    """One source's n-best list with the features of each hypothesis."""

    source: str
    texts: list[str]  # the main model's n-best list, best first ([""] for a blank source)
    features: list[list[float]]  # (len(texts), 1 + rerank models): see the module's notes
    failure: str | None = None  # why the main model found no translation (texts: [""])

    def scores(self, weights: Sequence[float]) -> list[float]:
        """Each hypothesis's combined score, sum_k weights[k] * features[k]."""
        return combine(torch.tensor(self.features, dtype=torch.float64), weights).tolist()

    def best(self, weights: Sequence[float]) -> int:
        """The index of the chosen hypothesis (the earliest of equal scores)."""
        combined = combine(torch.tensor(self.features, dtype=torch.float64), weights)
        return int(combined.argmax())  # torch returns the first of equal maxima

    def ranked(self, weights: Sequence[float]) -> list[tuple[str, float]]:
        """(text, combined score) of every hypothesis, best first (stable on ties)."""
        scores = self.scores(weights)
        order = sorted(range(len(scores)), key=lambda k: -scores[k])
        return [(self.texts[k], scores[k]) for k in order]


def combine(features: Tensor, weights: Sequence[float] | Tensor) -> Tensor:
    """(..., F) float64 features, F weights -> (...) combined scores. One function for one
    list and for the tuner's whole set, so both add the same numbers in the same order."""
    w = torch.as_tensor(weights, dtype=torch.float64)
    return (features * w).sum(-1)


class Reranker:
    """A translator whose n-best lists other models rescore (see the module's notes)."""

    def __init__(
        self,
        translator: Translator,
        rerankers: Sequence[Translator],
        weights: Sequence[float] | None = None,
    ) -> None:
        """`weights`: the main model's, then one per rerank model; None = equal."""
        self.translator = translator
        self.rerankers = list(rerankers)
        self.weights = check_rerank_weights(len(self.rerankers), weights)

    @classmethod
    def from_command(
        cls, cfg: TranslateRunConfig, translator: Translator | None = None
    ) -> Reranker:
        """The reranker nmt-translate's `ckpt`, `rerank` and `rerank_weights` name; `translator`:
        the main model, already loaded."""
        main = translator or Translator.from_command(cfg, cfg.decode, cfg.device)
        others = [Translator.from_checkpoint(path, device=cfg.device) for path in cfg.rerank]
        return cls(main, others, cfg.rerank_weights)

    def candidates(self, request: Request) -> list[Candidates]:
        """Each text's n-best list from the main model (the request's settings must keep n_best
        >= 2), scored by every rerank model. N texts in, N out; a blank text has one blank
        hypothesis, scored by no one (features 0). The main model searches with everything the
        request asks (prefixes, banned phrases, constraints, target language); the rerank models
        score each hypothesis as text given its source, into the request's target language (a
        rerank model that does not translate into it is an NMTError naming it). A text the main
        model found no translation for has its `failure` and one blank hypothesis, scored as a blank
        text is."""
        check_rerank_nbest(request.settings)
        found = self.translator.run(self.translator.prepare(request))
        blank = [
            not clean(segment.text) or r.failure is not None
            for segment, r in zip(request.segments, found)
        ]
        features = [[[_finite(score)] for _, score in r.nbest] for r in found]
        # scores are fp32 or bf16 (an int8 main search is a setting of the search alone), but
        # by a rerank model that holds int8 weights only (`Translator.int8_only`)
        precision = request.settings.precision
        precision = Precision.fp32 if precision == Precision.int8 else precision
        scoring = replace(
            request.settings, length_penalty=LengthPenalty.average, shortlist=0,
            precision=precision,
        )  # fmt: skip
        longest = max((len(r.nbest) for r in found), default=0)
        for k, reranker in enumerate(self.rerankers, 1):
            try:
                reranker.tags.ids(request.tgt_lang, request.src_lang)
            except NMTError as err:
                raise NMTError(f"rerank model {k}: {err}") from None
            # one call per rank, every line in it at its own position: the rerank model's
            # warnings (a cut source, characters its vocabulary lacks) then name the right line
            for rank in range(longest):
                pairs = [
                    ("", "") if skip or rank >= len(r.nbest) else (r.source, r.nbest[rank][0])
                    for r, skip in zip(found, blank)
                ]
                own = replace(scoring, precision=Precision.int8) if reranker.int8_only else scoring
                scored = reranker.score(
                    [s for s, _ in pairs], [t for _, t in pairs], decode=own,
                    first_line=request.first_line, tgt_lang=request.tgt_lang,
                )  # fmt: skip
                for i, s in enumerate(scored):
                    if not blank[i] and rank < len(found[i].nbest):
                        features[i][rank].append(_finite(s.normalized))
        return [
            Candidates(
                source=r.source,
                texts=[text for text, _ in r.nbest],
                features=[[0.0] * (1 + len(self.rerankers))] if skip else rows,
                failure=r.failure,
            )
            for r, skip, rows in zip(found, blank, features)
        ]

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
        """The chosen translation of each text (the options as `Translator.translate`'s)."""
        request = Request(
            texts, decode or self.translator.decode, prefixes, banned, constraints, tgt_lang,
            first_line=first_line,
        )  # fmt: skip
        chosen = self.candidates(request)
        for i, c in enumerate(chosen):
            if c.failure is not None:
                raise NMTError(f"{request.noun} {request.first_line + i}: {c.failure}")
        return [c.texts[c.best(self.weights)] for c in chosen]


def _finite(score: float) -> float:
    return score if score > FLOOR else FLOOR


# ---- choosing the weights ---------------------------------------------------------------------


@dataclass
class Tuned:
    weights: list[float]  # >= 0, summing to 1: the main model's, then each rerank model's
    value: float  # the metric of the choices these weights make
    tried: int  # weight vectors tried (the grid's points)


def stack(candidates: Sequence[Candidates]) -> tuple[Tensor, Tensor]:
    """(N, H, F) float64 features of N lists of at most H hypotheses, padded with 0, and (N, H)
    bool: which hypotheses are real."""
    count = max((len(c.texts) for c in candidates), default=1)
    size = len(candidates[0].features[0]) if candidates else 1
    features = torch.zeros(len(candidates), count, size, dtype=torch.float64)
    real = torch.zeros(len(candidates), count, dtype=torch.bool)
    for i, c in enumerate(candidates):
        features[i, : len(c.texts)] = torch.tensor(c.features, dtype=torch.float64)
        real[i, : len(c.texts)] = True
    return features, real


def choose(features: Tensor, real: Tensor, weights: Sequence[float] | Tensor) -> Tensor:
    """(N, H, F) features, (N, H) real -> (N,) the index each list's weights choose, as
    `Candidates.best` chooses it."""
    combined = combine(features, weights).masked_fill(~real, -math.inf)
    return combined.argmax(-1)


def simplex_grid(size: int, step: float) -> Tensor:
    """(G, size) float64: every weight vector of multiples of `step` (1/step a whole number),
    each >= 0, summing to 1; G = C(1/step + size - 1, size - 1)."""
    parts = round(1 / step) if 0 < step <= 1 else 0
    if parts < 1 or abs(parts * step - 1) > 1e-9:
        raise NMTError(f"step={step}: 1/step must be a whole number (0.1, 0.05, 0.02...)")
    count = math.comb(parts + size - 1, size - 1)
    if count > MAX_GRID:
        raise NMTError(
            f"{size} features at step {step} make {count:,} weight vectors (at most "
            f"{MAX_GRID:,}): take a coarser step"
        )
    rows = []
    # stars and bars: size - 1 bars among parts + size - 1 places cut the parts into size runs
    for bars in itertools.combinations(range(parts + size - 1), size - 1):
        edges = (-1, *bars, parts + size - 1)
        rows.append([b - a - 1 for a, b in itertools.pairwise(edges)])
    return torch.tensor(rows, dtype=torch.float64) / parts


def tune_weights(
    candidates: Sequence[Candidates], metric: Callable[[Tensor], float], step: float = 0.05
) -> Tuned:
    """The weights on the simplex grid (`simplex_grid`) whose choices (N,) `metric` rates
    highest. Of weights rated equal, the closest to equal weights wins (the default, and the
    middle of a flat optimum rather than its edge), then the earliest in the grid's order."""
    features, real = stack(candidates)
    grid = simplex_grid(features.size(-1), step)
    values = [metric(choose(features, real, w)) for w in grid]
    top = max(values)
    tied = [g for g, v in enumerate(values) if v == top]
    middle = torch.full((grid.size(1),), 1.0 / grid.size(1), dtype=torch.float64)
    distance = ((grid[tied] - middle) ** 2).sum(-1)
    best = tied[int(distance.argmin())]  # the first of equal distances
    return Tuned([round(w, 10) for w in grid[best].tolist()], top, len(grid))


class ChoiceBleu:
    """Corpus BLEU of one hypothesis chosen per line, as sacreBLEU's corpus_score (its default
    BLEU: 13a, exp smoothing) computes it, from each hypothesis's statistics counted once: corpus
    BLEU is a function of the sums of its sentences' n-gram counts and lengths, and the tuner
    asks for thousands of choices."""

    def __init__(self, candidates: Sequence[Candidates], references: Sequence[str]) -> None:
        if len(candidates) != len(references):
            raise NMTError(f"{len(candidates)} n-best lists but {len(references)} references")
        self.corpus = BLEU()
        # effective order changes a sentence's score, never its counts (which are all we read);
        # with it sacreBLEU does not warn about sentence-level BLEU
        sentence = BLEU(effective_order=True)
        order = self.corpus.max_ngram_order
        count = max((len(c.texts) for c in candidates), default=1)
        self.stats = torch.zeros(len(candidates), count, 2 + 2 * order, dtype=torch.int64)
        for i, (c, reference) in enumerate(zip(candidates, references)):
            for k, text in enumerate(c.texts):
                s = sentence.sentence_score(text, [reference])
                self.stats[i, k] = torch.tensor([s.sys_len, s.ref_len, *s.counts, *s.totals])

    def __call__(self, choices: Tensor) -> float:
        """(N,) one hypothesis index per line -> corpus BLEU of those hypotheses."""
        total = self.stats[torch.arange(len(choices)), choices].sum(0).tolist()
        order = self.corpus.max_ngram_order
        return BLEU.compute_bleu(
            correct=total[2 : 2 + order], total=total[2 + order :], sys_len=total[0],
            ref_len=total[1], smooth_method=self.corpus.smooth_method,
            smooth_value=self.corpus.smooth_value, effective_order=self.corpus.effective_order,
            max_ngram_order=order,
        ).score  # fmt: skip
