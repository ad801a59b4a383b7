"""The search tree: every hypothesis a search kept, step by step, as Seq2Seq-Vis draws it.

A search that is given a `TreeRecorder` tells it, at each step, which hypotheses it extended
(the parent row, the new token, the cumulative score) and which it set aside as finished. The
recorder keeps those as device tensors, one small append per step and no host copy, and builds
one `BeamTree` per sentence at the end. Without a recorder the search does none of this.

Node states: "root" (the empty hypothesis), "kept" (extended at a later step), "finished" (a
complete hypothesis: it ended with EOS, or at the length limit), "pruned" (kept at its step but
never extended and never finished). Hypotheses that could not be reached (score -inf, the rows
a beam carries while a forced prefix allows one path) are left out.

With positive constraints (`nmt.translation.search.constraints`), each node also has `met`: the
constraint pieces its hypothesis holds (its bank: the pieces of its met phrases and of its most
advanced unmet one), out of the tree's `constraint_pieces`; a finished node has them all. Without
constraints both are None, and a tree is what it was before they existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.tokenizer import BOS


@dataclass
class Node:
    token: int  # target id (BOS for the root)
    parent: int  # index of the parent node in the tree, -1 for the root
    step: int  # tokens from the root: 0 for the root
    score: float  # cumulative log-probability of the hypothesis ending here
    state: str  # root, kept, finished or pruned
    rank: int | None = None  # place in the n-best list, for the finished hypotheses returned
    piece: str = ""  # the token's piece, filled in by the Translator
    text: str = ""  # the detokenized hypothesis up to this node, EOS excluded (Translator)
    met: int | None = None  # constraint pieces held (None: no constraints)


@dataclass
class BeamTree:
    nodes: list[Node]  # parents before children (in the order the search made them)
    constraint_pieces: int | None = None  # the pieces of all its constraints (None: none)


class TreeRecorder:
    """Collects the hypotheses of one batch. Node ids are global to the batch; the root of
    sentence i is node i. `rows` (R,) maps each live row of the search to its current node."""

    def __init__(
        self, row_sentence: Tensor, sentences: int, constraint_pieces: list[int] | None = None
    ) -> None:
        """row_sentence (R,): the sentence of each initial row (beam and greedy: one row each;
        sampling: n rows each, all starting from that sentence's root). constraint_pieces: each
        sentence's (with positive constraints: every node then records its `met`)."""
        device = row_sentence.device
        self.rows = row_sentence.clone()
        self.count = sentences
        roots = torch.arange(sentences, device=device)
        self._sentence = [roots]
        self._parent = [torch.full_like(roots, -1)]
        self._token = [torch.full_like(roots, BOS)]
        self._step = [torch.zeros_like(roots)]
        self._score = [torch.zeros(sentences, device=device)]
        self._row_sentence = row_sentence.clone()
        self._finished: list[Tensor] = []
        self.constraint_pieces = constraint_pieces
        self._met = None if constraint_pieces is None else [torch.zeros_like(roots)]

    def _add(
        self, parent_rows: Tensor, tokens: Tensor, scores: Tensor, step: int, met: Tensor | None
    ) -> Tensor:
        """New nodes extending rows `parent_rows` (F,) by `tokens` (F,); returns their ids. met
        (F,): their constraint pieces, given exactly when the recorder was made with them."""
        ids = torch.arange(self.count, self.count + tokens.numel(), device=tokens.device)
        self.count += tokens.numel()
        self._sentence.append(self._row_sentence[parent_rows])
        self._parent.append(self.rows[parent_rows])
        self._token.append(tokens.reshape(-1))
        self._step.append(torch.full_like(ids, step))
        self._score.append(scores.reshape(-1).float())
        if self._met is not None:
            self._met.append(met.reshape(-1))
        return ids

    def advance(
        self,
        parent_rows: Tensor,
        tokens: Tensor,
        scores: Tensor,
        step: int,
        met: Tensor | None = None,
    ) -> Tensor:
        """The rows of the next step: row r extends row parent_rows[r] with tokens[r]."""
        ids = self._add(parent_rows, tokens, scores, step, met)
        self._row_sentence = self._row_sentence[parent_rows]
        self.rows = ids
        return ids

    def keep(self, rows: Tensor) -> None:
        """Only `rows` go on (greedy and sampling drop the rows that finished)."""
        self.rows, self._row_sentence = self.rows[rows], self._row_sentence[rows]

    def finish(
        self,
        parent_rows: Tensor,
        tokens: Tensor,
        scores: Tensor,
        step: int,
        met: Tensor | None = None,
    ) -> Tensor:
        """Finished hypotheses: row parent_rows[f] ended by tokens[f]; returns their ids."""
        ids = self._add(parent_rows, tokens, scores, step, met)
        self._finished.append(ids)
        return ids

    def mark_finished(self, ids: Tensor) -> None:
        """Nodes already added (by `advance`) that are complete hypotheses (greedy, sampling)."""
        self._finished.append(ids)

    def trees(self, ranks: dict[int, int]) -> list[BeamTree]:
        """One tree per sentence; `ranks` maps the node id of each returned hypothesis to its
        place in its n-best list. One host copy per column."""
        sentence, parent, token, step = (
            torch.cat(c).tolist() for c in (self._sentence, self._parent, self._token, self._step)
        )
        score = torch.cat(self._score).tolist()
        met = [None] * len(score) if self._met is None else torch.cat(self._met).tolist()
        finished = set(torch.cat(self._finished).tolist()) if self._finished else set()
        has_child = {p for p, sc in zip(parent, score) if sc != float("-inf")}
        pieces = self.constraint_pieces
        trees = [
            BeamTree([], None if pieces is None else pieces[i])
            for i in range(self.count and max(sentence) + 1)
        ]
        local: dict[int, int] = {}  # global node id -> index in its sentence's tree
        for node, (s, p, tok, t, sc, m) in enumerate(
            zip(sentence, parent, token, step, score, met)
        ):
            if sc == float("-inf"):  # a row that carried no hypothesis
                continue
            if p < 0:
                state = "root"
            elif node in finished:
                state = "finished"
            elif node in has_child:
                state = "kept"
            else:
                state = "pruned"
            nodes = trees[s].nodes
            local[node] = len(nodes)
            parent_index = -1 if p < 0 else local[p]
            nodes.append(Node(tok, parent_index, t, sc, state, ranks.get(node), met=m))
        return trees
