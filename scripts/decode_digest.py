"""What the search produces, over a matrix of decode settings, as JSON digests: run it at two
commits on the same checkpoint and file, and equal digests mean identical output (tokens, scores,
n-best lists, attention maps, search trees) setting by setting.

    python scripts/decode_digest.py runs/a/checkpoints/best [runs/b/checkpoints/best ...] \\
        --src ../shared/data/multi30k/test_2016_flickr.de \\
        --ref ../shared/data/multi30k/test_2016_flickr.en [--lines 1000] [--dump DIR]

Several checkpoints are decoded as one ensemble (`Translator.from_checkpoints`). The settings:
greedy, beam 5 (gnmt alpha 1, n-best 3), sampling (2 draws, top-k 10), each alone and with a forced
prefix (each line's first two greedy words), banned phrases (the three most frequent words of the
greedy output), and beam 5 with constraints (per line, the longest reference word of letters that
the model's vocabulary can write and that holds no banned word) and with search trees and attention
maps. Only `Translator.translate_full` is called, with keywords every commit since constraints has.

Prints one JSON object: per setting, the sha256 of its output and how many lines it covers; with
`--dump DIR`, each setting's output is written to DIR/<setting>.jsonl as well, one line per
source, for a diff. Scores are written with `repr`, so a last-bit difference changes the digest.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

import torch

from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.errors import NMTError
from nmt.translation.phrases import constraint_ids
from nmt.translation.translator import Translation, Translator

WORD = re.compile(r"[^\W\d_]{3,}")


def record(t: Translation, maps: bool) -> dict:
    """Everything a translation carries, as JSON-able values (scores as repr)."""
    out: dict = {
        "text": t.text,
        "pieces": t.tgt_pieces,
        "score": repr(t.score),
        "nbest": [[text, repr(score)] for text, score in t.nbest],
        "prefix": None if t.prefix_score is None else [t.prefix_pieces, repr(t.prefix_score)],
        "spans": [list(s) for s in t.constraint_spans],
    }
    if maps and t.nbest_maps:
        digest = hashlib.sha256()
        for _, m in t.nbest_maps:
            if m is not None:
                digest.update(m.float().contiguous().numpy().tobytes())
        out["maps"] = digest.hexdigest()
    if t.tree is not None:
        out["tree"] = [
            [n.parent, n.token, n.step, repr(n.score), n.state, n.rank, n.met] for n in t.tree.nodes
        ]
    return out


def constraint_words(
    translator: Translator, refs: list[str], banned: list[str]
) -> list[list[str]]:
    """Per line, its reference's longest word of letters that the model can write and that holds
    none of the `banned` words (a constraint holding a banned phrase is refused: a setting
    combines the two); [] if none."""
    out = []
    for ref in refs:
        words = sorted(set(WORD.findall(ref)), key=lambda w: (-len(w), w))
        chosen = []
        for word in words:
            if any(b.lower() in word.lower() for b in banned):
                continue
            try:
                constraint_ids(translator.vocabs.tgt, word)
            except NMTError:
                continue
            chosen = [word]
            break
        out.append(chosen)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", nargs="+", help="a checkpoint; several: an ensemble")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True, help="references: the constraints' words")
    parser.add_argument("--lines", type=int, default=1000, help="the file's first N lines")
    parser.add_argument("--dump", type=Path, help="write each setting's output here")
    args = parser.parse_args()
    torch.manual_seed(0)
    sources = read_lines(Path(args.src))[: args.lines]
    refs = read_lines(Path(args.ref))[: args.lines]
    translator = Translator.from_checkpoints(args.ckpt, DecodeConfig(), device="cpu")
    greedy = DecodeConfig()
    beam = DecodeConfig(
        strategy=Strategy.beam, beam_size=5, n_best=3, length_penalty=LengthPenalty.gnmt, alpha=1.0
    )
    sample = DecodeConfig(strategy=Strategy.sample, n_best=2, top_k=10, seed=7)
    plain = translator.translate(sources, decode=greedy)
    prefixes = [" ".join(text.split()[:2]) for text in plain]
    counts = collections.Counter(w for text in plain for w in text.split() if WORD.fullmatch(w))
    banned = [w for w, _ in counts.most_common(3)]
    constraints = constraint_words(translator, refs, banned)

    settings = {}
    for name, decode in (("greedy", greedy), ("beam", beam), ("sample", sample)):
        settings[name] = dict(decode=decode)
        settings[f"{name}-prefix"] = dict(decode=decode, prefixes=prefixes)
        settings[f"{name}-banned"] = dict(decode=decode, banned=banned)
    settings["beam-constraints"] = dict(decode=beam, constraints=constraints)
    settings["beam-constraints-banned-prefix"] = dict(
        decode=beam, constraints=constraints, banned=banned[1:], prefixes=prefixes
    )
    settings["beam-tree-attention"] = dict(decode=replace(beam, n_best=2), tree=True, maps=True)
    settings["greedy-attention"] = dict(decode=greedy, maps=True)
    settings["beam-constraints-tree"] = dict(decode=beam, constraints=constraints, tree=True)

    report: dict = {"checkpoints": args.ckpt, "lines": len(sources), "banned": banned}
    for name, options in settings.items():
        maps = options.pop("maps", False)
        results = translator.translate_full(sources, maps, **options)
        lines = [json.dumps(record(t, maps), ensure_ascii=False) for t in results]
        report[name] = hashlib.sha256("\n".join(lines).encode()).hexdigest()
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
