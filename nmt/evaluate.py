"""Evaluation: decode a split, write the hypotheses, score them with sacreBLEU.

Scores are always computed by sacrebleu on detokenized output against the references as read
(whitespace runs collapsed, which none of BLEU's 13a tokenizer, chrF or TER can see), and printed
in sacreBLEU's own format followed by the signature.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF, TER

from nmt.attention_map import save_heatmap, save_heatmap_grid
from nmt.checkpoint import load_checkpoint, restore_model
from nmt.data import read_lines, read_split
from nmt.device import resolve_device
from nmt.errors import NMTError
from nmt.run_config import EvaluateRunConfig
from nmt.translate import Translator


@dataclass
class Scores:
    bleu: float
    chrf: float
    ter: float
    lines: list[str]  # sacreBLEU's own rendering of each score, each followed by its signature

    def to_dict(self) -> dict:
        return {"bleu": self.bleu, "chrf": self.chrf, "ter": self.ter, "report": self.lines}


def score(hypotheses: list[str], references: list[str]) -> Scores:
    if len(hypotheses) != len(references):
        raise NMTError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    lines, values = [], []
    for metric in (BLEU(), CHRF(), TER()):
        result = metric.corpus_score(hypotheses, [references])
        lines += [str(result), f"  signature: {metric.get_signature()}"]
        values.append(result.score)
    return Scores(*values, lines)


def bleu(hypotheses: list[str], references: list[str]) -> float:
    return BLEU().corpus_score(hypotheses, [references]).score


def _out_dir(cfg: EvaluateRunConfig, ckpt_path: Path) -> Path:
    if cfg.out_dir:
        return Path(cfg.out_dir)
    real = ckpt_path.resolve()
    # runs/NAME/checkpoints/step-N -> runs/NAME/eval; a loose checkpoint keeps its own eval/
    return real.parent.parent / "eval" if real.parent.name == "checkpoints" else real / "eval"


def evaluate_main(cfg: EvaluateRunConfig) -> Scores:
    ckpt = load_checkpoint(cfg.ckpt)
    device = resolve_device(cfg.device)
    model = restore_model(ckpt, device)
    translator = Translator(model, ckpt.vocabs, cfg.decode, device, ckpt.lexicon)
    if cfg.src_file is not None:
        sources, references = read_lines(Path(cfg.src_file)), read_lines(Path(cfg.ref_file))
        name = Path(cfg.src_file).name
        if len(sources) != len(references):
            raise NMTError(
                f"{cfg.src_file} has {len(sources)} lines but {cfg.ref_file} has {len(references)}"
            )
    else:
        corpus = read_split(cfg.data or ckpt.config.data, cfg.split)
        sources, references, name = corpus.src, corpus.tgt, cfg.split.value

    out = _out_dir(cfg, ckpt.path)
    out.mkdir(parents=True, exist_ok=True)
    # heatmaps first, from their own small decode: a bad attention_layer fails in seconds, and the
    # full decode need not keep attention maps (greedy and beam output does not depend on the batch)
    for k, result in enumerate(translator.translate_full(sources[: cfg.heatmaps])):
        weights = result.attention(cfg.attention_layer, cfg.attention_head)
        if weights is None:
            continue
        pieces = (result.src_pieces, result.tgt_pieces)
        save_heatmap(*pieces, weights, out / f"{name}.attention.{k}.png", result.text)
        if cfg.heatmap_grid:
            save_heatmap_grid(*pieces, result.maps, out / f"{name}.heads.{k}.png", result.text)

    hypotheses = translator.translate(sources)
    scores = score(hypotheses, references)

    (out / f"{name}.hyp").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    record = {
        "checkpoint": str(ckpt.path),
        "step": ckpt.payload["step"],
        "split": name,
        "sentences": len(sources),
        "decode": cfg.decode.describe(),
        **scores.to_dict(),
    }
    (out / f"{name}.scores.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    step = ckpt.payload["step"]
    print(f"{name}: {len(sources)} sentences, checkpoint {ckpt.path} (step {step})")
    print(f"decoding: {cfg.decode.describe()}")
    print("\n".join(scores.lines))
    print(f"hypotheses: {out / f'{name}.hyp'}", file=sys.stderr)
    return scores
