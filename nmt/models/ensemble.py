"""An ensemble of trained models decoded as one: a `Seq2Seq` whose steps combine its members'.

    model, ckpts = load_ensemble(["runs/a/checkpoints/best", "runs/b/checkpoints/best"], device)
    translator = Translator(model, ckpts[0].vocabs, device, ckpts[0].lexicon)

The search never asks whether it runs one model or several (`nmt.translation.search`): the ensemble
offers the step interface of `nmt.models.seq2seq` over its K members. `encode` runs every member's
encoder on the same source ids, `init_state` builds one state per member (a KV cache, a recurrent
state), and the composite state's `reorder` reorders each of them with the beam. So greedy, beam,
sampling, forced prefixes, shortlists, n-best lists and search trees work on it unchanged, and
recurrent and Transformer members may be mixed. Memory and time grow linearly with K; a step
reads nothing back to the host (the weights are Python floats, every member's None-ness of
attention is known without looking at a tensor).

Combining the next-piece distributions p_k with weights w_k (normalised to sum to 1):

- `prob` (the default): the mixture sum_k w_k p_k, returned as its log (logsumexp of each
  member's log_softmax plus log w_k), a distribution already. Averaging probabilities is the
  standard (fairseq's ensemble: logsumexp(log_probs) - log K) and the robust choice: one member
  that wrongly gives a piece almost no probability lowers it by at most its weight, where under a
  log-linear mean that member alone can veto it.
- `logprob`: the normalised geometric mean, softmax(sum_k w_k log p_k); sharper, it favours
  pieces every member agrees on. sum_k w_k log p_k is sum_k w_k logits_k less a constant of the
  row (each member's normaliser), so the step returns the weighted sum of the members' logits
  and the log_softmax every caller applies (the search, scoring) normalises it: no member's
  softmax is computed.

Both are returned as logits, in float32 whatever the autocast, as the search computes a single
model's log-probabilities. `forward` (teacher forcing) returns the same combination, so scoring a
given translation through an ensemble (`nmt.translation.scoring`) gives the numbers its search
reported.

A shortlist restricts the ensemble's distribution as it restricts one model's: the search
renormalises what the step returns over each sentence's allowed pieces. Under `logprob` every
member computes its shortlist's rows alone (`output_rows`): each member's normaliser is a
constant of the row and cancels in that renormalisation. Under `prob` the mixture needs each
member's normaliser over the whole vocabulary (one over the shortlist alone would depend on the
batch's union of lists, so a sentence's output would depend on its batch): the members run their
full output layers and the shortlist's columns are kept after mixing. The search is restricted
the same, but the output layer costs what it costs without a shortlist.

Attention (what the REPL, the page and the heatmaps show): `"mean"` (the default) averages, with
the ensemble's weights, each member's maps reduced to the mean over its layers and heads, giving
(R, 1, 1, S): members differ in layers and heads, and the heads of separately trained models do
not correspond; a member index shows that member's maps as they are (a recurrent member's
attention is usually the crisper alignment).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import torch
from torch import Tensor, nn

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.models.seq2seq import DecoderState, EncoderOutput, OutputRows, Seq2Seq
from nmt.tokenizer import Vocab

COMBINES = ("prob", "logprob")


@dataclass
class EnsembleEncoded:
    """Each member's encoder output for the same source, in member order."""

    members: list[EncoderOutput]


@dataclass
class EnsembleState:
    """Each member's decoder state; rows and sentences are the same in all of them."""

    members: list[DecoderState]

    def reorder(self, rows: Tensor, sentences: Tensor | None = None) -> EnsembleState:
        return EnsembleState([state.reorder(rows, sentences) for state in self.members])


@dataclass
class EnsembleRows:
    """A shortlist's output rows for an ensemble: ids (C,) the target ids; members: each member's
    rows of them (`logprob`), or None where the members run their full layers (`prob`)."""

    ids: Tensor
    members: list[OutputRows] | None


def _value(choice: object) -> object:
    """A str Enum's value (a config's choice), anything else as it is."""
    return choice.value if isinstance(choice, Enum) else choice


def check_options(
    count: int, weights: Sequence[float] | None, combine: object, attention: object
) -> tuple[list[float], str, str | int]:
    """Raise NMTError unless these are an ensemble of `count` members' settings; the weights
    normalised to sum to 1 (Python floats: a step adds them without a device or a host sync),
    `combine` and `attention` as plain values."""
    if count < 1:
        raise NMTError("an ensemble needs at least one model: ckpt=[a,b,...]")
    weights = [1.0] * count if weights is None else [float(w) for w in weights]
    if len(weights) != count:
        raise NMTError(f"ckpt_weights has {len(weights)} weights for {count} checkpoints")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise NMTError(f"ckpt_weights={weights}: every weight must be a positive number")
    combine, attention = _value(combine), _value(attention)
    if combine not in COMBINES:
        raise NMTError(f"ensemble combine={combine!r}: expected one of {', '.join(COMBINES)}")
    index = isinstance(attention, int) and not isinstance(attention, bool)
    if attention != "mean" and not (index and -count <= attention < count):
        raise NMTError(
            f"ensemble attention={attention!r}: expected mean or a member's index, 0..{count - 1}"
        )
    total = sum(weights)
    return [w / total for w in weights], combine, attention


class Ensemble(Seq2Seq):
    def __init__(
        self,
        members: Sequence[Seq2Seq],
        weights: Sequence[float] | None = None,
        combine: str = "prob",
        attention: str | int = "mean",
    ) -> None:
        """`weights` (default equal) need not sum to 1; `combine`: "prob" or "logprob";
        `attention`: "mean" or the index of the member whose maps are shown."""
        # no encoder or decoder of its own: nn.Module's init, not Seq2Seq's
        nn.Module.__init__(self)
        self.weights, self.combine, self.attention = check_options(
            len(members), weights, combine, attention
        )
        self.log_weights = [math.log(w) for w in self.weights]
        self.members = nn.ModuleList(members)

    def encode(self, src: Tensor, src_lens: Tensor) -> EnsembleEncoded:
        """src (B, S), src_lens (B,) -> every member's encoder output."""
        return EnsembleEncoded([member.encode(src, src_lens) for member in self.members])

    def init_state(
        self, encoded: EnsembleEncoded, steps: int | None = None, compiled: bool = False
    ) -> EnsembleState:
        return EnsembleState(
            [m.init_state(e, steps, compiled) for m, e in zip(self.members, encoded.members)]
        )

    def output_rows(self, ids: Tensor) -> EnsembleRows:
        """ids (C,): each member's rows under `logprob`; under `prob` the full layers (see the
        module's notes)."""
        if self.combine == "logprob":
            return EnsembleRows(ids, [member.output_rows(ids) for member in self.members])
        return EnsembleRows(ids, None)

    def decode_step(
        self, prev: Tensor, state: EnsembleState, output: EnsembleRows | None = None
    ) -> tuple[Tensor, Tensor | None, EnsembleState]:
        """prev (R,) -> the combination as logits (R, V) (or (R, C) over `output`'s ids; under
        prob the log-probabilities themselves), attention (R, L, h, S) or None, the new state."""
        mixed, maps, states = None, [], []
        for k, (member, member_state) in enumerate(zip(self.members, state.members)):
            rows = None if output is None or output.members is None else output.members[k]
            logits, attention, new = member.decode_step(prev, member_state, rows)
            # prob over a shortlist: each member normalised over V, then the list's columns
            columns = output.ids if output is not None and rows is None else None
            mixed = self._add(mixed, logits, k, columns)
            maps.append(attention)
            states.append(new)
        return self._finish(mixed), self._maps(maps, (1, 2)), EnsembleState(states)

    def forward(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: tgt_in (B, T) -> the combination as logits (B, T, V), as the step's,
        attention (B, T, L, h, S) or None (under "mean": None unless every member gives maps,
        as a Transformer's teacher forcing does not)."""
        mixed, maps = None, []
        for k, member in enumerate(self.members):
            logits, attention = member(src, src_lens, tgt_in)
            mixed = self._add(mixed, logits, k)
            maps.append(attention)
        if self.attention == "mean" and any(m is None for m in maps):
            return self._finish(mixed), None
        return self._finish(mixed), self._maps(maps, (2, 3))

    def _add(
        self, mixed: Tensor | None, logits: Tensor, k: int, columns: Tensor | None = None
    ) -> Tensor:
        """The combination so far (None before the first member) with member k's `logits`
        (.., V) added, in float32: one running tensor, not K of them. `columns` (C,): keep those
        of the member's log-probabilities (normalised over all V) alone. Up to `_finish`."""
        scores = logits.float()  # fp32 whatever the autocast
        if self.combine == "logprob":
            # sum_k w_k logits_k: each member's normaliser only adds a constant to the row, which
            # the caller's log_softmax removes
            w = self.weights[k]
            return scores * w if mixed is None else mixed.add(scores, alpha=w)
        scores = torch.log_softmax(scores, dim=-1)
        if columns is not None:
            scores = scores.index_select(-1, columns)
        if mixed is None:  # the weights relative to member 0's: with equal ones, no additions
            return scores
        shift = self.log_weights[k] - self.log_weights[0]
        return torch.logaddexp(mixed, scores + shift if shift else scores)

    def _finish(self, mixed: Tensor) -> Tensor:
        """prob: log(w_0) brings the running logaddexp to log sum_k w_k p_k, normalised."""
        return mixed + self.log_weights[0] if self.combine == "prob" else mixed

    def _maps(self, maps: list[Tensor | None], reduce: tuple[int, int]) -> Tensor | None:
        """The chosen member's maps, or the weighted mean of the members' (layers and heads,
        dims `reduce`, averaged first); None when no member gives maps."""
        if self.attention != "mean":
            return maps[self.attention]
        given = [(m, w) for m, w in zip(maps, self.weights) if m is not None]
        if not given:
            return None
        total = sum(w for _, w in given)
        mean = None
        for m, w in given:
            term = m.float().mean(dim=reduce, keepdim=True) * (w / total)
            mean = term if mean is None else mean + term
        return mean


def _first_difference(a: Vocab, b: Vocab, side: str) -> str | None:
    """How vocabulary `b` differs from `a` (a phrase after a checkpoint's name), None if not."""
    if len(a) != len(b):
        return f"has a {side} vocabulary of {len(b):,} pieces, {{first}} of {len(a):,}"
    ids = list(range(len(a)))
    for i, (x, y) in enumerate(zip(a.id_to_piece(ids), b.id_to_piece(ids))):
        if x != y:
            return f"has {side} piece {y!r} at id {i}, {{first}} {x!r}"
    if a.digest() != b.digest():
        return (
            f"has the same {side} pieces but another sentencepiece model (digest "
            f"{b.digest()[:12]}, {{first}} {a.digest()[:12]}): it would split text differently"
        )
    return None


def check_members(checkpoints: Sequence[Checkpoint]) -> None:
    """Raise NMTError unless every checkpoint has the first one's tokenizers and vocabularies,
    target and source (the members read the same source ids and score the same target ids);
    the message names the first difference."""
    if not checkpoints:
        raise NMTError("an ensemble needs at least one checkpoint: ckpt=[a,b,...]")
    first = checkpoints[0]
    for i, other in enumerate(checkpoints[1:], 1):
        for side, name in (("tgt", "target"), ("src", "source")):
            ours, theirs = getattr(first.vocabs, side), getattr(other.vocabs, side)
            problem = _first_difference(ours, theirs, name)
            if problem is not None:
                raise NMTError(
                    f"ckpt[{i}] ({other.path}) "
                    + problem.format(first=f"ckpt[0] ({first.path})")
                    + "; an ensemble's members must share their tokenizer: train them on the "
                    "same data with the same data.tokenizer settings"
                )


def load_ensemble(
    ckpts: Sequence[str | Path | Checkpoint],
    device: torch.device,
    weights: Sequence[float] | None = None,
    combine: str = "prob",
    attention: str | int = "mean",
) -> tuple[Ensemble, list[Checkpoint]]:
    """The ensemble of these checkpoints on `device`, and the checkpoints (the first one's
    vocabularies, lexicon and decode settings serve the ensemble). The members' tokenizers are
    checked, and the weights and choices, before any model is built."""
    loaded = [c if isinstance(c, Checkpoint) else load_checkpoint(c) for c in ckpts]
    check_members(loaded)
    check_options(len(loaded), weights, combine, attention)
    # a checkpoint loaded here is the member's alone: it takes its tensors (`restore_model`)
    members = [restore_model(c, device, not isinstance(given, Checkpoint))
               for c, given in zip(loaded, ckpts)]  # fmt: skip
    return Ensemble(members, weights, combine, attention).to(device).eval(), loaded
