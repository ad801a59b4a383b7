"""Import an M2M-100 model (NLLB-200, M2M-100) or an mBART-50 one in the Hugging Face layout as an
nmt checkpoint.

M2M-100 (model_type "m2m_100", fairseq's many-to-many Transformer, which NLLB-200 shares) differs
from Marian (`nmt.pretrained.marian`) in ways that are each an option of nmt's Transformer: pre-norm
layers with a LayerNorm after each side's last one (`Norm.pre`), fairseq's sinusoids
(`Positions.sinusoidal_fairseq`), ReLU, one table tied to the output with no logits bias. Its
languages are pieces of the vocabulary ("deu_Latn" in NLLB, "__de__" in M2M-100): the source's
code goes before the source, `[src_lang] X </s>` (transformers' non-legacy NLLB form), and
decoding starts from </s> with the target's code forced as the first piece
(forced_bos_token_id), scored 0 — `DataConfig.language_codes`, `TargetTags`.

What the directory holds and what becomes of it:

    config.json              -> the TransformerConfig (refused by name what nmt lacks)
    model.safetensors        -> the weights, renamed (`convert_weights`), one tensor at a time
    sentencepiece.bpe.model  copied: it cuts text into pieces for both sides
    tokenizer.json (NLLB)    -> pieces.m2m.json: every piece by its Hugging Face id, nmt's
    or vocab.json (M2M-100)     specials first, and the ids decoding leaves out (codes, <mask>)
    tokenizer_config.json    -> the default languages (src_lang, tgt_lang)
    generation_config.json   -> the decode settings (`authors_decode`)

Ids: Hugging Face's fairseq specials are <s> <pad> </s> <unk> = 0..3, the sentencepiece pieces
after them (id = sentencepiece id + 1), then the language codes (and <mask>, and M2M-100's made-up
words). nmt's table holds, in nmt's order, the rows of <pad>, <unk>, </s> (BOS: decoding starts
from </s>), </s> (EOS), then every other id in Hugging Face's order; BOS's output is `BLOCKED`,
as in a Marian import.

mBART-50 (model_type "mbart", `MBart50Tokenizer`) is the same machinery with three options more:
learned positions (`Positions.learned`, the table from row `MBART_OFFSET` on), a LayerNorm on
each side's embeddings (`embed_norm`, its layernorm_embedding) and GELU; its codes are "de_DE",
"en_XX".
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from nmt.checkpoint import save_checkpoint
from nmt.config import DataConfig, Norm, Positions, TransformerConfig
from nmt.errors import NMTError
from nmt.pretrained.marian import (
    NOT_DATA,
    authors_decode,
    bart_shape,
    convert_weights,
    describe,
    locate,
    read_json,
    read_weights,
    trimmed,
    write_options,
)
from nmt.pretrained.trimming import pieces_used, trim
from nmt.run_config import TrainRunConfig
from nmt.tokenizer import BOS, M2M_FILES, SPECIAL_PIECES, load_vocabs

log = logging.getLogger(__name__)

# a language code among the added tokens: NLLB's FLORES-200 codes, M2M-100's "__xx__"
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")
M2M_CODE = re.compile(r"__([a-z]{2,3})__")
MBART_CODE = re.compile(r"[a-z]{2}_[A-Z]{2}")  # mBART-50's "de_DE", "en_XX"
MBART_OFFSET = 2  # mBART's learned positions start at row 2 (fairseq's padding_idx + 1)
# the languages of M2M-100 (language_codes "m2m100"), in the order of their ids, which follow
# vocab.json's pieces: M2M100Tokenizer has them in code, not in the model's files
M2M100_LANGUAGES = (
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy",
    "da", "de", "el", "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu",
    "ha", "he", "hi", "hr", "ht", "hu", "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka",
    "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg", "mk", "ml", "mn", "mr",
    "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd",
    "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr",
    "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu",
)  # fmt: skip


def import_m2m100(
    source: str,
    out: Path,
    directory: Path | None = None,
    keep_text: Sequence[str] = (),
    add_languages: dict[str, str] | None = None,
) -> Path:
    """Write the M2M-100 / NLLB-200 model `source` (a directory, or a hub id; `directory`:
    where it was fetched to) as the new nmt checkpoint directory `out`; returns `out`. With
    `keep_text` (files), only the pieces those texts need are kept (`nmt.pretrained.trimming`);
    `add_languages` adds codes the model lacks (`add_codes`)."""
    out = Path(out)
    if out.exists():
        raise NMTError(f"out={out} exists: choose a new directory")
    directory = directory or locate(source)
    hf = read_json(directory / "config.json")
    model = model_config(hf)
    generation = read_json(directory / "generation_config.json", missing_ok=True)
    tokenizer = read_json(directory / "tokenizer_config.json", missing_ok=True)
    mbart = hf.get("model_type") == "mbart"
    tokenizer_class = tokenizer.get("tokenizer_class", "MBart50Tokenizer").removesuffix("Fast")
    if mbart and tokenizer_class != "MBart50Tokenizer":
        raise NMTError(
            f"tokenizer_class={tokenizer['tokenizer_class']}: nmt imports mBART-50 (codes before "
            "the source), not mBART-cc25's layout (codes after it, decoding started by the code)"
        )
    spm = directory / M2M_FILES["spm"]
    if not spm.is_file():
        raise NMTError(f"{directory} has no {spm.name}: its tokenizer cannot be read")
    hf_ids, codes = hf_vocabulary(directory, tokenizer, hf["vocab_size"], mbart)
    order, pieces, hidden = id_order(hf_ids, hf, codes)
    if keep_text:
        order, pieces, hidden = trim(order, pieces, hidden, pieces_used([spm], keep_text))
    weights = read_weights(directory)
    extra = mbart_embeddings(weights) if mbart else {}
    state = {**convert_weights(weights, hf, order, [BOS], final_norms=True), **extra}
    del weights
    if add_languages:
        pieces, hidden, codes = add_codes(state, pieces, hidden, codes, add_languages)

    staging = out.parent / f".{out.name}.import-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        shutil.copy2(spm, staging / M2M_FILES["spm"])
        listed = {"pieces": pieces, "hidden": hidden}
        (staging / M2M_FILES["pieces"]).write_text(json.dumps(listed, ensure_ascii=False))
        vocabs = load_vocabs(staging)
        src_lang, tgt_lang = default_languages(tokenizer, codes)
        data = DataConfig(name=f"imported {source}", src_lang=src_lang, tgt_lang=tgt_lang,
                          local_dir=NOT_DATA, language_codes=codes)  # fmt: skip
        decode = authors_decode(generation, hf, model.max_positions)
        cfg = TrainRunConfig(data=data, model=model, decode=decode, run_dir=".")
        kind = hf.get("model_type", "m2m_100")
        imported = {"from": source, "format": kind, **trimmed(keep_text, hf, pieces)}
        if add_languages:
            imported["added_languages"] = dict(add_languages)
        payload = {"model": state, "imported": imported}
        step_dir = save_checkpoint(staging, 0, payload, cfg, vocabs)
        write_options(model, cfg.decode, step_dir)
        os.rename(step_dir, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("imported %s: %d pieces, %d languages, %s", source, len(pieces), len(codes),
             describe(model))  # fmt: skip
    return out


def add_codes(
    state: dict[str, Tensor],
    pieces: list[str],
    hidden: list[int],
    codes: dict[str, str],
    wanted: dict[str, str],
) -> tuple[list[str], list[int], dict[str, str]]:
    """Append a language code for each key of `wanted` ({"xho_Latn": "mean", "gsw_Latn":
    "deu_Latn"}) to the table (`state`'s shared embedding, changed in place) and to the piece
    list, hidden ids and codes: so that fine-tuning can teach the model a language it lacks. The
    new row is the mean of the existing codes' rows ("mean"), or a copy of the row of the code
    given (a related language: the model then translates from or into the new code as from or
    into that one, until trained). An M2M-100 code "__xx__" is the language "xx", as M2M-100's
    own are."""
    table = state["encoder.embed.table.weight"]
    row_of = {piece: i for i, piece in enumerate(pieces)}
    rows = [row_of[piece] for piece in codes.values()]
    new_rows, by_piece = [], {piece: lang for lang, piece in codes.items()}
    for code, like in wanted.items():
        found = M2M_CODE.fullmatch(code)
        lang = found.group(1) if found else code
        if not (NLLB_CODE.fullmatch(code) or found):
            raise NMTError(
                f"add_languages: {code!r} is not a language code such as xho_Latn (NLLB-200) "
                "or __xh__ (M2M-100)"
            )
        if lang in codes or code in by_piece:
            raise NMTError(f"add_languages: the model has {code} already")
        if like == "mean":
            new_rows.append(table[rows].mean(0))
        else:
            piece = codes.get(like, like)
            if piece not in by_piece or piece not in row_of:
                raise NMTError(
                    f"add_languages.{code}={like}: the model has no code {like!r} (give one of "
                    "its codes, or mean)"
                )
            new_rows.append(table[row_of[piece]])
        codes[lang] = code
        by_piece[code] = lang
        hidden.append(len(pieces))
        pieces.append(code)
    grown = torch.cat([table, torch.stack(new_rows)])
    state["encoder.embed.table.weight"] = state["decoder.embed.table.weight"] = grown
    state["decoder.out.bias"] = torch.cat(
        [state["decoder.out.bias"], table.new_zeros(len(new_rows))]
    )
    log.info("add_languages: %s", ", ".join(f"{c} (from {f})" for c, f in wanted.items()))
    return pieces, hidden, codes


def mbart_embeddings(weights: dict) -> dict[str, Tensor]:
    """mBART's learned positions (rows from `MBART_OFFSET` on) and layernorm_embedding, per
    side, as nmt's `Embedding` names them; taken out of `weights`."""

    def take(key: str) -> Tensor:
        for name in (f"model.{key}", key):
            if name in weights:
                return weights.pop(name).to(torch.float32, copy=True).contiguous()
        raise NMTError(f"the weights have no {key}: not an mBART model's")

    state = {}
    for side in ("encoder", "decoder"):
        state[f"{side}.embed.learned.weight"] = take(f"{side}.embed_positions.weight")[
            MBART_OFFSET:
        ].contiguous()
        for part in ("weight", "bias"):
            state[f"{side}.embed.norm.{part}"] = take(f"{side}.layernorm_embedding.{part}")
    return state


def model_config(hf: dict) -> TransformerConfig:
    """nmt's Transformer for an M2M-100 or mBART-50 config.json; what it cannot be is refused by
    name. mBART differs in learned positions, a LayerNorm on the embeddings and GELU."""
    mbart = hf.get("model_type") == "mbart"
    refused, shape = bart_shape(hf, "gelu" if mbart else "relu")
    if not hf.get("tie_word_embeddings", True):
        refused.append("tie_word_embeddings=false (an output layer of its own)")
    if hf.get("decoder_start_token_id", hf["eos_token_id"]) != hf["eos_token_id"]:
        refused.append("decoder_start_token_id differs from eos_token_id")
    if hf.get("pad_token_id") != 1:
        refused.append(f"pad_token_id={hf.get('pad_token_id')} (fairseq's positions need 1)")
    if hf.get("num_experts") or hf.get("encoder_sparse_step"):
        refused.append("mixture-of-experts layers (NLLB-MoE)")
    if mbart and not hf.get("normalize_before", True):
        refused.append("normalize_before=false (post-norm layers)")
    if refused:
        name = "mBART" if mbart else "M2M-100"
        raise NMTError(f"this {name} model has what nmt's Transformer lacks: " + "; ".join(refused))
    return TransformerConfig(
        **shape,
        norm=Norm.pre,
        positions=Positions.learned if mbart else Positions.sinusoidal_fairseq,
        max_positions=hf.get("max_position_embeddings", 1024),
        # the configs' own defaults: MBartConfig False, M2M100Config True
        scale_embeddings=bool(hf.get("scale_embedding", not mbart)),
        embed_norm=mbart,
        share_embeddings=True,
        tie_output=True,
    )


def hf_vocabulary(
    directory: Path, tokenizer: dict, size: int, mbart: bool = False
) -> tuple[dict[int, str], dict[str, str]]:
    """Every Hugging Face id's piece, and language -> code piece. From tokenizer.json (NLLB,
    mBART-50: its model's vocabulary and its added tokens), else vocab.json with M2M-100's codes
    after it."""
    fast = directory / "tokenizer.json"
    if fast.is_file():
        table = read_json(fast)
        vocab = table.get("model", {}).get("vocab")
        if isinstance(vocab, list):  # a unigram model: [piece, score] by id
            vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
        if not isinstance(vocab, dict):
            raise NMTError(f"{fast} has no vocabulary nmt can read")
        pieces = {i: p for p, i in vocab.items()}
        pieces.update({t["id"]: t["content"] for t in table.get("added_tokens", [])})
    elif mbart:
        raise NMTError(
            f"{directory} has no tokenizer.json: save the mBART-50 tokenizer with transformers' "
            "fast tokenizer (its save_pretrained writes tokenizer.json)"
        )
    elif (directory / "vocab.json").is_file():
        vocab = read_json(directory / "vocab.json")
        pieces = {i: p for p, i in vocab.items()}
        if tokenizer.get("language_codes", "m2m100") != "m2m100":
            raise NMTError(f"language_codes={tokenizer['language_codes']!r}: nmt knows m2m100's")
        start = len(vocab)
        pieces.update({start + k: f"__{lang}__" for k, lang in enumerate(M2M100_LANGUAGES)})
        madeup = start + len(M2M100_LANGUAGES)
        pieces.update({madeup + k: f"madeupword{k}" for k in range(size - madeup)})
    else:
        raise NMTError(f"{directory} has neither tokenizer.json nor vocab.json")
    if sorted(pieces) != list(range(size)):
        raise NMTError(f"the tokenizer's ids do not give config.json's vocab_size={size} pieces")
    codes = {}
    for i in sorted(pieces):
        piece = pieces[i]
        if mbart:
            if MBART_CODE.fullmatch(piece):
                codes[piece] = piece
        elif NLLB_CODE.fullmatch(piece):
            codes[piece] = piece
        elif M2M_CODE.fullmatch(piece):
            codes[M2M_CODE.fullmatch(piece).group(1)] = piece
    if not codes:
        raise NMTError(
            f"{directory}: the tokenizer names no language code (deu_Latn, __de__, de_DE)"
        )
    return pieces, codes


def id_order(
    pieces: dict[int, str], hf: dict, codes: dict[str, str]
) -> tuple[list[int], list[str], list[int]]:
    """Per nmt id, the Hugging Face id whose row it takes; per nmt id, its piece; and the nmt ids
    decoding leaves out (the codes, <s>, <mask>, made-up words: every added special)."""
    pad, eos = hf["pad_token_id"], hf["eos_token_id"]
    unk = next((i for i, p in pieces.items() if p == "<unk>"), None)
    if unk is None:
        raise NMTError("the tokenizer has no <unk>")
    order = [pad, unk, eos, eos] + [i for i in sorted(pieces) if i not in (pad, unk, eos)]
    names = list(SPECIAL_PIECES) + [pieces[i] for i in order[len(SPECIAL_PIECES) :]]
    special = set(codes.values()) | {"<s>", "<mask>"}
    hidden = [ours for ours, name in enumerate(names) if ours > BOS + 1 and
              (name in special or name.startswith("madeupword"))]  # fmt: skip
    return order, names, hidden


def default_languages(tokenizer: dict, codes: dict[str, str]) -> tuple[str, str]:
    """The languages the commands use when none is given: the tokenizer's src_lang / tgt_lang,
    else English (eng_Latn or en) where the model has it, else its first language."""
    english = next((c for c in ("eng_Latn", "en", "en_XX") if c in codes), next(iter(codes)))
    pick = [tokenizer.get("src_lang"), tokenizer.get("tgt_lang")]
    return tuple(lang if lang in codes else english for lang in pick)  # type: ignore[return-value]
