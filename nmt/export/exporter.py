"""`nmt-export`: a checkpoint as files another runtime can load.

- `format=onnx`: `encoder.onnx` and `decoder_step.onnx` (`nmt/export/graphs/`), for onnxruntime;
- `format=torchscript`: `encoder.pt` and `decoder_step.pt` (torch.jit.trace of the same graphs);
- `format=ctranslate2`: a CTranslate2 model directory (Transformer only,
  `nmt/export/ct2.py`).

Every export directory also holds the sentencepiece model(s), `manifest.json` (model family,
graph inputs and outputs with their shapes, special ids and pieces, the decoding limits the
checkpoint validated with) and a README on how to run it. The directory is written under a
temporary name and renamed when complete, so a failed export leaves nothing behind. After an
ONNX or TorchScript export the graphs are run once on inputs of other sizes than those traced and
compared with the PyTorch model, so a graph that does not generalise fails here, not in use.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.config import CodeStyle
from nmt.data.languages import spelled_code
from nmt.errors import NMTError
from nmt.export.graphs import Graphs, TensorSpec, export_graphs
from nmt.export.runtime import MANIFEST
from nmt.models import restore_model
from nmt.run_config import ExportFormat, ExportRunConfig, flatten
from nmt.tokenizer import BOS, EOS, M2M_FILES, PAD, T5_FILES, UNK, MarianVocab, Vocabs

GRAPH_FILES = {
    ExportFormat.onnx: ("encoder.onnx", "decoder_step.onnx"),
    ExportFormat.torchscript: ("encoder.pt", "decoder_step.pt"),
}
EXPORT_VERSION = 1
log = logging.getLogger(__name__)


def export_main(cfg: ExportRunConfig) -> None:
    ckpt = load_checkpoint(cfg.ckpt)
    out = export_checkpoint(ckpt, cfg.format, Path(cfg.out), cfg.overwrite, cfg.quantization)
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    log.info("exported %s as %s to %s: %s", ckpt.path, cfg.format.value, out, files)


def export_checkpoint(
    ckpt: Checkpoint,
    fmt: ExportFormat,
    out: Path,
    overwrite: bool = False,
    quantization: str | None = None,
) -> Path:
    """Write the export of `ckpt` to `out` (a new directory, or replaced with `overwrite`);
    `quantization` is CTranslate2's weight type (None: float32)."""
    if fmt == ExportFormat.ctranslate2:
        from nmt.export.ct2 import check_convertible

        check_convertible(ckpt.config.model)  # refuse before anything is written
    if out.exists() and not overwrite:
        raise NMTError(f"{out} exists; choose another out=DIR or pass overwrite=true")
    if out.exists() and not (
        out.is_dir() and (not any(out.iterdir()) or (out / MANIFEST).is_file())
    ):
        # overwrite replaces an earlier export, never a checkpoint or some other directory
        raise NMTError(f"{out} is not an nmt export (no {MANIFEST}): refusing to replace it")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        if fmt == ExportFormat.ctranslate2:
            from nmt.export.ct2 import write_ctranslate2

            manifest = write_ctranslate2(ckpt, tmp, quantization)
        else:
            tmp.mkdir()
            manifest = write_graphs(ckpt, fmt, tmp)
        for path in ckpt.vocabs.files():
            shutil.copy2(path, tmp / path.name)
        manifest = _common_manifest(ckpt, fmt) | manifest
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(readme(fmt, manifest), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _common_manifest(ckpt: Checkpoint, fmt: ExportFormat) -> dict:
    vocabs: Vocabs = ckpt.vocabs
    ids = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
    decode = ckpt.config.decode
    return {
        "nmt_export": EXPORT_VERSION,
        "format": fmt.value,
        "family": ckpt.config.model.arch,
        "model": flatten(ckpt.config.model),
        "checkpoint": {"path": str(ckpt.path), "step": ckpt.payload.get("step")},
        "tokenizer": {
            "src": vocabs.src.path.name,
            "tgt": vocabs.tgt.path.name,
            "joint": vocabs.joint,
            # "marian": an imported Marian tokenizer (`MarianVocab`), whose *_pieces is its list;
            # "m2m": an NLLB-200 / M2M-100 / mBART-50 one, whose pieces file also lists the codes;
            # "t5": a T5-family one (spiece.model, pieces.t5.json: codes and sentinels hidden)
            "kind": _tokenizer_kind(vocabs),
            # pruned sides: id i is the sentencepiece id on line i of this file (id, tab, piece)
            "src_pieces": None if vocabs.src.kept_path is None else vocabs.src.kept_path.name,
            "tgt_pieces": None if vocabs.tgt.kept_path is None else vocabs.tgt.kept_path.name,
            "src_vocab_size": len(vocabs.src),
            "tgt_vocab_size": len(vocabs.tgt),
        },
        # target language -> the tag piece put before a source to ask for it ({lang: null}:
        # a model without target tags); the runtimes' tgt_lang reads it
        # (nmt.translation.inputs.TargetTags)
        "target_tags": ckpt.config.data.target_tags(),
        # a model with language codes: language -> code piece, and the sources' default language
        "language_codes": dict(ckpt.config.data.language_codes),
        # where the codes go: source_and_target (NLLB: the source's before it, the target's
        # forced first), target_on_source (MADLAD-400: the target's before the source)
        "code_style": ckpt.config.data.code_style.value,
        # target_on_source only: language -> the pieces its code is put before a source as
        **_code_pieces(ckpt),
        "src_lang": ckpt.config.data.src_lang,
        "special_ids": ids,
        "special_pieces": {k: vocabs.tgt.id_to_piece([i])[0] for k, i in ids.items()},
        "source": "sentencepiece ids of the text (mapped through src_pieces if set), then EOS",
        "target": "decoding starts from BOS and stops at EOS",
        # the limits the checkpoint validated with: nmt.export.runtime's defaults
        "decode": {
            k: getattr(decode, k)
            for k in (
                "max_len_a",
                "max_len_b",
                "max_len_cap",
                "min_len_a",
                "min_len_b",
                "batch_size",
                "max_src_pieces",
            )
        },  # fmt: skip
    }


def _code_pieces(ckpt: Checkpoint) -> dict[str, dict[str, list[str]]]:
    """{"code_pieces": a target_on_source model's languages -> the pieces of their code before a
    source, as `nmt.translation.inputs.TargetTags` puts them ("▁", "<2de>")}; {} for others."""
    data = ckpt.config.data
    if not data.language_codes or data.code_style != CodeStyle.target_on_source:
        return {}
    vocab = ckpt.vocabs.src
    spelled = {
        lang: vocab.id_to_piece(spelled_code(vocab, piece, vocab.piece_to_id(piece)))
        for lang, piece in data.language_codes.items()
    }
    return {"code_pieces": spelled}


def _target_on_source(manifest: dict) -> tuple[str, list[str]] | None:
    """(a target language, the pieces of its code) of a target_on_source export, else None."""
    spelled = manifest.get("code_pieces")
    if not manifest.get("language_codes") or not spelled:
        return None
    lang = next(iter(manifest.get("target_tags") or {}), None)
    lang = lang if lang in spelled else next(iter(spelled))
    return lang, spelled[lang]


def _tokenize_note(manifest: dict) -> str:
    tok = manifest["tokenizer"]
    if not tok.get("src_pieces"):
        return f"Tokenize with its {tok['src']}.\n"
    return (
        f"Tokenize with its {tok['src']} and map the pieces through {tok['src_pieces']} "
        "(nmt.tokenizer.load_vocabs(DIR)).\n"
    )


def _codes_note(manifest: dict) -> str:
    """How a CTranslate2 export of a model with language codes is called (none for others)."""
    codes = manifest.get("language_codes")
    if not codes:
        return ""
    target = _target_on_source(manifest)
    if target is not None:  # MADLAD-400: the target's code first on the source, nothing forced
        lang, pieces = target
        return (
            "\nThis model reads the target language's code first on the source, in the pieces "
            "its sentencepiece model cuts the code into at the start of a text (`code_pieces` in "
            f"the manifest: {pieces} for {lang}), and nothing is forced on the target: "
            f"`translator.translate_batch([[{', '.join(map(repr, pieces))}, *pieces[0]]])`, "
            "without target_prefix; the output has no code. nmt.export.ct2.CT2Translator does "
            f"it: `CT2Translator(DIR).translate(texts, tgt_lang='{lang}')`, languages as the "
            "manifest's `language_codes` names them. " + _tokenize_note(manifest)
        )
    src = _source_code(manifest)
    return (
        "\nThis model reads the source's language code before its pieces and starts each "
        "translation with the target's (`language_codes` in the manifest; nmt.export.ct2."
        f"CT2Translator does both): `translator.translate_batch([['{src}', *pieces[0]]], "
        "target_prefix=[[TARGET_CODE]])`, and the code is the first piece of the output. "
        + _tokenize_note(manifest)
    )


def _tokenizer_kind(vocabs: Vocabs) -> str:
    if vocabs.src.kept_path is not None and vocabs.src.kept_path.name == M2M_FILES["pieces"]:
        return "m2m"
    if vocabs.src.kept_path is not None and vocabs.src.kept_path.name == T5_FILES["pieces"]:
        return "t5"
    return "marian" if isinstance(vocabs.src, MarianVocab) else "sentencepiece"


# ---- ONNX and TorchScript -----------------------------------------------------------------------


def write_graphs(ckpt: Checkpoint, fmt: ExportFormat, out: Path) -> dict:
    """Trace the encoder and decoder-step graphs of the checkpoint's model into `out`."""
    graphs = export_graphs(restore_model(ckpt, torch.device("cpu")))
    enc_file, step_file = GRAPH_FILES[fmt]
    enc_args, step_args = graphs.example_inputs()
    spec = graphs.spec
    jobs = [
        (graphs.encoder, enc_args, spec.encoder_inputs, spec.encoder_outputs, out / enc_file),
        (graphs.step, step_args, spec.step_inputs, spec.step_outputs, out / step_file),
    ]
    for module, args, inputs, outputs, path in jobs:
        if fmt == ExportFormat.onnx:
            _export_onnx(module, args, inputs, outputs, path)
        else:
            _export_torchscript(module, args, path)
    _verify(graphs, out, fmt, (enc_file, step_file))
    manifest = spec.to_json()
    manifest["encoder"]["file"], manifest["decoder_step"]["file"] = enc_file, step_file
    return manifest


def _export_onnx(
    module: torch.nn.Module,
    args: tuple,
    inputs: list[TensorSpec],
    outputs: list[TensorSpec],
    path: Path,
) -> None:
    try:
        import onnx  # noqa: F401 - the exporter needs it, and onnxscript
        import onnxscript  # noqa: F401
    except ImportError as err:
        raise NMTError(
            "format=onnx needs onnx and onnxscript: pip install onnx onnxscript"
        ) from err
    dynamic = torch.export.Dim.DYNAMIC
    shapes = tuple(
        {axis: dynamic for axis, size in enumerate(t.shape) if isinstance(size, str)} or None
        for t in inputs
    )
    params = inspect.signature(module.forward).parameters.values()
    if any(p.kind == p.VAR_POSITIONAL for p in params):  # forward(prev, *state): nest as called
        fixed = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in params)
        shapes = (*shapes[:fixed], shapes[fixed:])
    # torch.onnx swaps in a while_loop GRU/LSTM decomposition for variable lengths, but the op's
    # dispatch cache keeps the kernel of an earlier trace: a second RNN export in one process then
    # fixes the source length ("inferred a static shape"). Start every export from a clean cache.
    for op in (torch.ops.aten.gru.input, torch.ops.aten.lstm.input):
        getattr(op, "_dispatch_cache", {}).clear()
    with warnings.catch_warnings(), _quiet():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            dynamic_shapes=shapes,
            input_names=[t.name for t in inputs],
            output_names=[t.name for t in outputs],
            verbose=False,
        )
    program.save(str(path), external_data=False)


def _export_torchscript(module: torch.nn.Module, args: tuple, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module, args, check_trace=False)
    traced.save(str(path))


class _quiet:
    """Silence the exporter's progress lines on stdout and its warnings about optional packages
    it does not need here (torchvision) on stderr."""

    LOGGER = "torch.onnx._internal.exporter._registration"

    def __enter__(self) -> None:
        self.saved = sys.stdout
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - closed in __exit__
        self.logger = logging.getLogger(self.LOGGER)
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        sys.stdout.close()
        sys.stdout = self.saved
        self.logger.setLevel(self.level)


def _verify(graphs: Graphs, out: Path, fmt: ExportFormat, files: tuple[str, str]) -> None:
    """Run the exported graphs on a batch of 3 sources of lengths 5, 4, 2 for two steps (the
    first with empty caches) and compare with the PyTorch graphs (atol 1e-4)."""
    from nmt.export.runtime import OnnxSession, TorchScriptSession

    manifest = graphs.spec.to_json()
    manifest["encoder"]["file"], manifest["decoder_step"]["file"] = files
    session_type = OnnxSession if fmt == ExportFormat.onnx else TorchScriptSession
    session = session_type(out, manifest, threads=1)
    lens = np.array([5, 4, 2], dtype=np.int64)
    src = np.full((3, 5), PAD, dtype=np.int64)
    for row, n in enumerate(lens.tolist()):
        src[row, : n - 1] = np.arange(4, 3 + n)
        src[row, n - 1] = EOS
    inputs = {"src": src, "src_lens": lens}
    expected = graphs.run("encoder", inputs)
    _compare("encoder", expected, session.run("encoder", inputs))
    values = dict(expected)
    prev = np.full(3, BOS, dtype=np.int64)
    for step in range(2):
        expected = graphs.run("decoder_step", {"prev": prev, **values})
        got = session.run("decoder_step", {"prev": prev, **values})
        _compare(f"decoder step {step}", expected, got)
        values.update({old: expected[new] for new, old in graphs.spec.state.items()})
        prev = expected["log_probs"].argmax(-1)


def _compare(what: str, expected: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> None:
    for name, value in expected.items():
        other = got[name]
        if other.shape != value.shape or not np.allclose(other, value, atol=1e-4, rtol=1e-4):
            raise NMTError(
                f"the exported {what} graph disagrees with the model on {name!r} "
                f"(shape {other.shape} vs {value.shape}): please report this"
            )


def _source_code(manifest: dict) -> str:
    """The code of the manifest's default source language (its first code without one)."""
    codes = manifest["language_codes"]
    return codes.get(manifest.get("src_lang"), next(iter(codes.values())))


def _graphs_codes_note(manifest: dict) -> str:
    """How the graphs of a model with language codes are fed (none for others)."""
    codes = manifest.get("language_codes")
    if not codes:
        return ""
    target = _target_on_source(manifest)
    if target is not None:  # MADLAD-400: the target's code first on the source, nothing forced
        lang, pieces = target
        return (
            "\nThis model reads the target language's code first on the source, in the pieces "
            "its sentencepiece model cuts the code into at the start of a text (`code_pieces` in "
            f"the manifest: {pieces} for {lang}), and nothing is forced on the target "
            f"(ExportedTranslator does it: `ExportedTranslator(DIR).translate(texts, "
            f"tgt_lang='{lang}')`, languages as the manifest's `language_codes` names them). By "
            "hand: `src` is the ids of those pieces, then the text's pieces and EOS; the first "
            "step is fed BOS and the model chooses every output.\n"
        )
    return (
        "\nThis model reads the source's language code before its pieces and starts each "
        "translation with the target's (`language_codes` in the manifest; ExportedTranslator "
        f"does both: `ExportedTranslator(DIR, src_lang='{manifest.get('src_lang')}')."
        "translate(texts, tgt_lang=...)`, languages as the manifest names them). By hand: "
        f"`src` is the id of `{_source_code(manifest)}`, then the pieces and EOS; the first step "
        "is fed BOS and the target code is forced as the first output, before the model "
        "chooses.\n"
    )


# ---- the README of an export directory ----------------------------------------------------------


def readme(fmt: ExportFormat, manifest: dict) -> str:
    tok = manifest["tokenizer"]
    head = (
        f"# nmt export ({fmt.value}, {manifest['family']})\n\n"
        f"Exported from `{manifest['checkpoint']['path']}` by `nmt-export`; DIR below is this "
        "directory. Source tokenizer "
        f"`{tok['src']}`, target tokenizer `{tok['tgt']}` (sentencepiece). `{MANIFEST}` lists "
        "the model settings and special ids"
        + ("" if fmt == ExportFormat.ctranslate2 else ", and every graph input and output")
        + ". See docs/export.md in the nmt repository.\n\n"
    )
    if fmt == ExportFormat.ctranslate2:
        return head + (
            "Run it with CTranslate2 (`pip install ctranslate2 sentencepiece`):\n\n"
            "```python\nimport ctranslate2, sentencepiece as spm\n"
            "translator = ctranslate2.Translator(DIR, device='cpu')\n"
            f"sp_src = spm.SentencePieceProcessor(model_file=DIR + '/{tok['src']}')\n"
            f"sp_tgt = spm.SentencePieceProcessor(model_file=DIR + '/{tok['tgt']}')\n"
            "pieces = sp_src.encode(['Ein Hund läuft.'], out_type=str)  # EOS is added by CT2\n"
            "result = translator.translate_batch(pieces, beam_size=5, min_decoding_length=0)\n"
            "print(sp_tgt.decode(result[0].hypotheses[0]))\n```\n\n"
            "The translate_batch options that search exactly as nmt does (length penalty, length "
            "limits) are in docs/export.md (nmt.export.ct2.decode_options).\n"
            + _codes_note(manifest)
        )
    return head + (
        "Greedy translation with onnxruntime (or TorchScript) and numpy, no model code:\n\n"
        "```python\nfrom nmt.export.runtime import ExportedTranslator\n"
        "print(ExportedTranslator(DIR).translate(['Ein Hund läuft.']))\n```\n\n"
        "By hand: run the encoder graph on `src` (B, S) int64 ids ending in EOS, 0-padded (and "
        "`src_lens` (B,) for the recurrent family); then call the decoder-step graph with `prev` "
        "(B,) = BOS, the encoder outputs listed under `memory` and the state (initially the "
        "encoder outputs named in `state`); each step returns `log_probs` (B, V) and the new "
        "state (`new_*` outputs become the next step's inputs). Stop a row at EOS. Where the "
        "manifest names `src_pieces` / `tgt_pieces`, the vocabulary is pruned: model id i is "
        "the sentencepiece id on line i of that file.\n" + _graphs_codes_note(manifest)
    )
