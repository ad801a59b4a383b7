"""Text beyond sentences, measured on held-out Multi30k: paragraphs, tags, protected spans, and
what they cost, printed as JSON.

    python scripts/bench_markup.py runs/NAME/checkpoints/best --data ../shared/data/multi30k \\
        [--lines 200] [--repeats 3] [--split val]

- `paragraphs`: test2016's sentences (`--split`) joined three a line, translated with sentence
  splitting and without, against the same sentences one a line (each BLEU against the joined
  references, its sacreBLEU signature beside it); `lost` counts paragraphs whose translation
  has fewer than three quarters of the words of the sentence-by-sentence one (a sentence
  dropped). `unpunctuated`: the same paragraphs with the final punctuation of their first two
  sentences taken off. `_unchecked`: without the check for skipped sentences
  (nmt.documents.recovery), whose `cut` counts the sentences it cut in two; `would_cut` the
  sentences one a line it would cut if they were checked.
- `tags`: `--lines` test lines with one source word wrapped in <b>...</b>, a word whose
  translation the training text gives (the target word most often on the same line, Dice
  >= 0.5, each the other's best) and that the reference holds. `kept` counts outputs with
  both tags, once each and in order; `inside` the share, among the outputs that hold the
  word's translation, where it is between the tags; for every attention layer (and the mean
  of layers), read at the step that writes a piece and at the one that reads it (`shift`):
  what chose nmt.documents.alignment.DEFAULT_LAYER and DEFAULT_SHIFT.
- `protected`: `--lines` test lines with a URL, a `{name}` placeholder or a code such as XK-4711
  put after their third word; `verbatim` counts outputs holding it exactly once.
- `cost`: the seconds of the paragraphs with splitting against their sentences given one a
  line; and of the tagged lines against the same lines untagged. Medians of `--repeats`, the
  two of each pair taking turns; one torch thread.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from dataclasses import replace
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU

from nmt.config import TextFormat, TextOptions
from nmt.data.splits import read_lines
from nmt.data.starts import SentenceEdges
from nmt.device import describe
from nmt.documents.alignment import Reading, reading_of, word_alignment
from nmt.documents.inline import lift_markup
from nmt.documents.job import translate_blocks
from nmt.documents.placing import place
from nmt.documents.recovery import recovery_cut
from nmt.documents.sentences import split
from nmt.documents.texts import read_block, translate_texts
from nmt.metrics import paired_median_seconds
from nmt.translation.request import Request
from nmt.translation.translator import Translator

WORD = re.compile(r"[^\W\d_]+")
FINAL = re.compile(r"[.!?]+\s*$")


def words(line: str) -> list[str]:
    return [w.lower() for w in WORD.findall(line)]


def dictionary(src: list[str], tgt: list[str], least: int = 20) -> dict[str, str]:
    """Source word -> the target word most often on the same line (Dice >= 0.5), where that
    word's own best source word is it: mutual best, so that a word seen beside a frequent
    one is not taken for its translation ("eine" is on the lines of "woman", as "Frau" is)."""
    s_count, t_count, both = collections.Counter(), collections.Counter(), collections.Counter()
    for a, b in zip(src, tgt):
        sa, sb = set(words(a)), set(words(b))
        s_count.update(sa)
        t_count.update(sb)
        both.update((x, y) for x in sa for y in sb)
    best: dict[str, tuple[float, str]] = {}
    back: dict[str, tuple[float, str]] = {}
    for (x, y), c in both.items():
        if s_count[x] < least:
            continue
        dice = 2 * c / (s_count[x] + t_count[y])
        if dice > best.get(x, (0.0, ""))[0]:
            best[x] = (dice, y)
        if dice > back.get(y, (0.0, ""))[0]:
            back[y] = (dice, x)
    return {x: y for x, (dice, y) in best.items() if dice >= 0.5 and back[y][1] == x}


def well_formed(text: str) -> bool:
    return (
        text.count("<b>") == 1
        and text.count("</b>") == 1
        and text.index("<b>") < text.index("</b>")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--data", type=Path, required=True, help="multi30k's files")
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--split",
        default="test_2016_flickr",
        help="the held-out pair: test_2016_flickr, or val to choose settings on",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    translator = Translator.from_checkpoint(args.ckpt, device="cpu")
    src = read_lines(args.data / f"{args.split}.de")
    ref = read_lines(args.data / f"{args.split}.en")
    decode = translator.decode
    report: dict = {
        "checkpoint": args.ckpt,
        "split": args.split,
        "machine": describe(torch.device("cpu")),
    }
    bleu = BLEU()

    # paragraphs
    n = len(src) // 3 * 3
    paragraphs = [" ".join(src[i : i + 3]) for i in range(0, n, 3)]
    # the same without the full stops of the first two sentences: joins only start words and
    # the model's attention can find (nmt.documents.sentences, nmt.documents.recovery)
    bare = [" ".join([*(FINAL.sub("", s) for s in src[i : i + 2]), src[i + 2]])
            for i in range(0, n, 3)]  # fmt: skip
    joined_refs = [" ".join(ref[i : i + 3]) for i in range(0, n, 3)]
    plain = TextOptions(format=TextFormat.text, protect=[])
    one = [r.text for r in translate_texts(translator, Request(src[:n], decode), plain)]
    by_sentence = [" ".join(one[i : i + 3]) for i in range(0, n, 3)]
    edges = translator.facts.edges
    rows = {}
    for name, texts, wanted, checked in [
        ("split", paragraphs, True, True),
        ("split_unchecked", paragraphs, True, False),
        ("unsplit", paragraphs, False, False),
        ("unpunctuated", bare, True, True),
        ("unpunctuated_unchecked", bare, True, False),
    ]:
        facts = replace(translator.facts, edges=edges if checked else SentenceEdges())
        options = replace(plain, split_sentences=wanted)
        results = translate_texts(translator.with_facts(facts), Request(texts, decode), options)
        out = [r.text for r in results]
        lost = sum(len(o.split()) < 0.75 * len(s.split()) for o, s in zip(out, by_sentence))
        rows[name] = {"bleu": round(bleu.corpus_score(out, [joined_refs]).score, 2), "lost": lost}
        if checked:  # sentences the check cut off (more parts than the splitter made)
            language = translator.facts.language or "en"
            parts = sum(len(split(t, language, translator.facts.starts).sentences)
                        for t in texts)  # fmt: skip
            rows[name]["cut"] = sum(len(r.sentences) for r in results) - parts
    rows["one_a_line"] = {"bleu": round(bleu.corpus_score(by_sentence, [joined_refs]).score, 2)}
    # sentences one a line are not checked; how many the check would cut if they were
    alone = translator.run(translator.prepare(Request(src[:n], decode, attention=True)))
    skip = len(translator.tags.ids(None))
    would = [recovery_cut(t, skip, reading_of(translator.facts.taught), edges) for t in alone]
    rows["one_a_line"]["would_cut"] = sum(w is not None for w in would)
    report["paragraphs"] = {
        "count": len(paragraphs),
        **rows,
        "signature": str(bleu.get_signature()),
    }

    # tags
    lexicon = dictionary(read_lines(args.data / "train.de"), read_lines(args.data / "train.en"))
    cases = []
    for s, r in zip(src, ref):
        tokens = s.split()
        for k, token in enumerate(tokens):
            word = token.strip(".,;:!?\"'").lower()
            target = lexicon.get(word)
            if target and target in words(r) and token.strip(".,;:!?\"'") == token[: len(word)]:
                tagged = tokens[:k] + [f"<b>{token[: len(word)]}</b>{token[len(word) :]}"]
                cases.append((" ".join(tagged + tokens[k + 1 :]), target))
                break
        if len(cases) == args.lines:
            break
    html = TextOptions(format=TextFormat.html, protect=[])
    blocks = [read_block(text, TextFormat.html, html) for text, _ in cases]
    results = translate_blocks(translator, blocks, Request([], decode), html)
    first_maps = results[0].sentences[0].maps
    layers, heads = (1, 1) if first_maps is None else (first_maps.size(1), first_maps.size(2))
    skip = len(translator.tags.ids(None))
    settings = [(layer, False, None, both) for layer in [*range(layers), None]
                for both in (False, True)]  # fmt: skip
    settings += [(layers - 1, True, None, False), (layers - 1, True, None, True)]
    settings += [(layers - 1, False, h, both) for h in range(heads) for both in (False, True)]
    variants = {}
    for layer, shift, head, both in settings:
        kept = inside = has = width = 0
        for (_, target), block, result in zip(cases, blocks, results):
            pairs, src_off, tgt_off = [], 0, 0
            for t in result.sentences:
                found = word_alignment(t, skip, Reading(layer, head, both, shift))
                pairs += [(a + src_off, b + tgt_off) for a, b in found]
                src_off += len(t.source.split())
                tgt_off += len(t.text.split())
            out = place(block, result.plain, pairs)
            kept += well_formed(out)
            if target in words(result.plain) and well_formed(out):
                has += 1
                span = out[out.index("<b>") + 3 : out.index("</b>")]
                inside += target in words(span)
                width += len(span.split())
        name = f"layer {'mean' if layer is None else layer}"
        name += f" head {head}" if head is not None else ""
        name += " shift" if shift else ""
        name += " both directions" if both else ""
        variants[name] = {
            "kept": kept, "has_word": has, "inside": round(inside / max(has, 1), 4),
            "words_between_tags": round(width / max(has, 1), 2),
        }  # fmt: skip
    report["tags"] = {"lines": len(cases), "variants": variants}

    # protected spans
    spans = ["https://example.com/a?b=1", "{name}", "XK-4711", "anna@example.org", "%(count)d"]
    protected_lines = []
    for i, s in enumerate(src[: args.lines]):
        tokens = s.split()
        span = spans[i % len(spans)]
        protected_lines.append((" ".join(tokens[:3] + [span] + tokens[3:]), span))
    options = TextOptions(format=TextFormat.text)
    out = translate_texts(translator, Request([t for t, _ in protected_lines], decode), options)
    verbatim = sum(r.text.count(span) == 1 for r, (_, span) in zip(out, protected_lines))
    report["protected"] = {"lines": len(protected_lines), "verbatim": verbatim}

    # cost
    split_on = replace(plain, split_sentences=True)
    t_paragraphs, t_sentences = paired_median_seconds(
        lambda: translate_texts(translator, Request(paragraphs, decode), split_on),
        lambda: translator.translate(src[:n], decode=decode),
        args.repeats,
    )
    untagged = [lift_markup(text).text for text, _ in cases]
    t_tagged, t_untagged = paired_median_seconds(
        lambda: translate_texts(translator, Request([t for t, _ in cases], decode), html),
        lambda: translator.translate(untagged, decode=decode),
        args.repeats,
    )
    report["cost"] = {
        "paragraphs_s": round(t_paragraphs, 3),
        "sentences_s": round(t_sentences, 3),
        "paragraphs_over_sentences": round(t_paragraphs / t_sentences, 3),
        "tagged_s": round(t_tagged, 3),
        "untagged_s": round(t_untagged, 3),
        "tagged_over_untagged": round(t_tagged / t_untagged, 3),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
