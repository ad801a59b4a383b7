"""The models as two pure functions over explicit tensors: what `nmt-export` traces.

A model decodes through `encode` / `init_state` / `step` with a Python state object; an exported
graph can only take and return tensors. `export_graphs(model)` wraps a trained `Seq2Seq` into

- an encoder graph: source ids (and lengths) -> the decoder's initial state, and
- a decoder-step graph: the previous token and the state -> next-token log-probabilities, the
  cross-attention of the step and the new state,

with every piece of state an explicit input and output, described by a `GraphSpec` (names, shapes,
which axis is the batch, which outputs feed which inputs at the next step). The wrappers reuse the
model's own modules (weights, attention, layers); they rewrite only what a trace cannot follow:
packed sequences (the recurrent encoder runs each direction on per-sentence reversed inputs
instead, which gives the same states) and Python-int positions and in-place caches (the
Transformer step appends to its cache and reads its position from the cache length).

Shapes: B batch, S source length, P positions decoded so far, L layers, h heads, k head size,
H hidden size, V target vocabulary. Greedy decoding over these graphs (`nmt/export/runtime.py`)
gives the tokens of `nmt.translation.search.greedy`; tests/test_export.py checks it for both
families.

Each family's graphs are in their own module (`transformer.py`, `rnn.py`); `spec.py` holds the
specs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from nmt.errors import NMTError
from nmt.export.graphs.rnn import RNNEncoderGraph, RNNStepGraph, rnn_spec
from nmt.export.graphs.spec import GraphSpec, TensorSpec
from nmt.export.graphs.transformer import (
    TransformerEncoderGraph,
    TransformerStepGraph,
    transformer_spec,
)
from nmt.models.rnn import RNNDecoder, RNNEncoder
from nmt.models.seq2seq import Seq2Seq
from nmt.models.transformer import TransformerDecoder, TransformerEncoder
from nmt.tokenizer import BOS, EOS, PAD

__all__ = ["GraphSpec", "Graphs", "TensorSpec", "export_graphs"]


@dataclass
class Graphs:
    encoder: nn.Module
    step: nn.Module
    spec: GraphSpec

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The session interface of `nmt.export.runtime` over the PyTorch graphs themselves: graph
        is "encoder" or "decoder_step"; inputs and outputs by name, as numpy arrays."""
        module, names, outputs = self._graph(graph)
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.asarray(inputs[name])) for name in names])
        return {name: o.numpy() for name, o in zip(outputs, out)}

    def _graph(self, graph: str) -> tuple[nn.Module, list[str], list[str]]:
        spec = self.spec
        if graph == "encoder":
            return self.encoder, _names(spec.encoder_inputs), _names(spec.encoder_outputs)
        return self.step, _names(spec.step_inputs), _names(spec.step_outputs)

    def example_inputs(self, batch: int = 2, src_len: int = 3) -> tuple[tuple, tuple]:
        """Inputs to trace with: sizes >= 2 on every variable axis (an exporter specialises 0
        and 1), a padded batch with lengths `src_len` and `src_len - 1` and, for the
        Transformer, two positions in the caches."""
        src = np.array([[5 + i for i in range(src_len - 1)] + [EOS]] * batch, dtype=np.int64)
        src[1:, -1], src[1:, -2] = PAD, EOS
        lens = np.array([src_len] + [src_len - 1] * (batch - 1), dtype=np.int64)
        values = self.run("encoder", {"src": src, "src_lens": lens})
        prev = np.full(batch, BOS, dtype=np.int64)
        for _ in range(2 if self.spec.family == "transformer" else 0):
            out = self.run("decoder_step", {"prev": prev, **values})
            values.update({old: out[new] for new, old in self.spec.state.items()})
        _, enc_names, _ = self._graph("encoder")
        _, step_names, _ = self._graph("decoder_step")
        values |= {"src": src, "src_lens": lens, "prev": prev}
        return tuple(torch.from_numpy(values[n]) for n in enc_names), tuple(
            torch.from_numpy(values[n]) for n in step_names
        )


def _names(tensors: list[TensorSpec]) -> list[str]:
    return [t.name for t in tensors]


def export_graphs(model: Seq2Seq) -> Graphs:
    """The encoder and decoder-step graphs of a model (put in eval mode)."""
    model = model.eval()
    match model.encoder, model.decoder:
        case TransformerEncoder(), TransformerDecoder():
            return Graphs(
                TransformerEncoderGraph(model.encoder, model.decoder).eval(),
                TransformerStepGraph(model.decoder).eval(),
                transformer_spec(model),
            )
        case RNNEncoder(), RNNDecoder():
            return Graphs(
                RNNEncoderGraph(model.encoder, model.decoder).eval(),
                RNNStepGraph(model.decoder).eval(),
                rnn_spec(model),
            )
    raise NMTError(f"cannot export a {type(model.encoder).__name__} model")
