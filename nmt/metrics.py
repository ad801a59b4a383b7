"""What a translation model is measured by: BLEU, chrF and TER by sacreBLEU, of detokenized
hypotheses against the references as read (whitespace runs collapsed, which none of BLEU's 13a
tokenizer, chrF or TER can see), each reported with its sacreBLEU signature so that it can be
compared with others; and the perplexity that training logs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER

from nmt.errors import NMTError


@dataclass
class Scores:
    bleu: float
    chrf: float
    ter: float
    lines: list[str]  # sacreBLEU's own rendering of each score, each followed by its signature

    def to_dict(self) -> dict:
        return {"bleu": self.bleu, "chrf": self.chrf, "ter": self.ter, "report": self.lines}


def score(hypotheses: list[str], references: list[str]) -> Scores:
    """Corpus BLEU, chrF2 and TER with sacreBLEU's defaults."""
    if len(hypotheses) != len(references):
        raise NMTError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    lines, values = [], []
    for metric in (BLEU(), CHRF(), TER()):
        result = metric.corpus_score(hypotheses, [references])
        lines += [str(result), f"  signature: {metric.get_signature()}"]
        values.append(result.score)
    return Scores(*values, lines)


def perplexity(nll_per_token: float) -> float:
    """exp of the mean negative log-likelihood, capped (at e^50) so a diverged run logs a number."""
    return math.exp(min(nll_per_token, 50.0))


def bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU alone (validation)."""
    return BLEU().corpus_score(hypotheses, [references]).score
