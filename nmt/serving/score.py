"""nmt's /score shape: what the model thinks of given translations (`Translator.score`).

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

from starlette.requests import Request
from starlette.responses import Response

from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig
from nmt.serving.batching import QueueFull
from nmt.serving.http import (
    BadRequest,
    admit,
    bearer_key,
    body_limit,
    busy,
    check_keys,
    client_of,
    json_bytes,
    number,
    read_body,
    read_object,
    read_string,
)
from nmt.serving.keys import Keys
from nmt.serving.models import Models
from nmt.serving.server import ScoreJob
from nmt.translation.scoring import Scored

SCORE_KEYS = ("src_lang", "text", "texts", "tgt_lang", "translation", "translations")


async def score(models: Models, keys: Keys, request: Request) -> Response:
    """POST /score: each pair's score, as `write_scored` writes it, by the model that
    translates the pair's languages."""
    body = await read_body(request, body_limit(models.cfg.max_chars))
    job = parse_score_request(body, models.cfg)
    admit(keys, bearer_key(request), sum(map(len, job.texts)) + sum(map(len, job.translations)))
    try:
        route = models.route(job.src_lang, job.tgt_lang)
        if len(route.hops) > 1:
            raise NMTError(f"no one model translates {route.source}->{route.target}: a score "
                           "is one model's")  # fmt: skip
        hop = route.hops[0]
        job = dataclasses.replace(job, src_lang=hop.src_lang, tgt_lang=hop.tgt_lang)
        async with models.using(hop.model) as server:
            results = await server.score(job, write_scored, client_of(request))
    except QueueFull as full:
        return busy(full)
    except NMTError as err:
        raise BadRequest(422, str(err)) from None
    return Response(b'{"scores":[' + b",".join(results) + b"]}", media_type="application/json")


def parse_score_request(body: bytes, cfg: ServeRunConfig) -> ScoreJob:
    """Check a /score body against the contract; each problem is one BadRequest."""
    data = read_object(body, '{"text": ..., "translation": ...}')
    check_keys(data, SCORE_KEYS)
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
    tgt_lang, src_lang = read_string(data, "tgt_lang"), read_string(data, "src_lang")
    chars = sum(len(t) for t in texts) + sum(len(t) for t in translations)
    chars += len(tgt_lang or "") + len(src_lang or "")
    if chars > cfg.max_chars:
        raise BadRequest(413, f"{chars} characters: this server takes at most {cfg.max_chars}")
    return ScoreJob(texts, translations, tgt_lang, src_lang)


def write_scored(scored: Scored) -> bytes:
    """One pair's score as JSON (see the module's notes)."""
    return json_bytes(
        {
            "score": number(scored.score),
            "normalized": number(scored.normalized),
            "pieces": scored.pieces,
            "piece_scores": [number(x) for x in scored.piece_scores],
        }
    )
