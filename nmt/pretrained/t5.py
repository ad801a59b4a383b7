"""Import a T5-family model (T5, T5 v1.1, mT5, MADLAD-400, and models fine-tuned from them) in the
Hugging Face layout as an nmt checkpoint.

T5 differs from the Transformers nmt imported before in ways that are each an option of nmt's
Transformer (`TransformerConfig`): pre-norm layers with RMSNorm and no biases (`norm_type=rms`,
`bias=false`), relative position biases instead of positions on the embeddings
(`positions=relative`, one table per side, which T5 keeps in its first layer), attention without
the 1/sqrt(k) scale (`scale_attention=false`), heads of their own width (`head_size`: T5's d_kv),
T5 v1.1's gated-GELU feed-forward (`gated=true`, `activation=gelu_tanh`), unscaled embeddings
shared by both sides, and an output layer of its own (v1.1, mT5, MADLAD) or tied to the
embeddings and fed the decoder's output times d_model^-0.5 (the original T5): that factor is
folded into the decoder's last norm, whose output only the output layer reads.

MADLAD-400 chooses the target language by a `<2xx>` piece at the start of the *source*
("<2de> How are you?"): the pieces `<2xx>` of the vocabulary become the model's language codes,
read as `CodeStyle.target_on_source` (`tgt_lang=de` puts the code of `de` first on the source,
`nmt.translation.inputs.TargetTags`, tokenized as sentencepiece tokenizes "<2de> " + text).
A T5 without such pieces translates as it was fine-tuned to (a prompt is the user's text).

What the directory holds and what becomes of it:

    config.json                  -> the TransformerConfig (refused by name what nmt lacks)
    model.safetensors (or shards -> the weights, renamed, one tensor at a time
      with their index.json; or pytorch_model.bin)
    spiece.model                 copied: it cuts text into pieces for both sides
    tokenizer.json               -> with spiece.model, pieces.t5.json: every piece by its
                                    Hugging Face id (the sentinels <extra_id_N> after the
                                    sentencepiece pieces), nmt's specials first
    generation_config.json       -> the decode settings (`authors_decode`)

Ids: Hugging Face's T5 has <pad> </s> <unk> = 0, 1, 2 (sentencepiece's own ids: a piece's id is
its sentencepiece id), the sentinels after the pieces, and rows no piece names up to vocab_size
(mT5: 250,112 rows for 250,100 pieces). nmt's table holds, in nmt's order, the rows of <pad>,
<unk>, <pad> again (BOS: T5 starts decoding from <pad>), </s>, then every other id in Hugging
Face's order; BOS's output is `BLOCKED`, so the softmax is T5's. The codes, the sentinels and the
unnamed rows are hidden: decoding leaves them out, as skip_special_tokens does; trimming
keeps the codes and drops the sentinels and the unnamed rows, which no text uses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import sentencepiece as spm
import torch
from torch import Tensor

from nmt.checkpoint import save_checkpoint
from nmt.config import (
    Activation,
    CodeStyle,
    DataConfig,
    Norm,
    NormType,
    Positions,
    TransformerConfig,
)
from nmt.errors import NMTError
from nmt.pretrained.marian import (
    BLOCKED,
    NOT_DATA,
    SafeTensors,
    authors_decode,
    describe,
    locate,
    read_json,
    read_weights,
    trimmed,
    write_options,
)
from nmt.pretrained.trimming import pieces_used, trim
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import BOS, EOS, SPECIAL_PIECES, T5_FILES, load_vocabs

log = logging.getLogger(__name__)

CODE = re.compile(r"<2([A-Za-z]{2,3}(?:[_-][A-Za-z0-9]+)*)>")  # MADLAD-400's "<2de>", "<2zh_Latn>"
SENTINEL = re.compile(r"<extra_id_\d+>")
UNNAMED = re.compile(r"<unused_\d+>")  # a row of the model that no piece of its tokenizer names
# T5's dense_act_fn names -> nmt's activation
ACTIVATIONS = {
    "relu": Activation.relu, "gelu": Activation.gelu, "gelu_new": Activation.gelu_tanh,
    "gelu_pytorch_tanh": Activation.gelu_tanh, "gelu_fast": Activation.gelu_tanh,
    "silu": Activation.swish, "swish": Activation.swish,
}  # fmt: skip
# per layer: Hugging Face's sublayer (block.i.layer.j.NAME) -> nmt's
ENCODER_PARTS = {0: ("SelfAttention", "attention", "sub_attention"),
                 1: ("DenseReluDense", "feed_forward", "sub_ff")}  # fmt: skip
DECODER_PARTS = {0: ("SelfAttention", "self_attention", "sub_self"),
                 1: ("EncDecAttention", "cross_attention", "sub_cross"),
                 2: ("DenseReluDense", "feed_forward", "sub_ff")}  # fmt: skip


def import_t5(
    source: str, out: Path, directory: Path | None = None, keep_text: Sequence[str] = ()
) -> Path:
    """Write the T5-family model `source` (a directory, or a hub id; `directory`: where it was
    fetched to) as the new nmt checkpoint directory `out`; returns `out`. With `keep_text`
    (files), only the pieces those texts need are kept (`nmt.pretrained.trimming`)."""
    out = Path(out)
    if out.exists():
        raise NMTError(f"out={out} exists: choose a new directory")
    directory = directory or locate(source)
    hf = read_json(directory / "config.json")
    model = model_config(hf)
    generation = read_json(directory / "generation_config.json", missing_ok=True)
    spm_path = directory / T5_FILES["spm"]
    if not spm_path.is_file():
        raise NMTError(f"{directory} has no {spm_path.name}: its tokenizer cannot be read")
    hf_ids = hf_vocabulary(directory, spm_path, hf["vocab_size"])
    codes = {CODE.fullmatch(p).group(1): p for _, p in sorted(hf_ids.items()) if CODE.fullmatch(p)}
    order, pieces = id_order(hf_ids, hf)
    if keep_text:  # the codes kept, the sentinels and unnamed rows not: no text uses them
        kept = [i for i, piece in enumerate(pieces) if piece in codes.values()]
        order, pieces, _ = trim(order, pieces, kept, pieces_used([spm_path], keep_text))
    hidden = hidden_ids(pieces, set(codes.values()))
    weights = read_weights(directory)
    state, untied = convert_weights(weights, hf, model, order)
    del weights
    model = dataclasses.replace(model, tie_output=not untied)

    staging = out.parent / f".{out.name}.import-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        shutil.copy2(spm_path, staging / T5_FILES["spm"])
        listed = {"pieces": pieces, "hidden": hidden}
        (staging / T5_FILES["pieces"]).write_text(json.dumps(listed, ensure_ascii=False))
        vocabs = load_vocabs(staging)
        english = "en" if "en" in codes else next(iter(codes), "src")
        data = DataConfig(
            name=f"imported {source}", src_lang=english, tgt_lang=english if codes else "tgt",
            local_dir=NOT_DATA, language_codes=codes, code_style=CodeStyle.target_on_source,
        )  # fmt: skip
        decode = authors_decode(generation, hf, model.max_positions)
        cfg = TrainRunConfig(data=data, model=model, decode=decode, run_dir=".")
        imported = {"from": source, "format": hf.get("model_type", "t5"),
                    **trimmed(keep_text, hf, pieces)}  # fmt: skip
        step_dir = save_checkpoint(staging, 0, {"model": state, "imported": imported}, cfg, vocabs)
        write_options(model, cfg.decode, step_dir)
        os.rename(step_dir, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("imported %s: %d pieces, %d language codes, %s", source, len(pieces), len(codes),
             describe(model))  # fmt: skip
    return out


def model_config(hf: dict) -> TransformerConfig:
    """nmt's Transformer for a T5 / mT5 config.json; what it cannot be is refused by name."""
    refused = []
    projection = str(hf.get("feed_forward_proj", "relu"))
    gated = projection.startswith("gated-")
    # transformers maps "gated-gelu" to gelu_new (T5 v1.1's), whatever dense_act_fn says
    name = "gelu_new" if projection == "gated-gelu" else projection.removeprefix("gated-")
    if name not in ACTIVATIONS:
        refused.append(f"feed_forward_proj={projection!r}")
    if hf.get("is_decoder") or hf.get("is_encoder_decoder") is False:
        refused.append("a decoder or encoder alone (nmt imports encoder-decoder translators)")
    if hf.get("decoder_start_token_id", hf.get("pad_token_id")) != hf.get("pad_token_id"):
        refused.append("decoder_start_token_id differs from pad_token_id")
    if (hf.get("pad_token_id"), hf.get("eos_token_id")) != (0, 1):
        refused.append("special ids other than T5's (<pad> 0, </s> 1)")
    if refused:
        raise NMTError("this T5 model has what nmt's Transformer lacks: " + "; ".join(refused))
    dropout = float(hf.get("dropout_rate", 0.1))
    return TransformerConfig(
        d_model=hf["d_model"], heads=hf["num_heads"], head_size=hf["d_kv"], ff_size=hf["d_ff"],
        encoder_layers=hf["num_layers"],
        decoder_layers=hf.get("num_decoder_layers") or hf["num_layers"],
        dropout=dropout, attention_dropout=dropout, activation_dropout=dropout,
        activation=ACTIVATIONS.get(name, Activation.relu), gated=gated,
        norm=Norm.pre, norm_type=NormType.rms, norm_eps=float(hf.get("layer_norm_epsilon", 1e-6)),
        positions=Positions.relative, max_positions=int(hf.get("n_positions", 512)),
        relative_buckets=int(hf.get("relative_attention_num_buckets", 32)),
        relative_max_distance=int(hf.get("relative_attention_max_distance", 128)),
        scale_embeddings=False, share_embeddings=True, tie_output=True, bias=False,
        scale_attention=False,
    )  # fmt: skip


def hf_vocabulary(directory: Path, spm_path: Path, size: int) -> dict[int, str]:
    """Every Hugging Face id's piece: sentencepiece's, then tokenizer.json's added tokens (the
    sentinels) where it has them, else T5's 100 sentinels after the pieces, last first; rows
    up to `size` that no piece names are `<unused_N>`."""
    processor = spm.SentencePieceProcessor(model_file=str(spm_path))
    if (processor.pad_id(), processor.eos_id(), processor.unk_id()) != (0, 1, 2):
        raise NMTError(f"{spm_path} does not have T5's special ids (<pad> 0, </s> 1, <unk> 2)")
    pieces = {i: processor.IdToPiece(i) for i in range(processor.GetPieceSize())}
    fast = directory / "tokenizer.json"
    if fast.is_file():
        added = read_json(fast).get("added_tokens", [])
        pieces.update({t["id"]: t["content"] for t in added if t["id"] >= len(pieces)})
    else:  # T5Tokenizer's default: <extra_id_99> .. <extra_id_0> after the pieces
        extra = read_json(directory / "tokenizer_config.json", missing_ok=True).get("extra_ids", 0)
        start = len(pieces)
        pieces.update({start + k: f"<extra_id_{extra - 1 - k}>" for k in range(int(extra))})
    if max(pieces) >= size:
        raise NMTError(
            f"the tokenizer has ids up to {max(pieces)}, the model {size} rows (vocab_size)"
        )
    for i in range(size):
        pieces.setdefault(i, f"<unused_{i}>")
    return pieces


def id_order(pieces: dict[int, str], hf: dict) -> tuple[list[int], list[str]]:
    """Per nmt id, the Hugging Face id whose row it takes, and per nmt id its piece."""
    pad, eos, unk = hf["pad_token_id"], hf["eos_token_id"], 2
    order = [pad, unk, pad, eos] + [i for i in sorted(pieces) if i not in (pad, unk, eos)]
    return order, list(SPECIAL_PIECES) + [pieces[i] for i in order[len(SPECIAL_PIECES) :]]


def hidden_ids(names: list[str], codes: set[str]) -> list[int]:
    """The nmt ids decoding leaves out: the codes, the sentinels, the unnamed rows."""
    return [
        ours for ours, name in enumerate(names)
        if ours > EOS and (name in codes or SENTINEL.fullmatch(name) or UNNAMED.fullmatch(name))
    ]  # fmt: skip


def convert_weights(
    weights: SafeTensors | dict[str, Tensor], hf: dict, model: TransformerConfig, order: list[int]
) -> tuple[dict[str, Tensor], bool]:
    """Hugging Face's T5ForConditionalGeneration state dict -> nmt's Transformer's (see the
    module's notes), and whether its output layer is its own (lm_head.weight saved, and not the
    embeddings: transformers ties them only where they are equal). Each tensor is taken out of
    `weights` as it is converted to float32."""

    def get(key: str) -> Tensor:
        if key not in weights:
            raise NMTError(f"the weights have no {key}: not a T5ForConditionalGeneration's")
        return weights.pop(key)

    def own(x: Tensor) -> Tensor:
        return x.to(torch.float32, copy=True).contiguous()

    index = torch.tensor(order)
    shared = "shared.weight" if "shared.weight" in weights else "encoder.embed_tokens.weight"
    table = get(shared).index_select(0, index).float()
    for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
        if alias in weights:
            weights.pop(alias)
    state = {"encoder.embed.table.weight": table, "decoder.embed.table.weight": table}
    bias = torch.zeros(len(order))
    bias[BOS] = BLOCKED
    state["decoder.out.bias"] = bias
    head = weights.pop("lm_head.weight") if "lm_head.weight" in weights else None
    if head is not None:  # rows in nmt's order; dropped again where it is the table itself
        head = head.index_select(0, index).float()
    untied = head is not None and not torch.equal(head, table)
    if untied:
        state["decoder.out.weight"] = head
    del head

    def attention(src: str, dst: str) -> None:
        state[f"{dst}.q.weight"] = own(get(f"{src}.q.weight"))
        keys, values = get(f"{src}.k.weight"), get(f"{src}.v.weight")
        state[f"{dst}.kv.weight"] = torch.cat([keys, values]).float()
        state[f"{dst}.out.weight"] = own(get(f"{src}.o.weight"))

    def feed_forward(src: str, dst: str) -> None:
        first = (
            torch.cat([get(f"{src}.wi_0.weight"), get(f"{src}.wi_1.weight")]).float()
            if model.gated
            else own(get(f"{src}.wi.weight"))
        )
        state[f"{dst}.0.weight"] = first
        state[f"{dst}.3.weight"] = own(get(f"{src}.wo.weight"))

    for side, parts in (("encoder", ENCODER_PARTS), ("decoder", DECODER_PARTS)):
        layers = model.encoder_layers if side == "encoder" else model.decoder_layers
        for i in range(layers):
            for j, (theirs, ours, sub) in parts.items():
                src, dst = f"{side}.block.{i}.layer.{j}", f"{side}.layers.{i}"
                convert = feed_forward if theirs == "DenseReluDense" else attention
                convert(f"{src}.{theirs}", f"{dst}.{ours}")
                state[f"{dst}.{sub}.norm.weight"] = own(get(f"{src}.layer_norm.weight"))
        relative = f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        state[f"{side}.relative.table.weight"] = own(get(relative))
        state[f"{side}.norm.weight"] = own(get(f"{side}.final_layer_norm.weight"))
    # the original T5 (tie_word_embeddings true) scales the decoder's output by d^-0.5 before
    # the output layer (transformers' scale_decoder_outputs): folded into the last norm
    if hf.get("tie_word_embeddings", True) is not False:
        state["decoder.norm.weight"] *= model.d_model**-0.5
    return state, untied
