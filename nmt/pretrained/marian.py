"""Import a Marian model (OPUS-MT) in the Hugging Face layout as an nmt checkpoint.

A Marian model is a post-norm Transformer with scaled embeddings, sinusoids laid out in halves,
one embedding table for both sides and the output layer (tied), a final logits bias and, in
OPUS-MT, the swish activation: each is an option of nmt's Transformer (`TransformerConfig`),
so the imported checkpoint is an ordinary one and every nmt tool takes it.

What the directory holds and what becomes of it:

    config.json          -> the model's TransformerConfig (refused by name what nmt lacks)
    model.safetensors    -> the weights, renamed; read with safetensors, or else
    pytorch_model.bin       with torch.load(weights_only=True): no code from the directory runs
    vocab.json           -> pieces.marian.json: the pieces in nmt's id order (`MarianVocab`)
    source.spm, target.spm  copied
    generation_config.json  -> the decode settings (`authors_decode`: beam, length penalty,
                         early stopping, length limits); bad_words_ids [[pad]] blocks PAD as
                         Hugging Face's generate does

Ids: nmt's specials are PAD, UNK, BOS, EOS = 0..3 (`nmt.tokenizer`); Marian's are </s>, <unk>
and <pad>, where decoding starts from <pad>. The imported table holds, in nmt's order, the
rows of <pad>, <unk>, <pad> again (BOS: the start of decoding), </s>, then every other piece in
Marian's order. The BOS row is one Marian lacks, so its output bias is `BLOCKED`, a logit that
leaves it no probability at all in float32: the softmax over the other pieces is Marian's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

import torch
from torch import Tensor

from nmt.checkpoint import save_checkpoint
from nmt.config import (
    Activation,
    DataConfig,
    DecodeConfig,
    LengthPenalty,
    Norm,
    Positions,
    Strategy,
    TransformerConfig,
)
from nmt.errors import NMTError
from nmt.pretrained.trimming import pieces_used, trim
from nmt.run_config import CHECKPOINT_OPTIONS, TrainRunConfig
from nmt.tokenizer import BOS, EOS, MARIAN_FILES, PAD, SPECIAL_PIECES, load_vocabs

log = logging.getLogger(__name__)

BLOCKED = -1e4  # an output bias no piece survives: exp(-1e4 - max) is 0 in float32
ACTIVATIONS = {
    "swish": Activation.swish, "silu": Activation.swish, "gelu": Activation.gelu,
    "relu": Activation.relu,
}  # fmt: skip
# the files read from a directory or fetched from the hub, no other
FILES = [
    "config.json", "generation_config.json", "model.safetensors", "pytorch_model.bin",
    "vocab.json", "source.spm", "target.spm", "tokenizer_config.json",
    "sentencepiece.bpe.model", "tokenizer.json",  # NLLB-200 / M2M-100 (nmt.pretrained.m2m100)
    "spiece.model", "model.safetensors.index.json", "model-*-of-*.safetensors",  # T5, MADLAD
]  # fmt: skip
SHARD_INDEX = "model.safetensors.index.json"  # a model saved in shards: tensor -> its file
# per layer of each side: Hugging Face's sublayer -> nmt's (an attention's four projections, or a
# linear / LayerNorm's weight and bias)
LAYER_PARTS = {
    "encoder": [
        ("self_attn", "attention"), ("self_attn_layer_norm", "sub_attention.norm"),
        ("fc1", "feed_forward.0"), ("fc2", "feed_forward.3"), ("final_layer_norm", "sub_ff.norm"),
    ],
    "decoder": [
        ("self_attn", "self_attention"), ("self_attn_layer_norm", "sub_self.norm"),
        ("encoder_attn", "cross_attention"), ("encoder_attn_layer_norm", "sub_cross.norm"),
        ("fc1", "feed_forward.0"), ("fc2", "feed_forward.3"), ("final_layer_norm", "sub_ff.norm"),
    ],
}  # fmt: skip
NOT_DATA = "none: pass data=... to nmt-evaluate or nmt-train"  # the imported run's data.local_dir
# the model and its authors' decode settings as config options of the checkpoint's own
# (nmt.cli.compose takes them from it): for fine-tuning and for every decoding command
MODEL_OPTION, DECODE_OPTION = CHECKPOINT_OPTIONS["model"], CHECKPOINT_OPTIONS["decode"]


def import_marian(
    source: str, out: Path, directory: Path | None = None, keep_text: Sequence[str] = ()
) -> Path:
    """Write the Marian model `source` (a directory, or a Hugging Face hub id fetched when the hub
    is reachable; `directory`: where it was fetched to) as the new nmt checkpoint directory
    `out`; returns `out`. With `keep_text` (files), only the pieces those texts need are kept
    (`nmt.pretrained.trimming`)."""
    out = Path(out)
    if out.exists():
        raise NMTError(f"out={out} exists: choose a new directory")
    directory = directory or locate(source)
    hf = read_json(directory / "config.json")
    model = model_config(hf)
    generation = read_json(directory / "generation_config.json", missing_ok=True)
    tokenizer = read_json(directory / "tokenizer_config.json", missing_ok=True)
    vocab = read_json(directory / "vocab.json")
    order, pieces = id_order(vocab, hf)
    if keep_text:
        models = [directory / MARIAN_FILES[side] for side in ("src", "tgt")]
        order, pieces, _ = trim(order, pieces, [], pieces_used(models, keep_text))
    weights = read_weights(directory)
    blocked = [BOS]
    if [hf["pad_token_id"]] in (generation.get("bad_words_ids") or hf.get("bad_words_ids") or []):
        blocked.append(PAD)
    state = convert_weights(weights, hf, order, blocked)
    del weights

    staging = out.parent / f".{out.name}.import-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for side in ("src", "tgt"):
            spm = directory / MARIAN_FILES[side]
            if not spm.is_file():
                raise NMTError(f"{directory} has no {spm.name}: not a Marian model's directory")
            shutil.copy2(spm, staging / spm.name)
        (staging / MARIAN_FILES["pieces"]).write_text(json.dumps(pieces, ensure_ascii=False))
        vocabs = load_vocabs(staging)
        cfg = run_config(model, hf, generation, tokenizer, source)
        imported = {"from": source, "format": "marian", **trimmed(keep_text, hf, pieces)}
        payload = {"model": state, "imported": imported}
        step_dir = save_checkpoint(staging, 0, payload, cfg, vocabs)
        write_options(model, cfg.decode, step_dir)
        os.rename(step_dir, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("imported %s: %d pieces, %s", source, len(pieces), describe(model))
    return out


def trimmed(keep_text: Sequence[str], hf: dict, pieces: list[str]) -> dict:
    """What the checkpoint records of a trimming (none: nothing)."""
    if not keep_text:
        return {}
    return {"keep_text": [str(Path(f).resolve()) for f in keep_text],
            "pieces": f"{len(pieces)} of {hf['vocab_size']}"}  # fmt: skip


def locate(source: str) -> Path:
    """A local directory as it is; anything else is a hub id, fetched (the files of `FILES`)."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or source.count("/") != 1:
        raise NMTError(f"source={source}: not a directory, nor a hub id such as Helsinki-NLP/NAME")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as err:  # comes with datasets; absent only in a broken install
        raise NMTError("fetching from the hub needs huggingface_hub (datasets brings it)") from err
    try:
        return Path(snapshot_download(source, allow_patterns=FILES))
    except Exception as err:  # offline, unknown id, access refused: the hub's own message
        raise NMTError(f"cannot fetch {source} from the Hugging Face hub: {err}") from err


def read_json(path: Path, missing_ok: bool = False) -> dict:
    if missing_ok and not path.is_file():
        return {}
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as err:
        raise NMTError(f"cannot read {path}: {err}") from err


def model_config(hf: dict) -> TransformerConfig:
    """nmt's Transformer for a Marian config.json; what it cannot be is refused by name."""
    kind = hf.get("model_type")
    if kind != "marian":
        raise NMTError(
            f"model_type={kind!r}: nmt-import reads Marian models (OPUS-MT, model_type 'marian'), "
            "M2M-100's (NLLB-200, M2M-100: 'm2m_100'), mBART-50 ('mbart') and T5's (T5, mT5, "
            "MADLAD-400: 't5', 'mt5'); other architectures are not supported"
        )
    refused, shape = bart_shape(hf, "swish")
    if not hf.get("share_encoder_decoder_embeddings", True):
        refused.insert(0, "share_encoder_decoder_embeddings=false (a vocabulary per side)")
    if hf.get("decoder_vocab_size", hf["vocab_size"]) != hf["vocab_size"]:
        refused.append("decoder_vocab_size differs from vocab_size")
    if hf.get("decoder_start_token_id", hf["pad_token_id"]) != hf["pad_token_id"]:
        refused.append("decoder_start_token_id differs from pad_token_id")
    if refused:
        raise NMTError("this Marian model has what nmt's Transformer lacks: " + "; ".join(refused))
    return TransformerConfig(
        **shape,
        norm=Norm.post,
        positions=Positions.sinusoidal_halves,
        max_positions=hf.get("max_position_embeddings", 512),
        scale_embeddings=bool(hf.get("scale_embedding", True)),
        share_embeddings=True,
        tie_output=bool(hf.get("tie_word_embeddings", True)),
    )


def bart_shape(hf: dict, activation: str) -> tuple[list[str], dict]:
    """What the BART-style configs (Marian, M2M-100) share: the refusals of what nmt's
    Transformer has one value for, and its size, dropout and activation options (`activation`:
    the config's default activation_function)."""
    refused = []
    for a, b in (("encoder_ffn_dim", "decoder_ffn_dim"),
                 ("encoder_attention_heads", "decoder_attention_heads")):  # fmt: skip
        if hf[a] != hf[b]:
            refused.append(f"{a}={hf[a]} with {b}={hf[b]} (nmt has one value for both)")
    name = hf.get("activation_function", activation)
    if name not in ACTIVATIONS:
        refused.append(f"activation_function={name!r}")
    shape = dict(
        d_model=hf["d_model"], heads=hf["encoder_attention_heads"], ff_size=hf["encoder_ffn_dim"],
        encoder_layers=hf["encoder_layers"], decoder_layers=hf["decoder_layers"],
        dropout=hf.get("dropout", 0.1), attention_dropout=hf.get("attention_dropout", 0.0),
        activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS.get(name, ACTIVATIONS[activation]),
    )  # fmt: skip
    return refused, shape


def write_options(model: TransformerConfig, decode: DecodeConfig, directory: Path) -> None:
    """The model and its authors' decode settings as YAML options of the `model` and `decode`
    groups (MODEL_OPTION, DECODE_OPTION): the commands take them from the checkpoint by
    themselves (`nmt.cli.compose`): nmt-train builds the imported architecture for
    train.init_from=DIR, the decoding commands decode as its authors do unless decode=... says
    otherwise; `--config-dir DIR model=imported` / `decode=imported` name them."""
    head = "# nmt-import's model: nmt-train train.init_from=DIR takes it (or model=imported)"
    _write_option(model, directory / MODEL_OPTION, [head, "defaults:", "  - transformer",
                                                    "  - _self_", ""])  # fmt: skip
    head = "# how the model's authors decode it (its generation config): every decoding command"
    _write_option(
        decode, directory / DECODE_OPTION, [head, "#   takes it unless decode=... is given"]
    )


def _write_option(cfg: object, path: Path, lines: list[str]) -> None:
    for key, value in dataclasses.asdict(cfg).items():
        value = value.value if isinstance(value, Enum) else value
        lines.append(f"{key}: {json.dumps(value)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", "utf-8")


def describe(cfg: TransformerConfig) -> str:
    return (
        f"Transformer {cfg.encoder_layers}+{cfg.decoder_layers} layers, d {cfg.d_model}, "
        f"{cfg.heads} heads, ff {cfg.ff_size}, {cfg.activation.value}"
    )


def id_order(vocab: dict[str, int], hf: dict) -> tuple[list[int], list[str]]:
    """Per nmt id, the Marian id whose row it takes, and its piece: the specials (PAD, UNK, BOS,
    EOS) first, then every other piece of vocab.json in Marian's order."""
    if "<unk>" not in vocab:
        raise NMTError("vocab.json has no <unk>: not a Marian vocabulary")
    pad, eos, unk = hf["pad_token_id"], hf["eos_token_id"], vocab["<unk>"]
    piece_of = {i: p for p, i in vocab.items()}
    size = hf["vocab_size"]
    if len(piece_of) != len(vocab) or max(piece_of) >= size:
        raise NMTError(f"vocab.json does not give {size} distinct ids (config.json vocab_size)")
    order = [pad, unk, pad, eos] + [i for i in sorted(piece_of) if i not in (pad, unk, eos)]
    pieces = list(SPECIAL_PIECES) + [piece_of[i] for i in order[EOS + 1 :]]
    return order, pieces


class SafeTensors:
    """The tensors of a safetensors file, or of the shards its index.json lists, each read when
    taken (`pop`): its file is opened for each, so that no mapping of a whole file stays in
    memory while the weights are converted."""

    def __init__(self, files: dict[str, Path]) -> None:
        """`files`: tensor name -> the file holding it."""
        self._files = dict(files)

    @classmethod
    def open(cls, path: Path) -> SafeTensors:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            return cls(dict.fromkeys(f.keys(), path))

    def __contains__(self, key: str) -> bool:
        return key in self._files

    def pop(self, key: str) -> Tensor:
        from safetensors import safe_open

        with safe_open(str(self._files.pop(key)), framework="pt") as f:
            return f.get_tensor(key)


def read_weights(directory: Path) -> SafeTensors | dict[str, Tensor]:
    """The tensors of model.safetensors, or of the shards model.safetensors.index.json names
    (with the safetensors library, each read when taken), else of pytorch_model.bin (torch.load
    with weights_only=True): loading runs no code of the file. `convert_weights` takes each
    tensor out as it converts it, so the import holds about one copy of the weights at a time."""
    safetensors, index = directory / "model.safetensors", directory / SHARD_INDEX
    if safetensors.is_file() or index.is_file():
        try:
            if safetensors.is_file():
                return SafeTensors.open(safetensors)
            shards = read_json(index).get("weight_map", {})
            return SafeTensors({key: directory / name for key, name in shards.items()})
        except ImportError as err:
            need = f"reading {safetensors} needs safetensors: pip install safetensors"
            raise NMTError(need) from err
        except NMTError:
            raise
        except Exception as err:  # a damaged header
            raise NMTError(f"cannot read the weights in {directory}: {err}") from err
    pickled = directory / "pytorch_model.bin"
    if not pickled.is_file():
        raise NMTError(f"{directory} has no model.safetensors or pytorch_model.bin")
    try:
        return torch.load(pickled, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for files it refuses
        raise NMTError(f"cannot read {pickled}: {str(err).splitlines()[0]}") from err


def convert_weights(
    weights: SafeTensors | dict[str, Tensor],
    hf: dict,
    order: list[int],
    blocked: list[int],
    final_norms: bool = False,
) -> dict[str, Tensor]:
    """Hugging Face's MarianMTModel state dict -> nmt's Transformer's (see the module's notes
    for the ids); the output bias of the ids in `blocked` is `BLOCKED`. `final_norms`: the
    LayerNorm after each side's last layer (pre-norm models: M2M-100, NLLB-200) too. Each
    tensor is taken out of `weights` as it is converted into a float32 tensor of its own."""

    def has(key: str) -> bool:
        return f"model.{key}" in weights or key in weights

    def get(key: str) -> Tensor:
        for name in (f"model.{key}", key):
            if name in weights:
                return weights.pop(name)
        raise NMTError(f"the weights have no {key}: not a MarianMTModel's")

    def own(x: Tensor) -> Tensor:
        return x.to(torch.float32, copy=True).contiguous()

    index = torch.tensor(order)
    # tied tables are saved once (safetensors) or under every name, one storage (a pickle):
    # the other names are dropped too, so that the storage goes as soon as it is converted
    shared = "shared.weight" if has("shared.weight") else "encoder.embed_tokens.weight"
    table = get(shared).index_select(0, index).float()
    aliases = ["encoder.embed_tokens.weight", "decoder.embed_tokens.weight"]
    if hf.get("tie_word_embeddings", True):
        aliases.append("lm_head.weight")
    for alias in aliases:
        if isinstance(weights, dict):  # a safetensors file reads nothing it is not asked for
            weights.pop(f"model.{alias}", weights.pop(alias, None))
    state = {"encoder.embed.table.weight": table, "decoder.embed.table.weight": table}
    has_bias = has("final_logits_bias")
    bias = get("final_logits_bias")[0] if has_bias else torch.zeros(hf["vocab_size"])
    bias = bias.index_select(0, index).float()
    bias[blocked] = BLOCKED
    state["decoder.out.bias"] = bias
    if not hf.get("tie_word_embeddings", True):
        state["decoder.out.weight"] = get("lm_head.weight").index_select(0, index).float()

    def attention(src: str, dst: str) -> None:
        for part in ("weight", "bias"):
            state[f"{dst}.q.{part}"] = own(get(f"{src}.q_proj.{part}"))
            keys, values = get(f"{src}.k_proj.{part}"), get(f"{src}.v_proj.{part}")
            state[f"{dst}.kv.{part}"] = torch.cat([keys, values]).float()
            state[f"{dst}.out.{part}"] = own(get(f"{src}.out_proj.{part}"))

    def copy(src: str, dst: str) -> None:
        for part in ("weight", "bias"):
            state[f"{dst}.{part}"] = own(get(f"{src}.{part}"))

    for side, parts in LAYER_PARTS.items():
        for i in range(hf[f"{side}_layers"]):
            for theirs, ours in parts:
                convert = attention if theirs.endswith("attn") else copy
                convert(f"{side}.layers.{i}.{theirs}", f"{side}.layers.{i}.{ours}")
        if final_norms:
            copy(f"{side}.layer_norm", f"{side}.norm")
    return state


def run_config(
    model: TransformerConfig, hf: dict, generation: dict, tokenizer: dict, source: str
) -> TrainRunConfig:
    """The imported checkpoint's config.yaml: the model, the languages when the tokenizer names
    them, no data of its own (`NOT_DATA`), and the decode settings its authors ship
    (`authors_decode`)."""
    src_lang = tokenizer.get("source_lang") or "src"
    tgt_lang = tokenizer.get("target_lang") or "tgt"
    data = DataConfig(name=f"imported {source}", src_lang=src_lang, tgt_lang=tgt_lang,
                      local_dir=NOT_DATA)  # fmt: skip
    decode = authors_decode(generation, hf, model.max_positions)
    return TrainRunConfig(data=data, model=model, decode=decode, run_dir=".")


def authors_decode(generation: dict, hf: dict, positions: int) -> DecodeConfig:
    """How the model's authors decode it: Hugging Face's generation config (generation_config.json,
    else config.json's generation keys; Hugging Face's defaults where neither says) as nmt's
    decode settings, so that nmt-translate with no decode setting gives what `generate` gives.

    num_beams -> a beam of that size (1: greedy); length_penalty lp -> score / length ** lp
    (`power`); early_stopping -> decode.early_stopping (Hugging Face's default: false);
    max_length (which counts the decoder's start) or max_new_tokens -> the length limit;
    min_length / min_new_tokens, no_repeat_ngram_size, repetition_penalty -> nmt's rules of
    the same meaning. A source is cut at the model's positions (max_position_embeddings): longer
    ones would use positions it never saw. What nmt does not carry over is named in a warning."""

    def given(key: str, default: object = None) -> object:
        value = generation.get(key, hf.get(key))
        return default if value is None else value

    beams = int(given("num_beams", 1))
    penalty = float(given("length_penalty", 1.0))
    early = given("early_stopping", False)
    settings: dict = {
        "strategy": Strategy.beam if beams > 1 else Strategy.greedy,
        "beam_size": max(beams, 1),
        "length_penalty": LengthPenalty.average if penalty == 1.0 else LengthPenalty.power,
        "alpha": 1.0 if penalty == 1.0 else penalty,
        "early_stopping": early is True,
        "no_repeat_ngram": int(given("no_repeat_ngram_size", 0)),
        "repetition_penalty": float(given("repetition_penalty", 1.0)),
        "max_src_pieces": positions,
    }
    if given("max_new_tokens") is not None:
        steps = int(given("max_new_tokens"))
        settings.update(max_len_a=0.0, max_len_b=steps, max_len_cap=steps)
    elif given("max_length") is not None:  # Hugging Face counts the decoder's start token
        steps = int(given("max_length")) - 1
        settings.update(max_len_a=0.0, max_len_b=steps, max_len_cap=steps)
    if given("min_new_tokens") is not None:
        settings["min_len_b"] = int(given("min_new_tokens"))
    elif int(given("min_length", 0)) > 1:
        settings["min_len_b"] = int(given("min_length")) - 1
    ignored = [
        f"{key}={given(key)!r}"
        for key, default in (("do_sample", False), ("num_return_sequences", 1))
        if given(key, default) != default
    ]
    if early == "never":
        ignored.append("early_stopping='never' (decoded as false)")
    if ignored:
        log.warning("the generation config's %s: not carried over", ", ".join(ignored))
    return DecodeConfig(**settings)
