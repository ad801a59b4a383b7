"""What an exported graph takes and returns: `TensorSpec` for one tensor, `GraphSpec` for both
graphs of a model and how the decoding loop connects them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TensorSpec:
    """One graph input or output. `shape` holds ints and axis names (batch, src_len, steps);
    `batch_axis` is where the batch lies (None: no batch axis)."""

    name: str
    dtype: str  # int64, float32, bool
    shape: list[int | str]
    batch_axis: int | None = 0
    doc: str = ""

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != ""}


@dataclass
class GraphSpec:
    """Names and shapes of both graphs and how the decoding loop connects them: each step feeds
    the encoder's `memory` outputs unchanged and `state` (step output -> next step's input)."""

    family: str
    encoder_inputs: list[TensorSpec]
    encoder_outputs: list[TensorSpec]
    step_inputs: list[TensorSpec]
    step_outputs: list[TensorSpec]
    state: dict[str, str] = field(default_factory=dict)  # step output name -> step input name
    memory: list[str] = field(default_factory=list)  # encoder outputs fed to every step

    def to_json(self) -> dict:
        return {
            "encoder": {
                "inputs": [t.to_json() for t in self.encoder_inputs],
                "outputs": [t.to_json() for t in self.encoder_outputs],
            },
            "decoder_step": {
                "inputs": [t.to_json() for t in self.step_inputs],
                "outputs": [t.to_json() for t in self.step_outputs],
            },
            "state": self.state,
            "memory": self.memory,
        }
