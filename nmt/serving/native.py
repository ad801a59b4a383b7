"""nmt's own JSON shape: a /translate body read into the one `Request` (each problem one
`BadRequest` with its status), and each translation written as docs/serve.md says.

    POST /translate  {"text": "..."} or {"texts": [...]}, optional "decode": {...}, "attention",
                     "prefix" (or "prefixes"), "beam_tree", "banned", "constraints", "tgt_lang",
                     "src_lang", "format", "split_sentences", "alignments", "protect",
                     "confidence"
    -> {"translations": [{"source", "text", "score", "nbest", ...}, ...], "decode": {...}}

A text that is one sentence of plain text is answered as its translation (its n-best list,
attention maps, search tree, constraints met); a text translated as its sentences (split, or
carrying markup or protected spans) as the text put back together, with each sentence's
translation under "sentences". What a request costs and may ask is `nmt.serving.admission`'s;
the search is the server's (`nmt.serving.server`), which never sees this JSON.
"""

from __future__ import annotations

import dataclasses

from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from torch import Tensor

from nmt.config import PROTECT_KINDS, TextFormat, TextOptions
from nmt.documents.alignment import moses
from nmt.documents.blocks import BlockResult
from nmt.documents.texts import TEXT_FORMATS
from nmt.errors import NMTError
from nmt.run_config import ServeRunConfig, flatten
from nmt.serving.admission import MAX_BANNED, MAX_CONSTRAINTS, request_decode
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
    kind,
    number,
    read_body,
    read_flag,
    read_object,
    read_string,
)
from nmt.serving.keys import Keys
from nmt.serving.models import Models
from nmt.serving.server import Asked
from nmt.tokenizer import clean
from nmt.translation.confidence import Confidence, combine
from nmt.translation.request import Request, Segment
from nmt.translation.translator import Translation

AUTO = "auto"  # "src_lang": the language is detected
REQUEST_KEYS = (
    "alignments", "attention", "banned", "beam_tree", "confidence", "constraints", "decode",
    "format", "prefix", "prefixes", "protect", "split_sentences", "src_lang", "text", "texts",
    "tgt_lang",
)  # fmt: skip


async def translate(models: Models, keys: Keys, request: HTTPRequest) -> Response:
    """POST /translate: the request read, translated along its route (`nmt.serving.models`),
    each text's answer as `NativeAnswer` writes it, and the decode settings it was searched
    with; "src_lang": "auto" is the texts' language, detected (said in "detected_language")."""
    cfg = models.cfg
    asked = parse_request(await read_body(request, body_limit(cfg.max_chars)), cfg)
    call = asked.request
    admit(keys, bearer_key(request), sum(len(t) for t in call.texts))
    extra = {}
    try:
        if call.src_lang == AUTO:
            found = models.detect(call.texts)
            call = dataclasses.replace(call, src_lang=found.language if found else None)
            asked = dataclasses.replace(asked, request=call)
            extra["detected_language"] = None if found is None else {
                "language": found.language, "confidence": round(found.confidence, 4)}  # fmt: skip
        answers, route = await models.translate(asked, NativeAnswer(asked), client_of(request))
    except QueueFull as full:
        return busy(full)
    except NMTError as err:
        raise BadRequest(422, str(err)) from None
    if route.pivot is not None:
        extra["pivot"] = route.pivot
    settings = {**flatten(call.decode), "banned": call.banned_phrases}  # as searched
    body = b'{"translations":[' + b",".join(answers) + b'],"decode":' + json_bytes(settings)
    for name, value in extra.items():
        body += b',"' + name.encode() + b'":' + json_bytes(value)
    return Response(body + b"}", media_type="application/json")


# --- reading a request -----------------------------------------------------------------------


def parse_request(body: bytes, cfg: ServeRunConfig) -> Asked:
    """Check a /translate body against the contract and make it a Request (its texts numbered
    "text 1", "text 2", ... in messages); each problem is one BadRequest."""
    data = read_object(body, '{"text": "Guten Tag."}')
    check_keys(data, REQUEST_KEYS)
    confidence = read_flag(data, "confidence")
    texts = _texts(data, cfg)
    prefixes = _prefixes(data, len(texts))
    constraints = _constraints(data, len(texts))
    banned = _banned(data)
    tgt_lang, src_lang = read_string(data, "tgt_lang"), read_string(data, "src_lang")
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
    attention, tree = read_flag(data, "attention"), read_flag(data, "beam_tree")
    decode = request_decode(cfg.decode, data.get("decode", {}), cfg.max_beam)
    options = text_options(data, cfg, prefixes is not None or constraints is not None)
    try:
        request = Request(
            texts, decode, prefixes, banned, constraints, tgt_lang, attention, tree, noun="text",
            src_lang=src_lang,
        )  # fmt: skip
    except NMTError as err:
        raise BadRequest(422, str(err)) from None
    return Asked(request, options, confidence)


def _texts(data: dict, cfg: ServeRunConfig) -> list[str]:
    """The request's "text" (a string) or "texts" (a list of at most max_texts strings)."""
    if ("text" in data) == ("texts" in data):
        raise BadRequest(422, 'give "text" (a string) or "texts" (a list of strings), not both')
    if "text" in data:
        if not isinstance(data["text"], str):
            raise BadRequest(422, f'"text" must be a string, not {kind(data["text"])}')
        return [data["text"]]
    texts = data["texts"]
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise BadRequest(422, '"texts" must be a list of strings')
    if len(texts) > cfg.max_texts:
        raise BadRequest(413, f"{len(texts)} texts: this server takes at most {cfg.max_texts}")
    return texts


def text_options(data: dict, cfg: ServeRunConfig, columns: bool) -> TextOptions | None:
    """The request's "format", "split_sentences", "alignments" and "protect" over the server's
    settings; None for a request whose texts carry prefixes or constraints (each one sentence
    of plain text)."""
    fmt = data.get("format", cfg.format.value)
    names = [f.value for f in TEXT_FORMATS]
    if fmt == TextFormat.auto.value:
        fmt = TextFormat.text.value
    if fmt not in names:
        raise BadRequest(422, f'"format" must be one of {", ".join(names)}, not {fmt!r}'[:300])
    flags = {k: read_flag(data, k, getattr(cfg, k)) for k in ("split_sentences", "alignments")}
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
            raise BadRequest(422, f'"prefix" must be a string, not {kind(data["prefix"])}')
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
        raise BadRequest(422, f"{usage}, not {kind(given)}")
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


# --- answering ---------------------------------------------------------------------------------

ATTENTION_DECIMALS = 4  # attention weights are rounded to this many decimals on the wire
# most attention weights returned for one text (all its hypotheses, layers and heads), about 16 MB
# of JSON: a 1,000-piece source with a long n-best list would otherwise give gigabytes
MAX_ATTENTION_WEIGHTS = 2_000_000
# most search-tree nodes returned for one text (about 2 MB of JSON); a beam of K keeps at most
# 2K nodes a step, so beam 5 over 100 steps stays well within it
MAX_TREE_NODES = 20_000


class NativeAnswer:
    """How nmt's JSON answers a request's texts (`nmt.serving.server.Answer`): a translation with
    the extras its request asked for (attention maps, search tree, confidence, where its
    constraints are met), a document with its alignment and its sentences."""

    def __init__(self, asked: Asked) -> None:
        self.attention, self.tree = asked.request.attention, asked.request.tree
        self.confidence = asked.confidence
        self.alignments = asked.options is not None and asked.options.alignments

    def translation(self, t: Translation, segment: Segment) -> bytes:
        constraints = list(segment.constraints)
        return json_bytes(translation_json(t, self.attention, self.tree, constraints,
                                           t.confidence))  # fmt: skip

    def memory(self, source: str, text: str) -> bytes:
        """A text the server's translation memory holds: its translation, no score."""
        nbest = [{"text": text, "score": None}]
        return json_bytes({"source": source, "text": text, "score": None, "nbest": nbest,
                           "from_memory": True})  # fmt: skip

    def document(self, source: str, result: BlockResult) -> bytes:
        judged = [t.confidence for t in result.sentences] if self.confidence else None
        return json_bytes(document_json(source, result, self.alignments, self.attention,
                                        self.tree, judged))  # fmt: skip


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
        "score": number(t.score),
        "nbest": [{"text": text, "score": number(score)} for text, score in t.nbest],
    }
    if t.warnings:  # this text's own: a source cut to max_src_pieces, a crowded beam
        out["warnings"] = t.warnings
    if confidence is not None:
        out["confidence"] = confidence_json(confidence)
    if t.prefix_score is not None:
        out["prefix"] = {"pieces": t.prefix_pieces, "score": number(t.prefix_score)}
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
    score = number(sum(scores)) if scores else None
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
                    "score": number(n.score),
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
