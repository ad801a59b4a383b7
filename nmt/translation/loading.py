"""What a `Translator` is built from, read from its checkpoints: the model (held as int8 weights
alone where the settings ask for it), the vocabularies and lexicon, the languages it translates
into and reads, and what the checkpoint knows of the text it reads (`TextFacts`).

    parts = load_parts(["runs/NAME/checkpoints/best"], decode=None, device="cpu")
    translator = Translator.from_parts(parts)      # what Translator.from_checkpoint does

Everything is read here, once, before the translator exists: nothing is set on a translator
after it is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.config import CodeStyle, DecodeConfig, Precision
from nmt.data.starts import SentenceEdges, read_edges, read_starts
from nmt.device import resolve_device
from nmt.lexicon import Lexicon
from nmt.models import restore_model
from nmt.models.ensemble import check_options, load_ensemble
from nmt.models.int8 import quantize
from nmt.models.seq2seq import Seq2Seq
from nmt.tokenizer import Vocabs


@dataclass(frozen=True)
class TextFacts:
    """What a checkpoint knows of the text it reads, beyond its vocabularies: what documents
    (`nmt.documents`) need to split a text into sentences, check them and align words.

    - `language`: the language of the sources (data.src_lang, or the one asked for at load), for
      the splitter's rules;
    - `starts`: words that start the training sentences and almost never occur inside them
      (`nmt.data.starts`), where a sentence without final punctuation ended;
    - `edges`: how often words start and end them, for cutting a sentence the model skipped part
      of (`nmt.documents.recovery`); empty for an import or a checkpoint from before them;
    - `taught`: (layer, head) of the cross-attention trained to align (train.guided_alignment),
      where word alignments are read; None for attention not trained so, and for an ensemble;
    - `code_style`: where a model with language codes reads them (data.code_style).
    """

    language: str | None = None
    starts: frozenset[str] = frozenset()
    edges: SentenceEdges = field(default_factory=SentenceEdges)
    taught: tuple[int, int] | None = None
    code_style: CodeStyle = CodeStyle.source_and_target

    @classmethod
    def read(cls, ckpt: Checkpoint, language: str | None = None) -> TextFacts:
        """The facts kept in a checkpoint's directory and config; `language` (None: its
        data.src_lang) is the language its sources are in."""
        guided = ckpt.config.train.guided_alignment
        return cls(
            language or ckpt.config.data.src_lang,
            read_starts(ckpt.path),
            read_edges(ckpt.path),
            (guided.layer, guided.head) if guided.weight else None,
            ckpt.config.data.code_style,
        )


@dataclass
class Parts:
    """The arguments of `Translator`: a model with its vocabularies on a device, the lexicon
    (for decode.shortlist), the default decode settings, the target languages (`tags`:
    `DataConfig.target_tags`) and language codes (`codes`: `DataConfig.language_codes`), and
    the text facts."""

    model: Seq2Seq
    vocabs: Vocabs
    device: torch.device
    lexicon: Lexicon | None = None
    decode: DecodeConfig | None = None
    tags: dict[str, str | None] | None = None
    codes: dict[str, str] | None = None
    facts: TextFacts = field(default_factory=TextFacts)


@dataclass(frozen=True)
class Ensembling:
    """How several checkpoints are decoded as one model (`nmt.models.ensemble`): each member's
    weight (None: equal), how their predictions combine, whose attention the answers carry."""

    weights: Sequence[float] | None = None
    combine: str = "prob"
    attention: str | int = "mean"


def load_parts(
    ckpts: Sequence[str | Path | Checkpoint],
    decode: DecodeConfig | None = None,
    device: str = "auto",
    ensembling: Ensembling = Ensembling(),
    src_lang: str | None = None,
) -> Parts:
    """A translator's parts from one checkpoint, or several decoded as one model (an
    ensemble: its members share their tokenizers; the first one's vocabularies, lexicon, text
    facts and, with `decode=None`, decode settings serve it). `decode=None` makes the default
    what the run validated with; `src_lang` is the language of the sources where the model reads
    a code for it (an NLLB import); None: the checkpoint's data.src_lang.

    A single checkpoint read here (a directory) with a default of decode.precision=int8 is held
    as int8 weights instead of fp32 ones on a CPU (`nmt.models.int8.quantize`), as CTranslate2
    holds a model in the compute type it was loaded with: such a translator decodes and scores
    in int8 alone. A Checkpoint object passed in keeps its fp32 weights (its caller may use
    them), with an int8 copy beside them made at the first int8 call."""
    check_options(len(ckpts), ensembling.weights, ensembling.combine, ensembling.attention)
    dev = resolve_device(device)
    if len(ckpts) > 1:
        model, loaded = load_ensemble(
            ckpts, dev, ensembling.weights, ensembling.combine, ensembling.attention
        )
        first = loaded[0]
        # the members' attention is averaged or one member's: no taught head to read
        facts = replace(TextFacts.read(first, src_lang), taught=None)
    else:
        take = not isinstance(ckpts[0], Checkpoint)  # loaded here for this model alone
        # int8 alone: the file mapped, each weight read once to quantize it (nmt.models.int8)
        int8_alone = take and (decode or DecodeConfig()).precision == Precision.int8
        int8_alone = int8_alone and dev.type == "cpu"
        first = load_checkpoint(ckpts[0], mmap=int8_alone) if take else ckpts[0]
        model = restore_model(first, dev, take)
        settings = decode or first.config.decode
        if take and settings.precision == Precision.int8 and dev.type == "cpu":
            model = quantize(model, keep_fp32=False)  # no one else holds this model
        facts = TextFacts.read(first, src_lang)
    data = first.config.data
    return Parts(
        model, first.vocabs, dev, first.lexicon, decode or first.config.decode,
        data.target_tags(), data.language_codes, facts,
    )  # fmt: skip
