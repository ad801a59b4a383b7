"""The JSON of nmt-serve's HTTP API: reading a /translate request (each problem one BadRequest with
its status) and writing translations and GET /info. docs/serve.md is the contract;
`nmt/serving/app.py` is the server around it.
"""

from __future__ import annotations

import dataclasses
import json
import math

from starlette.requests import Request as HTTPRequest
from torch import Tensor

from nmt.config import (
    PROTECT_KINDS,
    DecodeConfig,
    LengthPenalty,
    RNNConfig,
    Strategy,
    TextFormat,
    TextOptions,
    TransformerConfig,
)  # fmt: skip
from nmt.documents.alignment import moses
from nmt.documents.blocks import BlockResult
from nmt.documents.texts import TEXT_FORMATS
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig, TrainRunConfig, flatten
from nmt.tokenizer import clean
from nmt.translation.confidence import Confidence, combine
from nmt.translation.request import Prepared, PreparedText, Request
from nmt.translation.translator import WARM_UP_TEXT, Translation, Translator

REQUEST_KEYS = (
    "alignments", "attention", "banned", "beam_tree", "confidence", "constraints", "decode",
    "format", "prefix", "prefixes", "protect", "split_sentences", "src_lang", "text", "texts",
    "tgt_lang",
)  # fmt: skip
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
ATTENTION_DECIMALS = 4  # attention weights are rounded to this many decimals on the wire
# most attention weights returned for one text (all its hypotheses, layers and heads), about 16 MB
# of JSON: a 1,000-piece source with a long n-best list would otherwise give gigabytes
MAX_ATTENTION_WEIGHTS = 2_000_000
# most search-tree nodes returned for one text (about 2 MB of JSON); a beam of K keeps at most
# 2K nodes a step, so beam 5 over 100 steps stays well within it
MAX_TREE_NODES = 20_000


class BadRequest(Exception):
    """A request the server refuses: answered with `status` and {"error": message}."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# --- reading a request -----------------------------------------------------------------------


async def read_body(request: HTTPRequest, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it exceeds `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"request body of {declared} bytes is over the limit of {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BadRequest(413, f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_request(body: bytes, cfg: ServeRunConfig) -> Asked:
    """Check a /translate body against the contract and make it a Request (its texts numbered
    "text 1", "text 2", ... in messages); each problem is one BadRequest."""
    try:
        data = json.loads(body, parse_constant=no_constant)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise BadRequest(400, f"invalid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequest(422, 'the body must be a JSON object, e.g. {"text": "Guten Tag."}')
    check_keys(data, REQUEST_KEYS, "")
    confidence = data.get("confidence", False)
    if not isinstance(confidence, bool):
        raise BadRequest(422, f'"confidence" must be true or false, not {_kind(confidence)}')
    if ("text" in data) == ("texts" in data):
        raise BadRequest(422, 'give "text" (a string) or "texts" (a list of strings), not both')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise BadRequest(422, f'"text" must be a string, not {_kind(data["text"])}')
        texts = [data["text"]]
    else:
        texts = data["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise BadRequest(422, '"texts" must be a list of strings')
        if len(texts) > cfg.max_texts:
            raise BadRequest(413, f"{len(texts)} texts: this server takes at most {cfg.max_texts}")
    prefixes = _prefixes(data, len(texts))
    constraints = _constraints(data, len(texts))
    banned = _banned(data)
    tgt_lang = read_tgt_lang(data)
    src_lang = read_tgt_lang(data, "src_lang")
    given = data.get("decode")
    decode_prefix = given.get("prefix") if isinstance(given, dict) else None
    # every character the request makes the server read: texts, prefixes, phrases, names
    chars = sum(len(t) for t in texts) + sum(len(p) for p in prefixes or [])
    chars += sum(len(p) for phrases in constraints or [] for p in phrases)
    chars += sum(len(p) for p in banned)
    chars += len(decode_prefix) if isinstance(decode_prefix, str) else 0
    chars += len(tgt_lang or "") + len(src_lang or "")  # an unknown one is echoed in the 422
    if chars > cfg.max_chars:
        raise BadRequest(413, f"{chars} characters: this server takes at most {cfg.max_chars}")
    if not any(clean(t) for t in texts):
        raise BadRequest(422, "nothing to translate: the text is empty or blank")
    flags = {}
    for key in ("attention", "beam_tree"):
        flags[key] = data.get(key, False)
        if not isinstance(flags[key], bool):
            raise BadRequest(422, f'"{key}" must be true or false, not {_kind(flags[key])}')
    decode = request_decode(cfg.decode, data.get("decode", {}), cfg.max_beam)
    options = text_options(data, cfg, prefixes is not None or constraints is not None)
    try:
        request = Request(
            texts, decode, prefixes, banned, constraints, tgt_lang, flags["attention"],
            flags["beam_tree"], noun="text", src_lang=src_lang,
        )  # fmt: skip
    except NMTError as err:
        raise BadRequest(422, str(err)) from None
    return Asked(request, options, confidence)


@dataclasses.dataclass(frozen=True)
class Asked:
    """A /translate request: its texts and options, and how its texts are read (`options`:
    format, sentence splitting, alignments; None: each text one sentence of plain text, as a
    request with prefixes or constraints is)."""

    request: Request
    options: TextOptions | None
    confidence: bool = False  # each translation's confidence (nmt.translation.confidence)


def text_options(data: dict, cfg: ServeRunConfig, columns: bool) -> TextOptions | None:
    """The request's "format", "split_sentences", "alignments" and "protect" over the server's
    settings; None for a
    request whose texts carry prefixes or constraints (each one sentence of plain text)."""
    fmt = data.get("format", cfg.format.value)
    names = [f.value for f in TEXT_FORMATS]
    if fmt == TextFormat.auto.value:
        fmt = TextFormat.text.value
    if fmt not in names:
        raise BadRequest(422, f'"format" must be one of {", ".join(names)}, not {fmt!r}'[:300])
    flags = {}
    for key in ("split_sentences", "alignments"):
        flags[key] = data.get(key, getattr(cfg, key))
        if not isinstance(flags[key], bool):
            raise BadRequest(422, f'"{key}" must be true or false, not {_kind(flags[key])}')
    protect = data.get("protect", list(cfg.protect))
    if not isinstance(protect, list) or not all(k in PROTECT_KINDS for k in protect):
        raise BadRequest(
            422, f'"protect" must be a list of {", ".join(PROTECT_KINDS)} ([]: none), not '
            f"{protect!r}"[:300],
        )  # fmt: skip
    if columns:
        if fmt != TextFormat.text.value or flags["alignments"]:
            raise BadRequest(
                422, '"format" (other than text) and "alignments" do not go with "prefix", '
                '"prefixes" or "constraints": a text with those is one sentence of plain text',
            )  # fmt: skip
        return None
    return TextOptions(TextFormat(fmt), flags["split_sentences"], flags["alignments"], protect,
                       list(cfg.protect_patterns))  # fmt: skip


def read_tgt_lang(data: dict, key: str = "tgt_lang") -> str | None:
    """The request's "tgt_lang" (or `key`: "src_lang"; a string), None when it gives none.
    Whether the model takes it is the Translator's to say (`target_tag`, `Translator.prepare`),
    once the request is read."""
    lang = data.get(key)
    if lang is not None and not isinstance(lang, str):
        raise BadRequest(422, f'"{key}" must be a string, not {_kind(lang)}')
    return lang


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


def _banned(data: dict) -> list[str]:
    """The request's "banned" phrases (a list of strings), which add to the server's
    decode.banned."""
    banned = data.get("banned", [])
    if not isinstance(banned, list) or not all(isinstance(p, str) for p in banned):
        raise BadRequest(422, '"banned" must be a list of strings (phrases no translation has)')
    if len(banned) > MAX_BANNED:
        raise BadRequest(
            413, f"{len(banned)} banned phrases: this server takes at most {MAX_BANNED}"
        )
    return banned


def _prefixes(data: dict, count: int) -> list[str] | None:
    """The request's forced prefixes, one per text: "prefix" (a string, for every text) or
    "prefixes" (a list of strings, one per text); None when it gives neither."""
    if "prefix" in data and "prefixes" in data:
        raise BadRequest(422, 'give "prefix" (one for every text) or "prefixes", not both')
    if "prefix" in data:
        if not isinstance(data["prefix"], str):
            raise BadRequest(422, f'"prefix" must be a string, not {_kind(data["prefix"])}')
        return [data["prefix"]] * count
    if "prefixes" in data:
        given = data["prefixes"]
        if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
            raise BadRequest(422, '"prefixes" must be a list of strings, one per text')
        if len(given) != count:
            raise BadRequest(422, f'{len(given)} "prefixes" for {count} texts: give one per text')
        return given
    return None


def _constraints(data: dict, count: int) -> list[list[str]] | None:
    """The request's "constraints", one list of phrases per text: a list of strings (for every
    text) or, with "texts", a list of such lists (one per text); None when it gives none."""
    if "constraints" not in data:
        return None
    given = data["constraints"]
    usage = (
        '"constraints" must be a list of phrases (strings) every translation contains, or a '
        "list of such lists, one per text"
    )
    if not isinstance(given, list):
        raise BadRequest(422, f"{usage}, not {_kind(given)}")
    if all(isinstance(p, str) for p in given):
        per_text = [given] * count
    elif all(isinstance(c, list) and all(isinstance(p, str) for p in c) for c in given):
        if len(given) != count:
            raise BadRequest(422, f'{len(given)} "constraints" lists for {count} texts: give one '
                             "per text")  # fmt: skip
        per_text = given
    else:
        raise BadRequest(422, usage)
    most = max((len(c) for c in per_text), default=0)
    if most > MAX_CONSTRAINTS:
        raise BadRequest(
            413, f"{most} constraints for one text: this server takes at most {MAX_CONSTRAINTS}"
        )
    return per_text


def request_decode(defaults: DecodeConfig, given: object, max_beam: int) -> DecodeConfig:
    """The server's decoding defaults with a request's "decode" object applied and validated."""
    if not isinstance(given, dict):
        raise BadRequest(422, f'"decode" must be an object, not {_kind(given)}')
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
                raise BadRequest(422, f"decode.{key} must be a string, not {_kind(value)}")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest(422, f"decode.{key} must be a number, not {_kind(value)}")
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


def check_keys(data: dict, valid: tuple[str, ...], prefix: str) -> None:
    unknown = ", ".join(prefix + k for k in sorted(set(data) - set(valid)))
    if unknown:
        raise BadRequest(422, f"unknown key(s) {unknown}; valid: {', '.join(valid)}")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )


# --- answering ---------------------------------------------------------------------------------


def _number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no -inf


def _weights(maps: Tensor) -> list:
    """Maps (T, L, h, S) as nested lists [L][h][T][S], rounded to ATTENTION_DECIMALS."""
    scale = 10.0**ATTENTION_DECIMALS
    return (maps.permute(1, 2, 0, 3).double() * scale).round().div(scale).tolist()


def translation_json(
    t: Translation,
    attention: bool,
    tree: bool = False,
    constraints: list[str] | None = None,
    confidence: Confidence | None = None,
) -> dict:
    """One translation as the API returns it (see docs/serve.md)."""
    out = {
        "source": t.source,
        "text": t.text,
        "score": _number(t.score),
        "nbest": [{"text": text, "score": _number(score)} for text, score in t.nbest],
    }
    if t.warnings:  # this text's own: a source cut to max_src_pieces, a crowded beam
        out["warnings"] = t.warnings
    if confidence is not None:
        out["confidence"] = confidence_json(confidence)
    if t.prefix_score is not None:
        out["prefix"] = {"pieces": t.prefix_pieces, "score": _number(t.prefix_score)}
    if constraints:  # where each is met in the best translation, in pieces and in its text
        out["constraints"] = _met_json(t, constraints)
    if tree:
        out.update(_tree_json(t))
    if attention:
        maps = [m for _, m in t.nbest_maps]
        weights = sum(m.numel() for m in maps if m is not None)
        if not t.src_pieces or any(m is None for m in maps):
            out["attention"] = None  # a blank text, or a model without attention
        elif weights > MAX_ATTENTION_WEIGHTS:
            out["attention"] = None
            out["attention_omitted"] = (
                f"{weights} attention weights, more than the {MAX_ATTENTION_WEIGHTS} this server "
                "returns for one text"
            )
        else:
            out["attention"] = {
                "src_pieces": t.src_pieces,
                "hypotheses": [
                    {"tgt_pieces": pieces, "weights": _weights(m)} for pieces, m in t.nbest_maps
                ],
            }
    return out


def confidence_json(c: Confidence) -> dict:
    """P(good), the flags, each word's and each piece's probability (docs/confidence.md)."""
    return {
        "sentence": round(c.sentence, 4),
        "flags": c.flags,
        "words": [round(w, 4) for w in c.words],
        "pieces": [round(p, 4) for p in c.pieces],
    }


def document_json(
    source: str,
    result: BlockResult,
    alignments: bool,
    attention: bool,
    tree: bool,
    confidences: list[Confidence] | None = None,
) -> dict:
    """A text translated as its sentences (split, or carrying markup or protected spans): its
    translation with its markup put back, the sum of its sentences' scores, its word alignment
    when asked, and each sentence as `translation_json` writes it (see docs/serve.md)."""
    scores = [t.score for t in result.sentences]
    score = _number(sum(scores)) if scores else None
    out = {
        "source": source,
        "text": result.text,
        "score": score,
        "nbest": [{"text": result.text, "score": score}],
        "sentences": [
            translation_json(t, attention, tree, confidence=c)
            for t, c in zip(result.sentences, confidences or [None] * len(result.sentences))
        ],
    }
    if confidences is not None:
        out["confidence"] = confidence_json(combine(confidences))
    if alignments:
        out["alignment"] = moses(result.alignment or [])
    if result.warnings:
        out["warnings"] = result.warnings
    return out


def _met_json(t: Translation, constraints: list[str]) -> list[dict]:
    """Each constraint with the span of `tgt_pieces` that meets it ("pieces": [start, end)) and
    the characters of the text it covers ("chars": [start, end)), for a page to highlight."""
    out = []
    for phrase, (start, end) in zip(constraints, t.constraint_spans):
        before = "".join(t.tgt_pieces[:start]).replace("▁", " ").lstrip()
        inside = "".join(t.tgt_pieces[start:end]).replace("▁", " ")
        # the text is the pieces' decoding, whitespace collapsed: count characters the same way
        first = len(" ".join(before.split())) + (1 if before and inside.startswith(" ") else 0)
        chars = [first, first + len(" ".join(inside.split()))]
        if t.text[chars[0] : chars[1]] != " ".join(inside.split()):
            chars = None  # a byte piece or a normalization: the pieces do not map onto the text
        out.append({"phrase": phrase, "pieces": [start, end], "chars": chars})
    return out


def _tree_json(t: Translation) -> dict:
    if t.tree is None:  # a blank text
        return {"beam_tree": None}
    nodes = t.tree.nodes
    if len(nodes) > MAX_TREE_NODES:
        message = f"{len(nodes)} nodes, more than the {MAX_TREE_NODES} this server returns"
        return {"beam_tree": None, "beam_tree_omitted": message}
    return {
        "beam_tree": {
            "nodes": [
                {
                    "id": i,
                    "parent": None if n.parent < 0 else n.parent,
                    "piece": n.piece,
                    "text": n.text,
                    "step": n.step,
                    "score": _number(n.score),
                    "state": n.state,
                    "rank": n.rank,
                    **({} if n.met is None else {"met": n.met}),
                }
                for i, n in enumerate(nodes)
            ],
            **(
                {}
                if t.tree.constraint_pieces is None
                else {"constraint_pieces": t.tree.constraint_pieces}
            ),
        }
    }


def describe_model(translator: Translator, run: TrainRunConfig, payload: dict) -> dict:
    """What GET /info reports: the checkpoint's model, data, vocabularies and validation."""
    model = run.model
    if isinstance(model, TransformerConfig):
        arch = {"scorer": "scaled_dot", "heads": model.heads, "d_model": model.d_model}
        maps = (model.decoder_layers, model.heads)
    else:
        assert isinstance(model, RNNConfig)
        arch = {
            "scorer": model.attention.value,
            "decoder": model.decoder.value,
            "cell": model.cell.value,
            "hidden_size": model.hidden_size,
            "bidirectional": model.bidirectional,
        }
        heads = model.heads if model.attention.value == "multihead" else 1
        maps = None if model.attention.value == "none" else (1, heads)
    metrics = payload.get("metrics") or {}
    return {
        "family": model.arch,
        **arch,
        "encoder_layers": model.encoder_layers,
        "decoder_layers": model.decoder_layers,
        "attention_maps": None if maps is None else {"layers": maps[0], "heads": maps[1]},
        "parameters": sum(p.numel() for p in translator.model.parameters()),
        "languages": {"source": run.data.src_lang, "target": run.data.tgt_lang},
        # the "tgt_lang" values a request may give (TargetTags.languages): a model trained with
        # target tags lists each tagged language, one without lists its data.tgt_lang alone
        "target_languages": translator.tags.languages,
        # the "src_lang" values a request may give: a model with language codes (an NLLB-200,
        # M2M-100 or mBART-50 import) lists them; the others take none
        "source_codes": translator.tags.source_codes,
        # the languages it was trained to read: several for a many-to-one model, no tag needed
        "source_languages": run.data.source_languages(),
        "data": run.data.name,
        "vocabulary": {
            "source": len(translator.vocabs.src),
            "target": len(translator.vocabs.tgt),
            "joint": translator.vocabs.joint,
        },
        "decode": flatten(translator.decode),
        "step": payload.get("step"),
        "validation": {
            "bleu": _number(metrics["bleu"]) if "bleu" in metrics else None,
            "loss": _number(metrics["loss"]) if "loss" in metrics else None,
            "decode": run.decode.describe() if "bleu" in metrics else None,
        },
        "device": str(translator.device),
    }
