"""Scoring given translations: the log-probability the model gives each target piece of a
translation of a source, by teacher forcing (one `Seq2Seq.forward` per batch, no search).

The numbers are the search's own (`nmt.translation.search`): `torch.log_softmax(logits.float(), -1)`
under the same `decode.precision` autocast, a piece's log-probability before the search's hard
constraints (`decode.min_len_*`, `decode.no_repeat_ngram` block a piece with -inf, they never
change the others'), the EOS that ends the translation included. So the total of the search's own
output is the score the search reported for it (`Hypothesis.score`), and its length-normalised
score (`DecodeConfig.normalize`, the length counting the EOS) is what n-best lists are ranked by.
With `decode.shortlist` the softmax is taken over each sentence's shortlist as the search takes it
(`nmt.lexicon`), and a piece outside the list scores -inf: the model, so restricted, cannot
produce it. `decode.prefix` has no part in scoring (the whole translation is given). In fp32 the
totals agree to float32 rounding; under bf16 only to bf16's (8 bits of mantissa): teacher forcing
multiplies other shapes than a step does, and bf16 products round differently with the shape.
In int8 (a Transformer's: its teacher forcing runs the int8 step's products, each input row
quantized by its own magnitude) they agree but where a last bit of fp32 upstream moves a
rounding to int8.

Sentences are batched as the search batches them (`nmt.translation.inputs.length_batches`), sorted
by target length, then source length: the decoder is where the time goes (a Bahdanau decoder steps
through every padded target position), as in training's batches (`nmt.data.batches.token_batches`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from nmt.config import DecodeConfig, Precision
from nmt.data.batches import Batch, collate
from nmt.device import autocast
from nmt.errors import NMTError
from nmt.lexicon import NO_LEXICON, Lexicon
from nmt.models.int8 import int8_copy, reads_fp32
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import EOS, UNK, Vocab, Vocabs, clean
from nmt.translation.inputs import length_batches, read_sources

log = logging.getLogger(__name__)

NEG_INF = float("-inf")


@dataclass
class Scored:
    """What the model thinks of one translation of one source (`Translator.score`)."""

    source: str
    translation: str  # as scored: whitespace runs collapsed (`nmt.tokenizer.clean`)
    score: float  # total log-probability, the final EOS included (-inf: outside the shortlist)
    normalized: float  # `score` with decode's length penalty, the length counting the EOS
    pieces: list[str]  # the translation's target pieces, EOS ("</s>") last
    piece_scores: list[float]  # the log-probability of each of `pieces`


@dataclass
class Pairs:
    """Sources and their given translations in ids, as `score_ids` takes them."""

    sources: list[str]
    texts: list[str]  # the translations as scored: cleaned
    src: list[list[int]]  # each ending in EOS, the target tag first; [EOS] for a blank source
    tgt: list[list[int]]  # without BOS and EOS
    # the target ids every translation starts with, not scored: a target language's code
    # (`TargetTags.forced`); `statistics` puts them before each target and drops their rows
    code: list[int] = field(default_factory=list)

    def statistics(self, model: Seq2Seq, cfg: DecodeConfig, device: torch.device,
                   temperatures: tuple[float, ...] = (1.0,), lexicon: Lexicon | None = None,
                   entropy: bool = True) -> list[Tensor]:  # fmt: skip
        """`piece_statistics` of these pairs, the rows of `code` left out."""
        code = self.code
        tgt = [code + ids for ids in self.tgt] if code else self.tgt
        stats = piece_statistics(model, self.src, tgt, cfg, device, temperatures, lexicon, entropy)
        return [rows[len(code) :] for rows in stats] if code else stats

    def scored(self, logprobs: list[list[float]], cfg: DecodeConfig, vocab: Vocab) -> list[Scored]:
        """Each pair's `Scored` from its pieces' log-probabilities (`score_ids`)."""
        return [
            Scored(
                source=source,
                translation=text,
                score=math.fsum(values),
                # the search counts a forced code in the length, as generate does
                normalized=cfg.normalize(math.fsum(values), len(values) + len(self.code)),
                pieces=vocab.id_to_piece(ids + [EOS]),
                piece_scores=values,
            )
            for source, text, ids, values in zip(self.sources, self.texts, self.tgt, logprobs)
        ]


def read_pairs(
    vocabs: Vocabs,
    tag: list[int],
    sources: list[str],
    translations: list[str],
    cap: int,
    first_line: int = 1,
    code: Sequence[int] = (),
) -> Pairs:
    """The pairs in ids: sources read as every translator reads them (`read_sources`, cut to
    `cap` pieces, `tag` put before each, a blank one the empty sentence), translations cleaned
    and tokenized with the target vocabulary (pieces it lacks are <unk>, a warning names the
    line); `code` (`TargetTags.forced`) starts each translation, unscored."""
    if len(sources) != len(translations):
        raise NMTError(f"{len(sources)} sources but {len(translations)} translations")
    read = read_sources(vocabs.src, sources, cap and max(cap - len(tag), 1), first_line)
    src_ids = read.place([tag + ids for ids in read.ids], lambda i: [EOS])
    texts = [clean(t) for t in translations]
    tgt_ids = vocabs.tgt.encode(texts) if any(texts) else [[] for _ in texts]
    for i, ids in enumerate(tgt_ids):
        if UNK in ids:
            log.warning(
                "line %d: the translation has characters the target vocabulary lacks; "
                "they are scored as <unk>", first_line + i,
            )  # fmt: skip
    return Pairs(list(sources), texts, src_ids, tgt_ids, list(code))


def score_ids(
    model: Seq2Seq,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    lexicon: Lexicon | None = None,
) -> list[list[float]]:
    """The log-probability of each piece of each target (ids without BOS and EOS), then of the
    EOS after it, given its source (ids ending in EOS): len(tgt_ids[i]) + 1 numbers for pair i,
    in input order. `lexicon` gives the shortlists of `cfg.shortlist`."""
    stats = piece_statistics(model, src_ids, tgt_ids, cfg, device, (1.0,), lexicon, False)
    return [row[:, 0].tolist() for row in stats]


def piece_statistics(
    model: Seq2Seq,
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    cfg: DecodeConfig,
    device: torch.device,
    temperatures: tuple[float, ...],
    lexicon: Lexicon | None = None,
    entropy: bool = True,
) -> list[Tensor]:
    """Per pair (as `score_ids`), a (len(tgt_ids[i]) + 1, K + 1) tensor: each piece's
    log-probability with the logits divided by each of the K `temperatures`, then (`entropy`)
    the entropy in nats of the step's distribution at the first of them: what confidence is read
    from (`nmt.translation.confidence`), in one pass whatever K."""
    if len(src_ids) != len(tgt_ids):
        raise NMTError(f"{len(src_ids)} sources but {len(tgt_ids)} translations")
    if cfg.shortlist and lexicon is None:
        raise NMTError(NO_LEXICON)
    if cfg.precision == Precision.int8:
        if reads_fp32(model):
            # an int8 step writes its recurrent gates out, teacher forcing runs the fp32 cell:
            # the two would not give the same numbers, and a score is the search's or nothing
            raise NMTError(
                "decode.precision=int8 scores a Transformer only: a recurrent model's scores "
                "are computed in fp32 or bf16 (decode.precision=fp32)"
            )
        # a Transformer's teacher forcing runs the products of its int8 step
        model = int8_copy(model)
    out: list[Tensor] = [torch.empty(0) for _ in src_ids]
    longest = max((len(s) for s in src_ids), default=0) + 1
    sizes = [(len(t) + 1) * longest + len(s) for s, t in zip(src_ids, tgt_ids)]  # tgt, then src
    with torch.inference_mode(), autocast(device, cfg.precision):
        for index in length_batches(sizes, cfg.batch_size):
            batch = collate(index, src_ids, tgt_ids).to(device)
            lengths = [len(tgt_ids[i]) + 1 for i in index]  # the pieces and EOS
            stats = _target_log_probs(model, batch, lengths, cfg, lexicon, temperatures, entropy)
            for i, rows in zip(index, stats.cpu().split(lengths)):
                out[i] = rows
    return out


def _target_log_probs(
    model: Seq2Seq,
    batch: Batch,
    lengths: list[int],
    cfg: DecodeConfig,
    lexicon: Lexicon | None,
    temperatures: tuple[float, ...] = (1.0,),
    with_entropy: bool = False,
) -> Tensor:
    """batch.src (B, S), tgt_in (B, T) BOS + target, tgt_out (B, T) target + EOS, padded after
    each row's `lengths` -> (N, K), or (N, K + 1) `with_entropy`: the log-probabilities of the N
    real positions of tgt_out, row after row, at each of the K temperatures, and the entropy at
    the first. Real positions are told by length, not by id: a search may produce PAD itself."""
    src, tgt_out = batch.src, batch.tgt_out
    logits, _ = model(src, batch.src_lens, batch.tgt_in)  # (B, T, V)
    steps = torch.arange(tgt_out.size(1), device=tgt_out.device)
    real = steps < torch.tensor(lengths, device=tgt_out.device).unsqueeze(1)  # (B, T)
    target = tgt_out
    listed = None
    if cfg.shortlist:
        assert lexicon is not None
        shortlist = lexicon.shortlist(src, cfg.shortlist, cfg.shortlist_frequent)
        ids = shortlist.ids  # (C,) ascending
        # each sentence's softmax runs over the pieces it allows, as in the search's step
        logits = logits[..., ids].masked_fill(~shortlist.allowed.unsqueeze(1), NEG_INF)
        target = torch.searchsorted(ids, tgt_out).clamp(max=ids.numel() - 1)  # (B, T) columns
        listed = ids[target] == tgt_out  # a piece outside the batch's shortlist has no column
    # only the real positions: padding costs the output layer, never the softmax
    real_logits = logits[real].float()  # (N, V or C)
    index = target[real].unsqueeze(1)  # (N, 1)
    columns, entropy = [], None
    for temperature in temperatures:
        # T = 1 is the search's own softmax, untouched (a division by 1.0 would be the same)
        scaled = real_logits if temperature == 1.0 else real_logits / temperature
        log_probs = torch.log_softmax(scaled, dim=-1)  # as the search
        columns.append(log_probs.gather(1, index).squeeze(1))  # (N,)
        if with_entropy and entropy is None:
            entropy = torch.special.entr(log_probs.exp()).sum(-1)  # -p log p, 0 where p is 0
    chosen = torch.stack(columns, 1)  # (N, K)
    if listed is not None:
        chosen = chosen.masked_fill(~listed[real].unsqueeze(1), NEG_INF)
    return chosen if entropy is None else torch.cat([chosen, entropy.unsqueeze(1)], 1)
