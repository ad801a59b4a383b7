"""Admission: what a request may ask and what it costs, checked before it is queued.

- `request_decode`: the decode settings a request may change, each within its range (beam and
  n-best within the server's max_beam);
- `check_request`: a request tokenized and checked against the model (`Translator.prepare`), and
  each text's cost, the most work its search can take in hypothesis steps (`text_cost`: the
  hypotheses a step carries, times its length limit, times what constraints, banned phrases,
  search trees and attention maps add to a step; measured, docs/serve.md): over
  max_request_cost it is a 413, and the batcher splits and shares the queue by it;
- `light`: whether checking a request is quicker than handing it to a thread;
- `score_costs`: the same for /score pairs.

Every API shape admits its requests here, whatever its JSON; a refusal is a `BadRequest` with
nmt's status, which a shape may answer with its own.
"""

from __future__ import annotations

import dataclasses
import math

from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.errors import NMTError
from nmt.serving.http import BadRequest, check_keys, kind
from nmt.tokenizer import clean
from nmt.translation.request import Prepared, PreparedText, Request
from nmt.translation.translator import Translator
from nmt.translation.warm_up import WARM_UP_TEXT

# what a request may change; batch_size, max_len_cap and max_src_pieces are the server's limits
DECODE_KEYS = (
    "strategy", "beam_size", "n_best", "length_penalty", "alpha", "min_len_a", "min_len_b",
    "max_len_a", "max_len_b", "no_repeat_ngram", "repetition_penalty", "temperature", "top_k",
    "top_p", "seed", "prefix",
)  # fmt: skip
DECODE_CHOICES = {"strategy": Strategy, "length_penalty": LengthPenalty}
MAX_BANNED = 64  # banned phrases in one request (each may have many spellings in pieces)
MAX_CONSTRAINTS = 16  # phrases one translation must contain (each widens the search's candidates)
# what a step's extra work is counted as (`step_weight`), in plain steps: any constraint, then
# one more plain step for each this many constraint pieces, pieces of banned spellings, distinct
# lengths of banned spellings (scripts/bench_request_cost.py, docs/serve.md)
CONSTRAINED = 0.25
CONSTRAINT_PIECES = 50
BANNED_PIECES = 30_000
BANNED_LENGTHS = 30
# attention map weights (layers x heads x source pieces, per hypothesis step) that cost as much as
# one plain hypothesis step to keep, gather and write as JSON (scripts/bench_attention.py)
MAP_WEIGHTS_PER_STEP = 1500
DECODE_STRINGS = ("prefix",)
# the values a request may give: wide enough for any sensible use, narrow enough that no
# arithmetic in search overflows (beam_size and n_best: 1..max_beam, a setting of the server)
DECODE_RANGES = {
    "alpha": (0, 10),
    "min_len_a": (-1000, 1000),
    "min_len_b": (-1_000_000, 1_000_000),
    "max_len_a": (-1000, 1000),
    "max_len_b": (-1_000_000, 1_000_000),
    "no_repeat_ngram": (0, 1000),
    "repetition_penalty": (0.01, 100),
    "temperature": (0.001, 1000),
    "top_k": (0, 2**31 - 1),
    "top_p": (0.000001, 1),
    "seed": (0, 2**31 - 1),
}


def request_decode(defaults: DecodeConfig, given: object, max_beam: int) -> DecodeConfig:
    """The server's decoding defaults with a request's "decode" object applied and validated."""
    if not isinstance(given, dict):
        raise BadRequest(422, f'"decode" must be an object, not {kind(given)}')
    check_keys(given, DECODE_KEYS, "decode.")
    ranges = {**DECODE_RANGES, "beam_size": (1, max_beam), "n_best": (1, max_beam)}
    changes = {}
    for key, value in given.items():
        if key in DECODE_CHOICES:
            choices = [c.value for c in DECODE_CHOICES[key]]
            if value not in choices:
                raise BadRequest(422, f"decode.{key}={value!r}: expected one of {choices}")
            value = DECODE_CHOICES[key](value)
        elif key in DECODE_STRINGS:
            if not isinstance(value, str):
                raise BadRequest(422, f"decode.{key} must be a string, not {kind(value)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(422, f"decode.{key} must be a number, not {kind(value)}")
        elif isinstance(getattr(defaults, key), int) and not isinstance(value, int):
            raise BadRequest(422, f"decode.{key} must be an integer, not {value!r}")
        elif not ranges[key][0] <= value <= ranges[key][1]:  # false for NaN too
            low, high = ranges[key]
            raise BadRequest(422, f"decode.{key}={value!r} is out of range: {low} to {high}")
        changes[key] = value
    strategy = changes.get("strategy", defaults.strategy)
    if "n_best" not in changes:  # the default n-best follows a strategy or beam the request sets
        if strategy == Strategy.greedy:
            changes["n_best"] = 1
        elif strategy == Strategy.beam:
            changes["n_best"] = min(defaults.n_best, changes.get("beam_size", defaults.beam_size))
    try:
        return dataclasses.replace(defaults, **changes)
    except NMTError as err:
        raise BadRequest(422, str(err)) from None


def search_rows(decode: DecodeConfig) -> int:
    """Hypotheses the search of one text carries at each step: the beam, the draws, or one."""
    match decode.strategy:
        case Strategy.beam:
            return decode.beam_size
        case Strategy.sample:
            return decode.n_best
        case _:
            return 1


def text_cost(
    decode: DecodeConfig, src_pieces: int, tree: bool, weight: float = 1.0, maps: int = 0
) -> int:
    """The most work one text's search can take, in hypothesis steps: the hypotheses it carries
    at each step (`search_rows`) times its length limit (`decode.max_len` of its source pieces,
    EOS included; at most decode.max_len_cap), times the `weight` of each of its steps
    (`step_weight`). The search never runs past the length limit, so no setting makes a text
    cost more: a huge min_len_b only forces it up to the limit. With `tree` (the search tree
    returned) a step counts twice: recording and writing it about doubles a text's time. With
    attention maps returned, `maps` is the model's layers x heads (`map_size`): every hypothesis
    step keeps maps x source pieces weights, and MAP_WEIGHTS_PER_STEP of them cost one plain
    step (kept, gathered, written as JSON; scripts/bench_attention.py), so a long source's maps
    count as what they cost, growing with layers x heads x source x length."""
    steps = search_rows(decode) * decode.max_len(src_pieces)
    per_step = weight * (2 if tree else 1) + maps * src_pieces / MAP_WEIGHTS_PER_STEP
    return math.ceil(steps * per_step)


def map_size(translator: Translator) -> int:
    """Layers x heads of the attention maps the translator returns (0 for a model without
    attention), read from one short translation: every family, and an ensemble's shown maps,
    alike."""
    languages = translator.tags.languages  # a model with several needs one named
    tgt_lang = languages[0] if languages else None
    found = translator.translate_full([WARM_UP_TEXT], decode=DecodeConfig(), tgt_lang=tgt_lang)
    maps = found[0].maps
    return 0 if maps is None else maps.size(1) * maps.size(2)


def step_weight(prepared: Prepared, text: PreparedText) -> float:
    """What one step of a text's search costs, in plain steps: 1, and the work its constraints
    and the request's banned phrases add to every step of it (measured: docs/serve.md). Any
    constraint adds CONSTRAINED, and each CONSTRAINT_PIECES of its pieces one more plain step;
    each BANNED_PIECES pieces of banned spellings that fit in the text's translation (a longer
    one is never compared) and each BANNED_LENGTHS distinct lengths of them, one more."""
    limit = prepared.settings.max_len(len(text.src))
    reachable = [len(form) for form in prepared.banned if len(form) <= limit]
    weight = 1.0 + sum(reachable) / BANNED_PIECES + len(set(reachable)) / BANNED_LENGTHS
    if text.constraints:
        weight += CONSTRAINED + sum(len(c) for c in text.constraints) / CONSTRAINT_PIECES
    return weight


# a request without phrases and with at most this many characters of text and prefixes is
# checked on the event loop (in about 0.2 ms for a sentence): a thread costs more than that
LIGHT_CHARS = 2_000


def light(request: Request) -> bool:
    """Whether checking `request` (`check_request`) is quick work: no banned phrases or
    constraints to spell, and little text to tokenize."""
    if request.banned_phrases or any(s.constraints for s in request.segments):
        return False
    return sum(len(s.text) + len(s.prefix) for s in request.segments) <= LIGHT_CHARS


def check_request(
    translator: Translator, request: Request, max_cost: int, maps: int
) -> tuple[Prepared, list[int]]:
    """The request prepared (`Translator.prepare`: tokenized and checked once) and each text's
    cost (`text_cost`; 0 for a blank text): a target language the model lacks, a prefix it
    cannot force or constraints it cannot meet are a 422, a total cost over `max_cost` a 413.
    Each source is read as the search reads it: cut to max_src_pieces, then its target tag put
    before it (the tag counts toward the length limit, as in the search). Blocking work, up to a
    second for the largest request the limits allow: the server calls it off its event loop."""
    try:
        prepared = translator.prepare(request, warn=False)  # they are answered, not logged
    except NMTError as err:
        raise BadRequest(422, str(err)) from None
    prepared.key  # computed here, off the event loop when the request is heavy  # noqa: B018
    settings, per_map = prepared.settings, maps if prepared.attention else 0
    costs = [
        text_cost(settings, len(text.src), prepared.tree, step_weight(prepared, text), per_map)
        if text.src
        else 0
        for text in prepared.texts
    ]
    if sum(costs) > max_cost:
        extras_note = ", times 2 with beam_tree" if prepared.tree else ""
        if per_map:
            extras_note += (
                f", and with attention {per_map} maps (layers x heads) x source pieces / "
                f"{MAP_WEIGHTS_PER_STEP} more per step"
            )
        raise BadRequest(
            413,
            f"this request costs {sum(costs)}, more than max_request_cost={max_cost} (for each "
            f"text, the hypotheses searched at each step, {search_rows(settings)}, times its "
            f"length limit, decode.max_len_a * source pieces + decode.max_len_b{extras_note}, "
            "times what its constraints and banned phrases add to each step): send fewer or "
            "shorter texts, phrases or constraints, or ask for a smaller beam_size or "
            "max_len_a/max_len_b",
        )
    return prepared, costs


def target_tag(
    translator: Translator, tgt_lang: str | None, src_lang: str | None = None
) -> tuple[int, ...]:
    """The ids the Translator puts before each source for `tgt_lang` and `src_lang`
    (`TargetTags.ids`: the language's tag or the source's code, or none); a language the model
    does not translate into or read, or no tgt_lang given to a model with several, is a 422 with
    the Translator's message, which names its languages."""
    try:
        return tuple(translator.tags.ids(tgt_lang, src_lang))
    except NMTError as err:
        raise BadRequest(422, str(err)) from None


def score_costs(
    translator: Translator,
    translations: list[str],
    langs: tuple[str | None, str | None],
    max_cost: int,
) -> list[int]:
    """Each /score pair's cost, its translation's pieces and EOS (one teacher-forced step each);
    a total over `max_cost` is a 413, a target language the model lacks (`langs`: the
    translations' and the texts', `target_tag`) a 422."""
    target_tag(translator, *langs)
    texts = [clean(t) for t in translations]
    costs = [len(ids) + 1 for ids in translator.vocabs.tgt.encode(texts)] if any(texts) else []
    costs = costs or [1] * len(texts)
    if sum(costs) > max_cost:
        raise BadRequest(
            413,
            f"this request costs {sum(costs)}, more than max_request_cost={max_cost} (the "
            "translations' pieces): send fewer or shorter translations",
        )
    return costs
