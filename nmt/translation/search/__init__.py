"""Decoding strategies over the `Seq2Seq` step interface; they never ask which family they run.

`greedy`, `sample` and `beam_search` decode one padded batch and return an n-best list per
sentence; `decode_all` runs the configured strategy over any number of sentences in length-sorted
batches (`nmt.translation.inputs.length_batches`, as every translator batches) and returns the lists
in the input order.

One module per concept, read top-down:
  job.py          `SearchJob`: the sources in ids and what is asked of their translations
  driver.py       `search_all` / `decode_all`: length-sorted batches, results in input order
  batch.py        one padded batch, built once: limits, shortlist, step rules, constraints
  rules.py        the step rules, one list per batch: min length, n-gram blocking, banned
                  phrases, the forced prefix (last)
  step.py         the results and one step of the model through the rules
  constraints.py  positive constraints: phrases every hypothesis must contain (beam search)
  single_path.py  greedy and sampling (one path per row)
  beam.py         beam search
  tree.py         the search tree a search records when asked (every strategy)

All three work on rows: one row per live hypothesis, a decoder state with one row each. A finished
sentence leaves the batch at once (its rows are dropped from the state with `reorder`), so a batch
costs what its live sentences cost, and no loop over the sentences of a batch runs per step.
Shapes: B sentences, K beam size, R live rows, V vocabulary, S source length, M attention maps
(L layers, h heads) of one step: (R, L, h, S).

With `decode.shortlist` (and a `Lexicon`), a batch scores only the C target ids of its
`Shortlist` (`nmt.translation.search.batch`); tokens are then column numbers of the shortlist,
mapped back to vocabulary ids when a hypothesis is stored.

A forced prefix (per source, target ids) makes a row take its prefix's piece at step t: every
other token gets -inf, the forced one keeps the log-probability the model gives it (before the
other rules, which a prefix overrides), so the hypothesis is scored as if the model had chosen
it, and the search goes on from there. A beam then carries one live row per sentence until the
prefix ends (the others score -inf). A `TreeRecorder` records every hypothesis kept
(`tree.py`); without one nothing is recorded.

Banned phrases (target id sequences; `Banned`) are never produced: each step blocks the last
piece of every phrase whose other pieces end a row's history. A forced prefix overrides them as
it overrides the other rules.

Positive constraints (per source, target id sequences; `Constraints`) appear, each contiguous,
in every hypothesis beam search returns: it allocates its beam over banks of constraint progress
(dynamic beam allocation, Hu et al. 2019; positive.py), and EOS waits until every phrase is met.
A forced prefix's pieces count toward them. Greedy and sampling refuse them.
"""

from nmt.translation.search.batch import SearchBatch
from nmt.translation.search.beam import beam_search
from nmt.translation.search.constraints import Constraints
from nmt.translation.search.driver import decode_all, search_all
from nmt.translation.search.job import SearchJob
from nmt.translation.search.rules import NEG_INF, Banned, StepRules
from nmt.translation.search.single_path import greedy, sample
from nmt.translation.search.step import Decoded, Hypothesis

__all__ = [
    "NEG_INF",
    "Banned",
    "Constraints",
    "Decoded",
    "Hypothesis",
    "SearchBatch",
    "SearchJob",
    "StepRules",
    "beam_search",
    "decode_all",
    "greedy",
    "sample",
    "search_all",
]
