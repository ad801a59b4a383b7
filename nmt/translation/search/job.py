"""What one search decodes: its sources in ids and what is asked of their translations, the
search's whole input besides the model (`nmt.translation.request` makes one from a request)."""

from __future__ import annotations

from dataclasses import dataclass, field

from nmt.config import DecodeConfig


@dataclass
class SearchJob:
    """What one search decodes, in ids: the search's whole input besides the model.

    `decode` gives the settings (strategy, beam, penalties, limits, batch size, precision); its
    text content (prefix, banned, constraints) is not read here: `nmt.translation.request` turns
    that into the ids below."""

    sources: list[list[int]]  # each ending in EOS
    decode: DecodeConfig
    # per source, target ids forced at the start of its translations ([] for none; no EOS)
    prefixes: list[list[int]] | None = None
    # target id sequences (none empty) that no translation contains (`Banned`)
    banned: list[list[int]] = field(default_factory=list)
    # per source, target id sequences every translation of it contains ([] for none; beam
    # search only: `nmt.translation.search.constraints`)
    constraints: list[list[list[int]]] | None = None
    attention: bool = False  # keep the attention maps of each hypothesis
    trees: bool = False  # record each sentence's search tree (`nmt.translation.search.tree`)
    # the first pieces of every prefix that score 0 instead of the model's log-probability: a
    # target language's code, which Hugging Face's forced_bos_token_id scores 0 (a model with
    # language codes puts it in every text's prefix, so the count is the job's)
    free_prefix: int = 0
    # record, for every piece of every hypothesis, its log-probability with the logits divided
    # by this temperature (what confidence is read from: `nmt.translation.confidence`); None:
    # not recorded
    statistics: float | None = None
