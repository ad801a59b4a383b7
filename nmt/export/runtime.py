"""Greedy decoding of an exported model (`nmt-export format=onnx|torchscript`) without nmt's
model code: the encoder and decoder-step graphs, the sentencepiece model(s) and `manifest.json`.

The loop is the one of `nmt.translation.search.greedy`: BOS first, the most probable token each
step, EOS blocked before the minimum length, a sentence stops at EOS or at its length limit and
leaves the batch at once. It talks to the graphs only through the manifest: the encoder's outputs
named in `memory` go to every step unchanged, the step outputs named in `state` come back as the
next step's inputs, and each tensor's `batch_axis` says how to drop finished sentences.

    from nmt.export.runtime import ExportedTranslator
    translator = ExportedTranslator("runs/export")   # onnxruntime (or TorchScript) and numpy
    translator.translate(["Ein Hund läuft."])

This module needs numpy, sentencepiece and onnxruntime (TorchScript: torch), not the model code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.config import CodeStyle, DecodeConfig, Precision, Strategy
from nmt.errors import NMTError
from nmt.tokenizer import BOS, EOS, PAD, MarianVocab, Vocab, Vocabs, clean, load_vocabs
from nmt.translation.inputs import Sources, TargetTags, length_batches, prefix_ids
from nmt.translation.request import Request, prepare

MANIFEST = "manifest.json"


@dataclass
class Decoded:
    tokens: list[int]  # target ids without BOS and EOS
    score: float  # sum of the log-probabilities of the tokens (and of EOS when it ended)
    ended: bool  # produced EOS (False: stopped at the length limit)


def read_manifest(directory: str | Path) -> dict:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise NMTError(f"{directory} is not an nmt export (no {MANIFEST} in it)")
    return json.loads(path.read_text(encoding="utf-8"))


class OnnxSession:
    """Both graphs on onnxruntime's CPU provider; `threads` = 0 lets onnxruntime choose."""

    def __init__(self, directory: Path, manifest: dict, threads: int = 0) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise NMTError(
                "running ONNX graphs needs onnxruntime: pip install onnxruntime"
            ) from err
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # no shape-inference warnings on variable axes
        self.sessions = {
            graph: ort.InferenceSession(
                str(directory / manifest[graph]["file"]), options, ["CPUExecutionProvider"]
            )
            for graph in ("encoder", "decoder_step")
        }

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self.sessions[graph]
        names = [o.name for o in session.get_outputs()]
        feed = {i.name: inputs[i.name] for i in session.get_inputs()}
        return dict(zip(names, session.run(names, feed)))


class TorchScriptSession:
    """Both graphs as TorchScript modules (torch.jit.load), inputs in manifest order."""

    def __init__(self, directory: Path, manifest: dict, threads: int = 0) -> None:
        import torch

        self.torch = torch
        if threads:
            torch.set_num_threads(threads)
        self.manifest = manifest
        self.modules = {
            graph: torch.jit.load(str(directory / manifest[graph]["file"]), map_location="cpu")
            for graph in ("encoder", "decoder_step")
        }

    def run(self, graph: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        spec = self.manifest[graph]
        args = [self.torch.from_numpy(inputs[t["name"]]) for t in spec["inputs"]]
        with self.torch.inference_mode():
            out = self.modules[graph](*args)
        return {t["name"]: o.numpy() for t, o in zip(spec["outputs"], out)}


class ExportedTranslator:
    """Greedy translation with the exported graphs. `decode` gives the batch size, the length
    limits (max_len_a/b/cap, min_len_a/b), max_src_pieces and the forced `prefix`; by default
    those the checkpoint validated with (stored in the manifest; no prefix). Other search
    settings are refused (`check_greedy`, `check_supported`)."""

    def __init__(
        self,
        directory: str | Path,
        decode: DecodeConfig | None = None,
        threads: int = 0,
        src_lang: str | None = None,
    ) -> None:
        """`src_lang`: the sources' language, for a model with language codes (an NLLB-200 or
        M2M-100 import: its code is put before each source; None: the manifest's src_lang)."""
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        kind = self.manifest.get("format")
        match kind:
            case "onnx":
                self.session: OnnxSession | TorchScriptSession = OnnxSession(
                    self.directory, self.manifest, threads
                )
            case "torchscript":
                self.session = TorchScriptSession(self.directory, self.manifest, threads)
            case _:
                raise NMTError(f"{directory}: format {kind!r} has no graphs to run here")
        self.decode = check_greedy(decode or DecodeConfig(**self.manifest["decode"]))
        self.vocabs = Vocabs(*manifest_vocabs(self.directory, self.manifest))
        self.src_vocab, self.tgt_vocab = self.vocabs.src, self.vocabs.tgt
        self.tags = manifest_tags(self.manifest, self.src_vocab, src_lang)

    def translate(
        self,
        texts: list[str],
        *,
        decode: DecodeConfig | None = None,
        first_line: int = 1,
        prefixes: list[str] | None = None,
        tgt_lang: str | None = None,
    ) -> list[str]:
        """The greedy translation of each text, read as `nmt.translation.Translator` reads it
        (`nmt.translation.request`, `nmt.translation.inputs`): blank texts give blank translations,
        and a source longer than decode.max_src_pieces is cut to its first pieces, with a warning
        logged. `decode` (default: the one given at construction) sets the limits and the batch
        size, and its `prefix` starts every translation; `prefixes` (one per text, "" for none) take
        its place, as the Translator's; `tgt_lang` puts the language's target tag before each source
        (the manifest's `target_tags`), or with language codes forces its code first (the
        source's code before each source), as the Translator does."""
        request = Request(
            texts, decode or self.decode, prefixes, tgt_lang=tgt_lang, first_line=first_line
        )
        check_supported(request, "exported graphs' greedy loop")
        check_greedy(request.settings)
        tag = self.tags.ids(tgt_lang, request.src_lang)
        prepared = prepare(request, self.vocabs, tag, code=self.tags.forced(tgt_lang))
        live = [text for text in prepared.texts if text.src]
        decoded = self.greedy([t.src for t in live], prepared.settings, [t.prefix for t in live])
        outputs = iter(self.tgt_vocab.decode([d.tokens for d in decoded]) if decoded else [])
        return [clean(next(outputs)) if text.src else "" for text in prepared.texts]

    def greedy(
        self,
        src_ids: list[list[int]],
        decode: DecodeConfig | None = None,
        prefixes: list[list[int]] | None = None,
    ) -> list[Decoded]:
        """Decode sources (ids ending in EOS) in length-sorted batches; results in input order.
        `prefixes` (target ids, one list per source) are forced; without them, `decode.prefix`
        is, tokenized and checked as `translate` does (an NMTError names the source)."""
        decode = check_greedy(decode or self.decode)
        if prefixes is None and decode.prefix:
            sources = Sources(src_ids, list(range(len(src_ids))), len(src_ids))
            wanted = [decode.prefix] * len(src_ids)
            prefixes = prefix_ids(self.tgt_vocab, wanted, sources, decode, 1, "source")
        return greedy(self.session, self.manifest, src_ids, decode, prefixes)


def check_supported(request: Request, runtime: str, rules: tuple[str, ...] = ()) -> None:
    """Raise NMTError naming what of `request` an exported `runtime` cannot honour: banned
    phrases, constraints, attention maps, search trees (no exported loop has them), and a step
    rule whose setting is not among `rules` (`DecodeConfig.step_rules`). The one place where
    every exported runtime refuses a request's options, so an option nmt's search gains is
    refused by name until a runtime learns it, never silently dropped."""
    refused = []
    if request.banned_phrases:
        refused.append(f"banned phrases ({', '.join(map(repr, request.banned_phrases))})"[:200])
    if any(segment.constraints for segment in request.segments):
        refused.append("constraints")
    if request.attention:
        refused.append("attention maps")
    if request.tree:
        refused.append("search trees")
    if request.settings.compile:
        refused.append("decode.compile=true (nmt's search compiles its own step)")
    refused += [
        f"decode.{key}={value}"
        for key, value in request.settings.step_rules().items()
        if key not in rules
    ]
    if refused:
        raise NMTError(
            f"the {runtime} does not support {', '.join(refused)}: translate with the "
            "checkpoint (nmt.translation.Translator, nmt-translate ckpt=DIR), or leave them out"
        )


def check_greedy(decode: DecodeConfig) -> DecodeConfig:
    """`decode`, if the exported graphs' greedy loop can honour its settings; else an NMTError
    naming the setting. The loop has no beam, sampling, n-best, shortlist or bf16: such a setting
    is refused rather than silently decoded greedily in fp32. (Banned phrases, constraints and
    step rules: `check_supported`.)"""
    unsupported = [
        (bool(decode.banned), f"decode.banned={decode.banned}"),
        (bool(decode.constraints), f"decode.constraints={decode.constraints}"),
        (decode.strategy != Strategy.greedy, f"decode={decode.strategy.value}"),
        (decode.n_best != 1, f"decode.n_best={decode.n_best}"),
        (decode.shortlist != 0, f"decode.shortlist={decode.shortlist}"),
        (decode.precision != Precision.fp32, f"decode.precision={decode.precision.value}"),
        (decode.compile, "decode.compile=true"),
        *((True, f"decode.{k}={v}") for k, v in decode.step_rules().items()),
    ]
    named = [name for bad, name in unsupported if bad]
    if named:
        raise NMTError(
            f"the exported graphs decode greedily in fp32: {', '.join(named)} is not supported "
            "here (translate with the checkpoint, or export format=ctranslate2 for beam search)"
        )
    return decode


def manifest_tags(manifest: dict, vocab: Vocab, src_lang: str | None = None) -> TargetTags:
    """The target languages of an export and their tags, as its checkpoint had them (an export
    written before the manifest named them: languages unknown, no tags); a model with language
    codes reads `src_lang`'s (None: the manifest's src_lang) before each source."""
    codes = manifest.get("language_codes")
    source = (src_lang or manifest.get("src_lang")) if codes else None
    style = CodeStyle(manifest.get("code_style", CodeStyle.source_and_target))
    return TargetTags(manifest.get("target_tags"), vocab, codes, source, style)


def manifest_vocabs(directory: Path, manifest: dict) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of an export directory, as its manifest names them
    (pruned ones through their `*_pieces` files)."""
    tokenizer = manifest["tokenizer"]
    if tokenizer.get("kind") in ("m2m", "t5"):  # one tokenizer and piece list for both sides
        both = load_vocabs(directory)
        return both.src, both.tgt
    vocabs = []
    for side in ("src", "tgt"):
        pieces = tokenizer.get(f"{side}_pieces")
        pieces = None if pieces is None else directory / pieces
        if tokenizer.get("kind") == "marian":
            vocabs.append(MarianVocab(directory / tokenizer[side], pieces))
        else:
            vocabs.append(Vocab(directory / tokenizer[side], pieces))
    return vocabs[0], vocabs[1]


def greedy(
    session,
    manifest: dict,
    src_ids: list[list[int]],
    decode: DecodeConfig,
    prefixes: list[list[int]] | None = None,
) -> list[Decoded]:
    """Greedy decoding of sources (ids ending in EOS) in length-sorted batches of
    `decode.batch_size`, results in input order. `session.run(graph, inputs) -> outputs` runs
    "encoder" or "decoder_step" on numpy arrays by name (`OnnxSession`, `TorchScriptSession`, or
    `nmt.export.graphs.Graphs` itself); `manifest` connects them. `prefixes` (target ids, one
    list per source) are forced as `nmt.translation.search` forces them; `decode.prefix` is text,
    which this loop cannot tokenize: `ExportedTranslator` turns it into `prefixes`."""
    results: list[Decoded] = [Decoded([], 0.0, False)] * len(src_ids)
    for index in length_batches([len(ids) for ids in src_ids], decode.batch_size):
        forced = None if prefixes is None else [prefixes[i] for i in index]
        batch = greedy_batch(session, manifest, [src_ids[i] for i in index], decode, forced)
        for i, result in zip(index, batch):
            results[i] = result
    return results


def greedy_batch(
    session,
    manifest: dict,
    src_ids: list[list[int]],
    decode: DecodeConfig,
    prefixes: list[list[int]] | None = None,
) -> list[Decoded]:
    """One padded batch, as `nmt.translation.search.greedy`: a row whose prefix has a piece at step
    t takes it, scored with the model's log-probability before the minimum length blocks EOS."""
    batch = len(src_ids)
    lens = np.array([len(s) for s in src_ids], dtype=np.int64)
    src = np.full((batch, int(lens.max())), PAD, dtype=np.int64)
    for row, ids in enumerate(src_ids):
        src[row, : len(ids)] = ids
    encoded = session.run("encoder", {"src": src, "src_lens": lens})
    memory = {name: encoded[name] for name in manifest["memory"]}
    state = {name: encoded[name] for name in manifest["state"].values()}
    batch_axis = {t["name"]: t.get("batch_axis") for t in manifest["decoder_step"]["inputs"]}
    max_len = np.array([decode.max_len(int(n)) for n in lens])
    min_len = np.array([decode.min_len(int(n)) for n in lens])

    tokens: list[list[int]] = [[] for _ in range(batch)]
    scores = np.zeros(batch, dtype=np.float32)
    width = max((len(p) for p in prefixes), default=0) if prefixes is not None else 0
    forced = np.full((batch, width), -1, dtype=np.int64)  # (B, P), -1 past each prefix
    for row, ids in enumerate(prefixes or []):
        forced[row, : len(ids)] = ids
    alive = np.arange(batch)  # original rows still decoding
    prev = np.full(batch, BOS, dtype=np.int64)
    for t in range(int(max_len.max())):
        out = session.run("decoder_step", {"prev": prev, **state, **memory})
        log_probs = out["log_probs"]
        rows = np.arange(len(alive))
        must = forced[alive, t] if t < width else np.full(len(alive), -1)
        taken = log_probs[rows, np.maximum(must, 0)]  # before EOS is blocked
        blocked = t < min_len[alive]
        if blocked.any():
            log_probs = log_probs.copy()
            log_probs[blocked, EOS] = -np.inf
        choice = np.where(must >= 0, must, log_probs.argmax(axis=1))
        scores[alive] += np.where(must >= 0, taken, log_probs[rows, choice])
        for row, token in zip(alive.tolist(), choice.tolist()):
            tokens[row].append(token)
        done = (choice == EOS) | (t + 1 >= max_len[alive])
        if done.all():
            break
        state = {old: out[new] for new, old in manifest["state"].items()}
        if done.any():
            keep = np.flatnonzero(~done)
            state = {k: v.take(keep, axis=batch_axis[k]) for k, v in state.items()}
            memory = {k: v.take(keep, axis=batch_axis[k]) for k, v in memory.items()}
            alive, choice = alive[keep], choice[keep]
        prev = choice.astype(np.int64)

    results = []
    for seq, score in zip(tokens, scores.tolist()):
        ended = bool(seq) and seq[-1] == EOS
        results.append(Decoded(seq[:-1] if ended else seq, score, ended))
    return results
