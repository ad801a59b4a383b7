"""POST /score: what the model thinks of given translations (`Translator.score`), as HTTP JSON.

    {"text": "Ein Hund läuft.", "translation": "A dog runs."}
    {"texts": [...], "translations": [...]}          one translation per text, in order
    optional "tgt_lang": the language the translations are in, for a model with target tags
    optional "src_lang": the texts' language, for a model with language codes (/info's
    source_codes)
    -> {"scores": [{"score": -3.1, "normalized": -0.62, "pieces": [...], "piece_scores": [...]}]}

`score` is the total log-probability of the translation's pieces and the EOS after them (as the
search reports it), `normalized` the same with the server's length penalty, and `pieces` /
`piece_scores` each piece (EOS last) with its log-probability: the page colours a translation by
them. A score of -inf (a piece outside the shortlist) is JSON null. The limits of /translate
hold: `max_texts` pairs, `max_chars` characters on both sides together; a request's cost is its
translations' pieces (one teacher-forced step each), bounded by `max_request_cost`. "tgt_lang"
and "src_lang" are checked as /translate checks them (`target_tag`): the score is of the
translation given the source with that language's tag (and code) before it, as
`Translator.score` computes it.
"""

from __future__ import annotations

import dataclasses
import json
import math

from nmt.run_config import ServeRunConfig
from nmt.serving.protocol import BadRequest, check_keys, no_constant, read_tgt_lang, target_tag
from nmt.tokenizer import clean
from nmt.translation.scoring import Scored
from nmt.translation.translator import Translator

SCORE_KEYS = ("src_lang", "text", "texts", "tgt_lang", "translation", "translations")


@dataclasses.dataclass
class ScoreJob:
    texts: list[str]
    translations: list[str]  # one per text
    tgt_lang: str | None = None  # the language of the translations (`TargetTags.ids`)
    src_lang: str | None = None  # the texts' language (a model with codes), else the server's


def parse_score_request(body: bytes, cfg: ServeRunConfig) -> ScoreJob:
    """Check a /score body against the contract; each problem is one BadRequest."""
    try:
        data = json.loads(body, parse_constant=no_constant)
    except (ValueError, RecursionError) as err:
        raise BadRequest(400, f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(
            422, 'the body must be a JSON object, e.g. {"text": ..., "translation": ...}'
        )
    check_keys(data, SCORE_KEYS, "")
    if "text" in data and "translation" in data and not {"texts", "translations"} & set(data):
        pairs = [data["text"]], [data["translation"]]
    elif "texts" in data and "translations" in data and not {"text", "translation"} & set(data):
        pairs = data["texts"], data["translations"]
    else:
        raise BadRequest(422, 'give "text" and "translation", or "texts" and "translations"')
    texts, translations = pairs
    for name, values in zip(("texts", "translations"), pairs):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise BadRequest(422, f'"{name[:-1]}" must be a string and "{name}" a list of strings')
    if len(texts) != len(translations):
        raise BadRequest(422, f"{len(texts)} texts but {len(translations)} translations")
    if not texts:
        raise BadRequest(422, "nothing to score: no texts")
    if len(texts) > cfg.max_texts:
        raise BadRequest(413, f"{len(texts)} texts: this server takes at most {cfg.max_texts}")
    tgt_lang, src_lang = read_tgt_lang(data), read_tgt_lang(data, "src_lang")
    chars = sum(len(t) for t in texts) + sum(len(t) for t in translations)
    chars += len(tgt_lang or "") + len(src_lang or "")
    if chars > cfg.max_chars:
        raise BadRequest(413, f"{chars} characters: this server takes at most {cfg.max_chars}")
    return ScoreJob(texts, translations, tgt_lang, src_lang)


def score_costs(translator: Translator, job: ScoreJob, max_cost: int) -> list[int]:
    """Each pair's cost, its translation's pieces and EOS (one teacher-forced step each); a total
    over `max_cost` is a 413, a target language the model lacks a 422 (`target_tag`)."""
    target_tag(translator, job.tgt_lang, job.src_lang)
    texts = [clean(t) for t in job.translations]
    costs = [len(ids) + 1 for ids in translator.vocabs.tgt.encode(texts)] if any(texts) else []
    costs = costs or [1] * len(texts)
    if sum(costs) > max_cost:
        raise BadRequest(
            413,
            f"this request costs {sum(costs)}, more than max_request_cost={max_cost} (the "
            "translations' pieces): send fewer or shorter translations",
        )
    return costs


def scored_json(scored: Scored) -> dict:
    return {
        "score": _number(scored.score),
        "normalized": _number(scored.normalized),
        "pieces": scored.pieces,
        "piece_scores": [_number(x) for x in scored.piece_scores],
    }


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no -inf
