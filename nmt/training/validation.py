"""What a run measures on its validation split between updates: the loss and perplexity under
teacher forcing, BLEU of the run's `decode` settings (greedy by default, `decode=beam` for beam
search; `decode.prefix` forced on every sentence, as nmt-evaluate forces it), and with
`train.valid_heatmaps` the attention of a few sentences as pictures.

Validation runs on rank 0 only; the trainer shares the metrics with the other ranks.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nmt.checkpoint import step_name
from nmt.config import DecodeConfig
from nmt.data.batches import collate, token_batches
from nmt.data.splits import Encoded
from nmt.device import autocast
from nmt.lexicon import Lexicon
from nmt.metrics import bleu, perplexity
from nmt.models.seq2seq import Seq2Seq
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import EOS, Vocab, Vocabs, clean
from nmt.training.loss import batch_loss
from nmt.translation.attention_map import save_heatmap, select_map
from nmt.translation.inputs import Sources, prefix_ids
from nmt.translation.search import decode_all


@torch.inference_mode()
def validate(
    model: Seq2Seq,
    data: Encoded,
    references: list[str],
    vocabs: Vocabs,
    cfg: TrainRunConfig,
    device: torch.device,
    lexicon: Lexicon | None = None,
    directions: dict[str, range] | None = None,
) -> dict:
    """{"loss", "ppl"} per target token, and "bleu" with `train.valid_bleu` (against the raw
    `references`, detokenized as nmt-evaluate scores; `lexicon` serves `decode.shortlist`).
    With several `directions` (a model of several corpora: direction -> its rows), also
    "bleu_<direction>" for each, from the same hypotheses. The first `data.forced` pieces of each
    target (a model's language code) are forced and scored 0, as translation forces them.
    Leaves the model in training mode."""
    # decode.prefix checked first: a prefix it cannot force fails before any work
    prefixes = (
        validation_prefixes(data.src, vocabs.tgt, cfg.decode) if cfg.train.valid_bleu else None
    )
    forced = data.forced
    if forced and cfg.train.valid_bleu:
        prefixes = [t[:forced] + (prefixes[i] if prefixes else []) for i, t in enumerate(data.tgt)]
    model.eval()
    nll, tokens = torch.zeros((), device=device), 0  # summed on the device, read once
    lens_src, lens_tgt = [len(s) for s in data.src], [len(t) for t in data.tgt]
    for index in token_batches(lens_src, lens_tgt, cfg.train.batch_tokens):
        batch = collate(index, data.src, data.tgt).to(device)
        with autocast(device, cfg.train.precision):
            _, batch_nll = batch_loss(model, batch, 0.0)
        nll += batch_nll
        tokens += batch.n_tgt_tokens
    nll = nll.item()
    result = {"loss": nll / tokens, "ppl": perplexity(nll / tokens)}
    if cfg.train.valid_bleu:
        # the search runs as nmt-evaluate runs it (in decode.precision), so the BLEU logged here
        # is the one nmt-evaluate gives the checkpoint
        hyps = decode_all(
            model, data.src, cfg.decode, device, lexicon=lexicon, prefixes=prefixes,
            free_prefix=forced,
        )  # fmt: skip
        # a sentence the step rules left without a hypothesis scores as an empty translation
        texts = vocabs.tgt.decode([h[0].tokens if h else [] for h in hyps])
        result["bleu"] = bleu(texts, references)
        if directions and len(directions) > 1:  # each alone, from the same hypotheses
            for name, rows in directions.items():
                part = slice(rows.start, rows.stop)
                result[f"bleu_{name}"] = bleu(texts[part], references[part])
    model.train()
    return result


def validation_prefixes(
    src: list[list[int]], vocab: Vocab, decode: DecodeConfig
) -> list[list[int]] | None:
    """The target ids of `decode.prefix` for each validation source (ids ending in EOS), or None
    without one: the prefix nmt-evaluate's `Translator` forces on every text, tokenized and
    checked by the same `prefix_ids`. A prefix the target vocabulary cannot write, or one too
    long for a source's length limit, is an NMTError naming the validation line; a run can call
    this before its first update to fail before any work."""
    if not clean(decode.prefix):
        return None
    sources = Sources(src, list(range(len(src))), len(src))
    return prefix_ids(vocab, [decode.prefix] * len(src), sources, decode, 1, "validation line")


def save_alignments(
    model: Seq2Seq, src: list[list[int]], vocabs: Vocabs, device: torch.device, out: Path, step: int
) -> None:
    """The greedy attention of each source in `src`, one PNG each (out/step-N.k.png), to watch
    alignment emerge over a run. Nothing for a model without attention (model.attention=none)."""
    model.eval()
    with torch.inference_mode():
        nbests = decode_all(model, src, DecodeConfig(), device, attention=True)
    model.train()
    for k, (ids, nbest) in enumerate(zip(src, nbests)):
        if not nbest:
            continue
        best = nbest[0]
        if best.attention is None:
            return
        save_heatmap(
            vocabs.src.id_to_piece(ids),
            vocabs.tgt.id_to_piece(best.tokens + [EOS] * best.ended),
            select_map(best.attention, -1, None),  # the top layer, heads averaged
            out / f"{step_name(step)}.{k}.png",
            f"step {step}: {vocabs.tgt.decode([best.tokens])[0]}",
        )
