"""nmt-evaluate: decode a split (or a pair of files), write the hypotheses, score them with
sacreBLEU (`nmt.metrics`: detokenized output against the raw references, signatures printed),
and draw the attention of the first sentences. With `compare=FILE` (or a list), each hypothesis
file is compared with the checkpoint's own hypotheses (the baseline) by paired bootstrap
resampling: scores with 95% confidence intervals and p-values, in the output and scores.json.
A model trained on several corpora (data.corpora) is scored per direction (`direction=de-en`, or
each in turn): that corpus's split, translated with its target tag, into `<split>.<direction>.*`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from nmt.checkpoint import load_checkpoint
from nmt.cli.file_job import FileJob, model_digests, rank_device, show_progress
from nmt.config import DataConfig, Split
from nmt.data import corpora
from nmt.data.splits import Corpus, read_lines, read_split
from nmt.distributed import Dist, from_environment
from nmt.documents.texts import translate_texts
from nmt.errors import NMTError
from nmt.metrics import Scores, compare, score
from nmt.run_config import EvaluateRunConfig, flatten
from nmt.tokenizer import clean
from nmt.translation.attention_map import save_heatmap, save_heatmap_grid
from nmt.translation.confidence import (
    CALIBRATION_FILE,
    Calibration,
    fit,
    measure,
    quality_report,
    search_kind,
    token_eces,
)  # fmt: skip
from nmt.translation.request import Request
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)


def _out_dir(cfg: EvaluateRunConfig, ckpt_path: Path) -> Path:
    if cfg.out_dir:
        return Path(cfg.out_dir)
    real = ckpt_path.resolve()
    # runs/NAME/checkpoints/step-N -> runs/NAME/eval; a loose checkpoint keeps its own eval/
    return real.parent.parent / "eval" if real.parent.name == "checkpoints" else real / "eval"


def _splits(cfg: EvaluateRunConfig, data: DataConfig) -> list[tuple[str, Corpus, str | None]]:
    """(name, pairs, target language) of each split to score: the data's split, or for a model
    trained on data.corpora, that split of `direction`'s corpus (every direction when none)."""
    if not data.corpora:
        own = f"{data.src_lang}-{data.tgt_lang}"
        if cfg.direction not in (None, own):
            raise NMTError(f"direction={cfg.direction}: this model's data is {own} alone")
        return [(cfg.split.value, read_split(data, cfg.split), None)]
    known = corpora.directions(data)
    if cfg.direction is not None and cfg.direction not in known:
        raise NMTError(
            f"direction={cfg.direction}: the model's corpora are {', '.join(known)}; "
            f"e.g. direction={next(iter(known))}"
        )
    wanted = [cfg.direction] if cfg.direction else list(known)
    # every split is read before any decoding: a missing file fails in a second
    return [
        (f"{cfg.split.value}.{d}", read_split(known[d][0], cfg.split), known[d][0].tgt_lang)
        for d in wanted
    ]


def evaluate_main(cfg: EvaluateRunConfig) -> Scores | None:
    """Score the split (each direction's, for a model of several corpora: see `_splits`); the
    scores of the last one scored. Under torchrun every process translates its share of each
    split (`nmt.cli.file_job`) and rank 0 scores (the others return None)."""
    where = from_environment()
    ckpts = [load_checkpoint(path) for path in cfg.ckpts]
    ckpt = ckpts[0]  # an ensemble's: its first member's data config, step and path are reported
    device = rank_device(cfg.device, where)
    translator = Translator.from_command(cfg, cfg.decode, device, ckpts)
    if cfg.src_file is not None:
        sources, references = read_lines(Path(cfg.src_file)), read_lines(Path(cfg.ref_file))
        if len(sources) != len(references):
            raise NMTError(
                f"{cfg.src_file} has {len(sources)} lines but {cfg.ref_file} has {len(references)}"
            )
        # a direction given with files says which target tag to translate with
        tgt_lang = cfg.direction.split("-")[1] if cfg.direction else None
        splits = [(Path(cfg.src_file).name, Corpus(sources, references), tgt_lang)]
    else:
        splits = _splits(cfg, cfg.data or ckpt.config.data)
    if cfg.compare and len(splits) > 1:
        raise NMTError("compare=... compares one split's hypotheses: give direction=SRC-TGT")
    scores = None
    for name, corpus, tgt_lang in splits:
        tgt_lang = tgt_lang or cfg.tgt_lang
        scores = _evaluate(cfg, ckpts, translator, name, corpus, tgt_lang, where)
    return scores


def _evaluate(
    cfg: EvaluateRunConfig,
    ckpts: list,
    translator: Translator,
    name: str,
    corpus: Corpus,
    tgt_lang: str | None,
    where: Dist,
) -> Scores | None:
    ckpt, sources, references = ckpts[0], corpus.src, corpus.tgt
    translator.tags.ids(tgt_lang)  # a model that needs tgt_lang fails before any work

    # the systems to compare, checked before any decoding: a wrong file fails in a second
    for path in cfg.compare:
        if not Path(path).is_file():
            raise NMTError(f"compare: no such hypothesis file {path}")
    others = [(path, read_lines(Path(path))) for path in cfg.compare]
    for path, lines in others:
        if len(lines) != len(sources):
            raise NMTError(
                f"compare: {path} has {len(lines)} lines but {name} has {len(sources)} sentences"
            )

    out = _out_dir(cfg, ckpt.path)
    out.mkdir(parents=True, exist_ok=True)
    # heatmaps first, from their own small decode: a bad attention_layer fails in seconds, and the
    # full decode need not keep attention maps (greedy and beam output does not depend on the batch)
    shown = sources[: cfg.heatmaps] if where.main else []
    for k, result in enumerate(translator.translate_full(shown, tgt_lang=tgt_lang)):
        weights = result.attention(cfg.attention_layer, cfg.attention_head)
        if weights is None:
            continue
        pieces = (result.src_pieces, result.tgt_pieces)
        save_heatmap(*pieces, weights, out / f"{name}.attention.{k}.png", result.text)
        if cfg.heatmap_grid:
            save_heatmap_grid(*pieces, result.maps, out / f"{name}.heads.{k}.png", result.text)

    hypotheses = _translate(cfg, translator, out, name, sources, tgt_lang, where)
    if hypotheses is None:
        return None  # another process scores
    scores = score(hypotheses, references)
    comparison = None
    if others:
        comparison = compare([(f"{name}.hyp (this checkpoint)", hypotheses), *others], references)

    record = {
        "checkpoint": str(ckpt.path),
        "step": ckpt.payload["step"],
        "split": name,
        **({"tgt_lang": tgt_lang} if tgt_lang else {}),
        "sentences": len(sources),
        "decode": cfg.decode.describe(),
        **scores.to_dict(),
    }
    if len(ckpts) > 1:
        record["ensemble"] = {
            "checkpoints": [str(c.path) for c in ckpts],
            "steps": [c.payload["step"] for c in ckpts],
            "weights": cfg.ckpt_weights,
            "combine": cfg.ensemble_combine.value,
        }
    if comparison is not None:
        record["significance"] = comparison.to_dict()
    judged = None
    if cfg.confidence:
        judged = _confidence(cfg, ckpt, translator, sources, hypotheses, references, tgt_lang)
        record["confidence"] = judged
    (out / f"{name}.scores.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    step = ckpt.payload["step"]
    if len(ckpts) == 1:
        print(f"{name}: {len(sources)} sentences, checkpoint {ckpt.path} (step {step})")
    else:
        members = ", ".join(f"{c.path} (step {c.payload['step']})" for c in ckpts)
        mean = {"prob": "probabilities", "logprob": "log-probabilities"}[cfg.ensemble_combine.value]
        print(f"{name}: {len(sources)} sentences, an ensemble (mean of {mean}) of {members}")
    print(f"decoding: {cfg.decode.describe()}")
    print("\n".join(scores.lines))
    if comparison is not None:
        print("paired bootstrap resampling against this model's hypotheses (sacreBLEU):")
        print("\n".join(comparison.lines))
    if judged is not None:
        print(
            f"confidence (good: {judged['good']}, {judged['good_share']:.1%} of lines): Spearman "
            f"{judged['spearman']:.3f} with sentence chrF (TP {judged['spearman_tp']:.3f}), ECE "
            f"{judged['ece']:.3f}; pieces' ECE {judged['token_ece']:.3f} (uncalibrated "
            f"{judged['token_ece_t1']:.3f}); the 10% least confident "
            f"{judged['lowest_10pct_chrf_gap']:.1f} chrF below the rest; "
            f"{judged['flagged']} flagged"
        )
    print(f"hypotheses: {out / f'{name}.hyp'}", file=sys.stderr)
    return scores


def _confidence(cfg, ckpt, translator, sources, hypotheses, references, tgt_lang) -> dict:
    """confidence=true: the split's translations judged (`nmt.translation.confidence`), with the
    checkpoint's calibration, fitted first on the valid split when it has none."""
    calibration = Calibration.load(ckpt.path, search_kind(translator.decode))
    if calibration is None:
        valid = read_split(cfg.data or ckpt.config.data, Split.valid)
        log.info("fitting the confidence calibration on the valid split (%d sentences)",
                 len(valid.src))  # fmt: skip
        fitted = fit(translator, valid.src, valid.tgt, tgt_lang=tgt_lang)
        calibration = fitted.calibration
        calibration.save(ckpt.path)
        print(f"calibration: fitted on valid ({len(valid.src)} sentences, pieces' ECE "
              f"{fitted.report['token_ece_t1']:.3f} -> {fitted.report['token_ece']:.3f}), saved "
              f"as {ckpt.path / CALIBRATION_FILE}", file=sys.stderr)  # fmt: skip
    found = measure(translator, sources, hypotheses, calibration, tgt_lang)
    eces = token_eces(translator, sources, hypotheses, references, calibration, tgt_lang)
    return quality_report(found, hypotheses, references, eces)


def _translate(
    cfg: EvaluateRunConfig,
    translator: Translator,
    out: Path,
    name: str,
    sources: list[str],
    tgt_lang: str | None,
    where: Dist,
) -> list[str] | None:
    """The hypotheses of `sources`, written to OUT/NAME.hyp by a file job (`nmt.cli.file_job`:
    the sources are written to OUT/NAME.src, one a line, for it to read): resumable, split among
    torchrun's processes. Rank 0 returns them; the other processes None."""
    source, target = out / f"{name}.src", out / f"{name}.hyp"
    tmp = source.with_name(f".{source.name}.{os.getpid()}")
    tmp.write_text("".join(clean(s) + "\n" for s in sources), encoding="utf-8")
    os.replace(tmp, source)  # whole, whichever process writes it (they write the same)
    settings = {
        "models": model_digests(cfg.ckpts),
        "decode": flatten(translator.decode),
        "tgt_lang": tgt_lang,
        "ckpt_weights": cfg.ckpt_weights,
        "ensemble_combine": cfg.ensemble_combine.value,
        "text": {
            "split_sentences": cfg.split_sentences,
            "protect": list(cfg.protect),
            "protect_patterns": list(cfg.protect_patterns),
        },  # fmt: skip
    }
    job = FileJob(source, target, settings, cfg.chunk_lines, where, show_progress(cfg.progress))
    decode = translator.decode

    def translate(lines: list[str], first: int) -> list[str]:
        """A line of several sentences split and rejoined, protected spans kept
        (`nmt.documents.texts`); a line the search cannot translate is blank, and named."""
        request = Request(lines, decode, tgt_lang=tgt_lang, first_line=first)
        done = translate_texts(translator, request, cfg)
        return [r.text for r in done]

    job.run(translate)
    return read_lines(target) if where.main else None
