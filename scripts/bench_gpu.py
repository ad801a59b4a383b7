"""GPU benchmark: training tokens/s, MFU and peak memory, translation tokens/s; one JSON document.

    scripts/bench_gpu.sh [--out FILE]             # on a CUDA machine: under 10 minutes on one H100
    scripts/bench_gpu.sh --device cpu --quick     # the same pipeline, tiny, on the CPU (a check)

Training rows: GRU + Bahdanau (emb 256, hidden 256), Transformer small and base, each in fp32 and
bf16, at batches of 4,096, 16,384 and 32,768 target tokens (`--batch-tokens`), each in three modes
(MODES): eager, compiled (`train.compile=true`) and graphs (compiled and captured as CUDA graphs,
`train.cuda_graphs=true`, with batches padded to a few shapes, `train.length_step=8`), timed by
`scripts/bench_train.py` (which reports the median target tokens/s of its windows and the peak
GPU memory allocated by the timed updates). Tokens/s counts real target tokens, so the padding
that fixed shapes add is a cost the row pays.

MFU: each training row also reports the model FLOPs it ran per second and their fraction of the
device's peak in that precision. Model FLOPs per target token (`train_flops_per_tgt_token`) are
those of the matrix products of training (forward and backward) over the pairs of the training
split, divided by its target tokens (`train_flops` says what is counted: the weight matrices per
source or target position, embedding lookups not, the output projection once, attention's
length-squared products per layer or per decoder step; elementwise work and padding not), so MFU
is comparable across batch sizes, precisions and modes of one model. The model is built in this
process from the row's overrides, with the tokenizer and tokenized corpus nmt's cache holds. The
peak is measured in the same run, first: one big matrix product per precision
(`scripts/bench_matmul.py --peak`).
Translation rows: a GRU + Bahdanau and a Transformer small checkpoint trained here for a few
hundred updates, timed by `scripts/bench_translate.py` (greedy and beam 5, batch 64 over the whole
test file and batch 1 over its first sentences).
Quality (only with `--parts quality`: it takes the recipe's minutes): the Multi30k GPU recipe
(configs/experiment/multi30k_transformer_gpu.yaml) trained by nmt-train for its budget, and its
best checkpoint scored on test2016 by nmt-evaluate (beam 5), sacreBLEU signatures included.

Every row runs in its own process (a fresh CUDA context: peak memory and compilation caches are
not shared) under a time limit, and the whole run under a budget (`--budget-s`): a row that does
not fit is recorded as skipped with the reason, never silently dropped. Rows run cheapest and most
informative first (the peak, eager training at the first batch size, translation, eager training
at the larger batches, the torchrun rows, then graph-captured and compiled training, and last
the `flops` part: every model's count, as the MFU uses it, next to 6 x parameters). Progress
goes to stderr; the JSON goes to stdout and, with `--out FILE`, to FILE.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"  # ../shared/data/multi30k of the checkout
DEMO = ROOT / "data" / "demo"

# model rows: (name, overrides); sizes as in docs/benchmarks.md
MODELS = {
    "gru_bahdanau": ["model=gru_bahdanau", "model.emb_size=256", "model.hidden_size=256"],
    "transformer_small": ["model=transformer_small"],
    "transformer_base": ["model=transformer_base"],
}
# --quick: the same rows with tiny sizes (the sizes of tests/test_train.py), so the CPU gets
# through the whole pipeline in about a minute
QUICK_SIZES = {
    "gru_bahdanau": ["model.emb_size=64", "model.hidden_size=64"],
    "transformer_small": ["model.d_model=32", "model.ff_size=64", "model.encoder_layers=2"],
    "transformer_base": [
        "model.d_model=32", "model.heads=4", "model.ff_size=64",
        "model.encoder_layers=1", "model.decoder_layers=1",
    ],
}  # fmt: skip
TRANSLATE_MODELS = ["transformer_small", "gru_bahdanau"]
# how a training row runs: eager; torch.compile; torch.compile captured as CUDA graphs, with the
# batches padded to a few shapes (train.length_step) so that the captured graphs are replayed
MODES = {
    "eager": [],
    "compiled": ["train.compile=true"],
    "graphs": ["train.compile=true", "train.cuda_graphs=true", "train.length_step=8"],
}
QUALITY_RECIPE = "multi30k_transformer_gpu"  # the quality part trains it for its budget
PRECISIONS = ["fp32", "bf16"]
BATCH_TOKENS = [4096, 16384, 32768]  # --quick: 600 and 1,200
PARTS = ["peak", "eager", "translate", "compiled", "graphs", "ddp", "flops", "quality"]
DEFAULT_PARTS = PARTS[:-1]  # the quality part alone takes the recipe's minutes


def log(message: str) -> None:
    print(f"bench_gpu: {message}", file=sys.stderr, flush=True)


def json_documents(text: str) -> list:
    """Every JSON value printed in `text` (one-line or indented), in order; other lines skipped."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while i < len(text):
        start = min((p for p in (text.find("{", i), text.find("[", i)) if p >= 0), default=-1)
        if start < 0:
            break
        try:
            value, i = decoder.raw_decode(text, start)
            found.append(value)
        except json.JSONDecodeError:
            i = start + 1
    return found


class Budget:
    """The wall-clock budget of the whole benchmark; each child gets what is left, at most its
    own limit."""

    def __init__(self, seconds: float, row_limit: float, minimum: float) -> None:
        self.end = time.monotonic() + seconds
        self.row_limit, self.minimum = row_limit, minimum

    def left(self) -> float:
        return self.end - time.monotonic()

    def run(
        self, argv: list[str], limit: float | None = None, env: dict | None = None
    ) -> tuple[str | None, str | None]:
        """Run a child (with `env` added to the environment); returns (its stdout, None) or
        (None, why it failed or did not run)."""
        left = self.left()
        if left < self.minimum:
            return (
                None,
                f"time budget spent ({max(left, 0):.0f} s left, a row needs {self.minimum:.0f})",
            )
        timeout = min(limit or self.row_limit, left)
        # a session of its own, so a timeout also ends the compile workers it may have started
        child = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True, env={**os.environ, **(env or {})},
        )  # fmt: skip
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):  # a worker that left the group
                child.communicate(timeout=10)  # may hold the pipes: do not wait on it
            return None, f"timed out after {timeout:.0f} s"
        if child.returncode != 0:
            tail = [line for line in err.strip().splitlines() if line.strip()][-3:]
            return None, f"exit status {child.returncode}: {' | '.join(tail)}"
        return out, None

    def run_json(
        self, argv: list[str], limit: float | None = None
    ) -> tuple[dict | None, str | None]:
        """Run a benchmark script; returns the last JSON document it printed (its summary)."""
        out, why = self.run(argv, limit)
        if out is None:
            return None, why
        documents = json_documents(out)
        return (documents[-1], None) if documents else (None, "printed no JSON")


def modes_available(data: list[str]) -> set[str]:
    """The training modes whose keys this checkout's trainer knows (composition only, nothing
    runs): an older checkout measured for comparison may lack train.compile or train.cuda_graphs."""
    from nmt.cli import main as cli

    sink, known = io.StringIO(), set()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        for mode, overrides in MODES.items():
            if cli.train(["--cfg", *data, *overrides]) == 0:
                known.add(mode)
    return known


def checkout() -> str | None:
    """The commit measured, with "+dirty" when the working tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def choose_data(args: argparse.Namespace, quick_dir: Path) -> tuple[dict, list[str], Path]:
    """(description, data overrides, test source file): Multi30k from ../shared when present,
    else the demo corpus (generated when missing); --quick always uses a small demo corpus."""
    if args.quick:
        from nmt.demo import write_demo_corpus

        corpus = write_demo_corpus(quick_dir, n_train=2000, n_valid=50, n_test=50)
        overrides = ["data=demo", f"data.local_dir={corpus}", "data.tokenizer.vocab_size=400"]
        return {"name": "demo (quick)", "dir": str(corpus)}, overrides, corpus / "test.de"
    if args.data in ("auto", "multi30k") and (MULTI30K / "train.de").is_file():
        overrides = ["data=multi30k", f"data.local_dir={MULTI30K}"]
        return (
            {"name": "multi30k", "dir": str(MULTI30K)},
            overrides,
            MULTI30K / "test_2016_flickr.de",
        )
    if args.data == "multi30k":
        raise SystemExit(f"bench_gpu: --data multi30k but {MULTI30K} has no train.de")
    if not (DEMO / "train.de").is_file():
        log(f"{MULTI30K} not found: generating the demo corpus in {DEMO}")
        subprocess.run([sys.executable, "-m", "nmt.demo", "--out", str(DEMO)], cwd=ROOT, check=True)
    overrides = ["data=demo", f"data.local_dir={DEMO}"]
    return {"name": "demo", "dir": str(DEMO)}, overrides, DEMO / "test.de"


def peak_row(args, budget: Budget) -> dict:
    """The device's measured peak TFLOP/s in fp32 and bf16 (the MFU denominators)."""
    argv = [sys.executable, "scripts/bench_matmul.py", "--peak", "--device", args.device]
    argv += ["--repeats", "3", *(["--size", "512"] if args.quick else [])]
    log("peak: one big matrix product per precision")
    result, why = budget.run_json(argv)
    if result is None:
        log(f"  skipped: {why}")
        return {"skipped": why}
    log(f"  {result['peak_tflops']} TFLOP/s")
    return {"size": result["size"], "peak_tflops": result["peak_tflops"]}


def _linear_macs(module, skip: tuple = ()) -> int:
    """Multiply-adds per position of the nn.Linear layers and recurrent cells inside `module`
    (but those inside `skip`): in x out per linear layer; per recurrent layer and direction its
    input-to-hidden and hidden-to-hidden matrices. Biases are additions, not counted."""
    from torch import nn

    skipped = {id(m) for part in skip for m in part.modules()}
    macs = 0
    for m in module.modules():
        if id(m) in skipped:
            continue
        if isinstance(m, nn.Linear):
            macs += m.in_features * m.out_features
        elif isinstance(m, nn.RNNBase):
            macs += sum(w.numel() for name, w in m.named_parameters() if name.startswith("weight_"))
    return macs


def _attention_macs(attention, hidden: int, src_len, tgt_len):
    """Forward multiply-adds of a recurrent decoder's attention for one sentence pair: T queries
    over S keys of size H = hidden (nmt/models/attention.py). Per query its projections; per key
    its projections (once per batch, in `prepare`); per (query, key) pair the energy (a dot
    product of size H, or Bahdanau's / Luong concat's v over the A units) and the weighted sum of
    the values (size H)."""
    from nmt.models.attention import Additive, Concat, General, MultiHead

    scorer = attention.scorer
    S, T = src_len, tgt_len  # the shape letters of the model code
    match scorer:
        case Additive():
            per_query, per_key = _linear_macs(scorer.query_proj), _linear_macs(scorer.key_proj)
            per_pair = scorer.v.in_features
        case Concat():  # one W over [q; k], applied as its query and key halves
            units = scorer.proj.out_features
            per_query = units * scorer.query_size
            per_key = units * (scorer.proj.in_features - scorer.query_size)
            per_pair = scorer.v.in_features
        case General():
            per_query, per_key, per_pair = 0, _linear_macs(scorer.key_proj), hidden
        case MultiHead():
            per_query = _linear_macs(scorer.query_proj) + _linear_macs(scorer.out_proj)
            per_key = _linear_macs(scorer.key_proj) + _linear_macs(scorer.value_proj)
            per_pair = hidden
        case _:  # dot, scaled dot: the memory itself is the keys
            per_query, per_key, per_pair = 0, 0, hidden
    return per_query * T + per_key * S + (per_pair + hidden) * S * T


def train_flops(model, src_len, tgt_len):
    """FLOPs of training on one sentence pair, forward and backward: src_len source positions
    (EOS included) and tgt_len decoder positions (BOS and the target; as many predictions).
    `src_len` and `tgt_len` may be numbers or numpy arrays of them (one pair each; counted in
    float64, since the int16 lengths of a tokenized corpus would overflow).

    What is counted: the multiply-adds of the matrix products, 2 FLOPs each, three times over (the
    forward, and in the backward the gradients of the inputs and of the weights). Per position,
    every weight matrix that multiplies it: the encoder's per source position, the decoder's per
    target position, except the projections of the encoder's output (cross-attention keys and
    values, additive attention's W_k), which run per source position, and the recurrent bridge,
    once per sentence. The output projection counts once (tied to an embedding table or not: only
    the table's first V rows score). Embedding tables take no part (a lookup multiplies nothing).
    Attention's length-squared products: in a Transformer, per layer QKᵀ and the weighted sum of
    V (S x S x d each in the encoder's self-attention, T x T x d in the decoder's, counted in
    full although causal, T x S x d in its cross-attention); in a recurrent decoder, per target
    step over the S source positions, the energies and the weighted sum (`_attention_macs`).
    Not counted: elementwise work (activations, gates, softmax, normalisation, dropout, the loss)
    and the optimizer; nor any padding: these are the FLOPs the model needs, not what a padded
    batch runs."""
    import numpy as np

    from nmt.models.rnn import RNNDecoder
    from nmt.models.transformer import TiedProjection, TransformerDecoder

    S, T = (  # the shape letters of the model code
        np.asarray(n, dtype=np.float64) if isinstance(n, np.ndarray | np.generic) else n
        for n in (src_len, tgt_len)
    )
    encoder, decoder = model.encoder, model.decoder
    macs = _linear_macs(encoder) * S
    if isinstance(decoder, TransformerDecoder):
        cross = [layer.cross_attention.kv for layer in decoder.layers]
        macs += _linear_macs(decoder, skip=tuple(cross)) * T + sum(map(_linear_macs, cross)) * S
        d = decoder.embed.table.embedding_dim
        if isinstance(decoder.out, TiedProjection):  # the table's first V rows, (V, d)
            macs += decoder.out.bias.numel() * d * T
        macs += 2 * d * (len(encoder.layers) * S * S + len(decoder.layers) * (T * T + T * S))
    elif isinstance(decoder, RNNDecoder):
        skip = tuple(m for m in (decoder.attention, decoder.bridge) if m is not None)
        macs += _linear_macs(decoder, skip=skip) * T
        if decoder.bridge is not None:
            macs += _linear_macs(decoder.bridge)
        if decoder.attention is not None:
            macs += _attention_macs(decoder.attention, decoder.hidden_size, S, T)
    else:
        raise TypeError(f"no FLOP count for decoder {type(decoder).__name__}")
    return 3 * 2 * macs


def train_flops_per_token(model, src_lens, tgt_lens) -> float:
    """Training FLOPs per target token (EOS included, as tokens/s counts them) over pairs of
    these lengths: src_lens with EOS, tgt_lens without (as `TokenizedCorpus` keeps them)."""
    import numpy as np

    src = np.asarray(src_lens, dtype=np.float64)
    tgt = np.asarray(tgt_lens, dtype=np.float64) + 1  # BOS in, EOS out: one position more
    return float(np.sum(train_flops(model, src, tgt)) / np.sum(tgt))


def corpus_flops(overrides: tuple[str, ...]) -> dict:
    """What the model the nmt-train `overrides` configure costs to train, over the pairs of their
    training split (length-filtered as training does): its parameters, `train_flops_per_token`,
    and 6 x parameters (the count of an older bench_gpu.py, embedding tables included, for
    comparison). The tokenizer and the tokenized split come from nmt's cache (which a row's
    bench_train.py run has filled; prepared here otherwise); the model is built on the CPU and
    never run."""
    from nmt.cli import main as cli
    from nmt.training.setup import prepare_run

    with tempfile.TemporaryDirectory(prefix="bench_gpu.flops.") as tmp:
        cfg = cli.compose_config("train", [*overrides, "device=cpu", f"run_dir={tmp}/run"])
        data, model, _ = prepare_run(cfg)
        with data.train:
            per_token = train_flops_per_token(model, data.train.src_lens, data.train.tgt_lens)
            pairs = len(data.train)
    parameters = sum(p.numel() for p in model.parameters())
    return {
        "parameters": parameters,
        "train_pairs": pairs,
        "train_flops_per_tgt_token": round(per_token),
        "six_x_parameters": 6 * parameters,
    }


counted_flops = functools.lru_cache(maxsize=None)(corpus_flops)  # once per model and data


def counted_flops_per_token(overrides: tuple[str, ...]) -> float:
    return counted_flops(overrides)["train_flops_per_tgt_token"]


def flops_part(args, data: list[str]) -> dict:
    """`corpus_flops` of every model of MODELS on the data (no training; the CPU is enough)."""
    counts = {}
    for name, model in MODELS.items():
        log(f"flops: {name}")
        built = (*data, *model, *(QUICK_SIZES[name] if args.quick else []))
        try:
            counts[name] = counted_flops(built)
        except Exception as err:  # noqa: BLE001 - recorded, as a skipped row is
            counts[name] = {"skipped": f"{type(err).__name__}: {err}"}
        log(f"  {counts[name]}")
    return counts


def row_flops(count, overrides: tuple[str, ...]) -> dict:
    """{"train_flops_per_tgt_token": FLOPs} of a row's model and data, or {"flops_skipped": why}:
    a count that fails (a checkout whose models it does not know) must not lose the row."""
    try:
        return {"train_flops_per_tgt_token": round(count(overrides))}
    except Exception as err:  # noqa: BLE001 - any failure: recorded in the row, never raised
        log(f"  no FLOP count: {type(err).__name__}: {err}")
        return {"flops_skipped": f"{type(err).__name__}: {err}", "model_tflops": None, "mfu": None}


def model_flops(flops_per_token: float, tokens_per_s: float, peak_tflops: float | None) -> dict:
    """Model TFLOP/s of a training row and its MFU: training FLOPs per target token
    (`train_flops`) times target tokens/s, over the peak of the row's precision."""
    tflops = flops_per_token * tokens_per_s / 1e12
    mfu = round(tflops / peak_tflops, 4) if peak_tflops else None
    return {"model_tflops": round(tflops, 4), "mfu": mfu}


def train_rows(
    args,
    budget: Budget,
    data: list[str],
    mode: str,
    available: set[str],
    peak: dict,
    sizes: list[int],
    count=None,
) -> list:
    """One row per batch size (of `sizes`), model and precision, trained in `mode` (of MODES).
    `count(overrides)`: the training FLOPs per target token of the model and data these nmt-train
    overrides configure (default: `corpus_flops`'s, once per model)."""
    count = count or counted_flops_per_token
    rows = []
    peaks = peak.get("peak_tflops", {})
    for batch_tokens in sizes:
        for name in args.models:
            model = MODELS[name]
            for precision in args.precisions:
                row = {
                    "model": name, "precision": precision, "mode": mode,
                    "compile": mode != "eager", "batch_tokens": batch_tokens,
                }  # fmt: skip
                if mode not in available:
                    rows.append({**row, "skipped": f"{' '.join(MODES[mode])}: not available"})
                    continue
                built = (*data, *model, *(QUICK_SIZES[name] if args.quick else []))
                overrides = [
                    *built, f"device={args.device}", f"train.precision={precision}",
                    f"train.batch_tokens={batch_tokens}", *MODES[mode],
                ]  # fmt: skip
                argv = [sys.executable, "scripts/bench_train.py", *overrides]
                argv += ["--windows", str(args.windows), "--steps", str(args.steps)]
                log(f"train {name} {precision} {batch_tokens} {mode}")
                # compiling takes minutes: on an H100, transformer_base had not finished its
                # compiled warm-up window after 110 s
                limit = args.row_timeout_s * (1 if mode == "eager" else 3)
                result, why = budget.run_json(argv, limit)
                if result is None:
                    rows.append({**row, "skipped": why})
                    log(f"  skipped: {why}")
                    continue
                speed = result["median_tgt_tokens_per_s"]
                flops = row_flops(count, built)
                if "train_flops_per_tgt_token" in flops:
                    per_token = flops["train_flops_per_tgt_token"]
                    flops.update(model_flops(per_token, speed, peaks.get(precision)))
                rows.append(
                    {
                        **row,
                        "tgt_tokens_per_s": speed,
                        "windows_tgt_tokens_per_s": result["windows_tgt_tokens_per_s"],
                        **flops,
                        "peak_memory_mib": result.get("peak_memory_mib"),
                        "parameters": result["parameters"],
                        "steps_per_window": result["steps_per_window"],
                    }
                )
                done = rows[-1]
                log(
                    f"  {speed} tgt tokens/s, MFU {done.get('mfu')}, "
                    f"peak {done['peak_memory_mib']} MiB"
                )
    return rows


def translate_rows(args, budget: Budget, data: list[str], source: Path, work: Path) -> list:
    """Train each model briefly with nmt-train, then time bench_translate.py on the test file:
    batch 64 over all of it, batch 1 over its first `--batch1-sentences` (one search per
    sentence is slow; the rate is per sentence and per token either way)."""
    rows = []
    for name in TRANSLATE_MODELS:
        run_dir = work / name
        steps = args.translate_train_steps
        overrides = [
            *data, *MODELS[name], *(QUICK_SIZES[name] if args.quick else []),
            f"device={args.device}", f"run_dir={run_dir}", f"train.max_steps={steps}",
            f"train.valid_every={steps}", "train.valid_bleu=false", "train.metric=loss",
            f"train.log_every={max(steps // 4, 1)}",
            *(["train.scheduler=noam", "train.warmup_steps=100"] if "transformer" in name else []),
        ]  # fmt: skip
        log(f"translate {name}: training {steps} updates")
        started = time.monotonic()
        argv = [
            sys.executable,
            "-c",
            "from nmt.cli.main import main_train; main_train()",
            *overrides,
        ]
        _, why = budget.run(argv, limit=args.row_timeout_s * 2)
        row = {"model": name, "train_steps": steps}
        if why is not None:
            rows.append({**row, "skipped": f"training: {why}"})
            log(f"  skipped: training: {why}")
            continue
        row["train_s"] = round(time.monotonic() - started, 1)
        ckpt = run_dir / "checkpoints" / "last"
        results = []
        for batch_size, limit, repeats in (
            (64, 0, args.repeats),
            (1, args.batch1_sentences, 1),
        ):
            argv = [
                sys.executable, "scripts/bench_translate.py", str(ckpt), "--src", str(source),
                "--strategies", "greedy", "beam", "--beam-size", "5",
                "--batch-sizes", str(batch_size), "--repeats", str(repeats),
                "--limit", str(limit), "--device", args.device,
            ]  # fmt: skip
            log(f"translate {name}: batch {batch_size}")
            result, why = budget.run_json(argv)
            if result is None:
                results.append({"batch_size": batch_size, "skipped": why})
                log(f"  skipped: {why}")
                continue
            results += result["results"]
            row.setdefault("parameters", result["parameters"])
        rows.append({**row, "results": results})
    return rows


def ddp_rows(args, budget: Budget, data: list[str], work: Path) -> list:
    """Training tokens/s under torchrun with every GPU against one process on one GPU:
    transformer_small in fp32 at the first batch size, nmt-train for `ddp_steps` updates, the
    median of its log windows after the first (metrics.jsonl's tokens_per_s counts every rank's
    tokens); per GPU and the scaling efficiency. Each process takes one batch per update, so N
    processes make updates N times larger. On the CPU: 2 gloo processes of one thread each."""
    import torch

    cpu = args.device == "cpu"
    procs = 2 if cpu else torch.cuda.device_count()
    if procs < 2:
        return [{"skipped": f"{procs} GPU(s) here: the torchrun rows need 2 or more"}]
    steps = args.ddp_steps
    rows: list[dict] = []
    for n in (1, procs):
        run_dir = work / f"ddp{n}"
        overrides = [
            *data, *MODELS["transformer_small"],
            *(QUICK_SIZES["transformer_small"] if args.quick else []), f"device={args.device}",
            f"run_dir={run_dir}", f"train.batch_tokens={args.batch_tokens[0]}",
            f"train.max_steps={steps}", f"train.log_every={max(steps // 6, 1)}",
            f"train.valid_every={steps}", "train.valid_bleu=false", "train.metric=loss",
        ]  # fmt: skip
        argv = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            str(n), "--no-python", sys.executable, "-c",
            "from nmt.cli.main import main_train; main_train()", *overrides,
        ]  # fmt: skip
        log(f"ddp: torchrun --nproc_per_node {n}, {steps} updates")
        _, why = budget.run(
            argv, limit=args.row_timeout_s * 2, env={"OMP_NUM_THREADS": "1"} if cpu else None
        )
        row: dict = {"processes": n, "model": "transformer_small", "precision": "fp32"}
        if why is not None:
            log(f"  skipped: {why}")
            rows.append({**row, "skipped": why})
            continue
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        speeds = [r["tokens_per_s"] for r in map(json.loads, lines) if r["split"] == "train"]
        speed = statistics.median(speeds[1:] or speeds)
        rows.append({**row, "tgt_tokens_per_s": round(speed, 1), "per_gpu": round(speed / n, 1)})
        log(f"  {speed:.0f} tgt tokens/s, {speed / n:.0f} per process")
    if len(rows) == 2 and all("per_gpu" in r for r in rows):
        rows[1]["scaling_efficiency"] = round(rows[1]["per_gpu"] / rows[0]["per_gpu"], 3)
    return rows


def quality_row(args, budget: Budget, data_info: dict, data: list[str], work: Path) -> dict:
    """Train the Multi30k GPU recipe (QUALITY_RECIPE) for its minutes with nmt-train, then score
    its best checkpoint on test2016 with nmt-evaluate (beam 5, the command's defaults): BLEU,
    chrF and TER with sacreBLEU's signatures, the updates made and the best valid BLEU. --quick
    runs the recipe on the quick demo corpus with tiny sizes for a few seconds (a check)."""
    if data_info["name"] not in ("multi30k", "demo (quick)"):
        return {"recipe": QUALITY_RECIPE, "skipped": f"needs Multi30k in {MULTI30K}"}
    run_dir = work / "quality"
    overrides = [
        f"experiment={QUALITY_RECIPE}",
        *data,
        f"device={args.device}",
        f"run_dir={run_dir}",
    ]
    if args.quick:
        overrides += [*QUICK_SIZES["transformer_small"], "train.max_minutes=0.3"]
        overrides += ["train.valid_every=20", "train.batch_tokens=600"]
    log(f"quality: nmt-train experiment={QUALITY_RECIPE} for its budget")
    started = time.monotonic()
    argv = [sys.executable, "-c", "from nmt.cli.main import main_train; main_train()", *overrides]
    _, why = budget.run(argv, limit=args.quality_timeout_s)
    row: dict = {"recipe": QUALITY_RECIPE, "overrides": overrides[1:]}
    if why is not None:
        log(f"  skipped: training: {why}")
        return {**row, "skipped": f"training: {why}"}
    row["train_wall_s"] = round(time.monotonic() - started, 1)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in rows if r["split"] == "valid"]
    row["updates"] = max(r["step"] for r in rows)
    row["best_valid_bleu"] = max((r["bleu"] for r in valid if "bleu" in r), default=None)
    out = work / "quality_eval"
    argv = [
        sys.executable, "-c", "from nmt.cli.main import main_evaluate; main_evaluate()",
        f"ckpt={run_dir / 'checkpoints' / 'best'}", "split=test", f"out_dir={out}",
        f"device={args.device}",
    ]  # fmt: skip
    log("quality: nmt-evaluate split=test")
    _, why = budget.run(argv)
    if why is not None:
        log(f"  skipped: evaluation: {why}")
        return {**row, "skipped": f"evaluation: {why}"}
    scores = json.loads((out / "test.scores.json").read_text(encoding="utf-8"))
    log(f"  test BLEU {scores['bleu']:.2f} after {row['updates']} updates")
    return {**row, **{k: scores[k] for k in ("decode", "bleu", "chrf", "ter", "report")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--quick", action="store_true", help="tiny models and runs (a CPU check)")
    parser.add_argument("--data", choices=["auto", "multi30k", "demo"], default="auto")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--budget-s", type=float, help="wall-clock budget of the whole run")
    parser.add_argument("--row-timeout-s", type=float, help="time limit of one row")
    parser.add_argument(
        "--parts", default=",".join(DEFAULT_PARTS),
        help="which rows, comma-separated: peak (the matmul peak, for MFU), eager, compiled, "
        "graphs (training), translate, ddp (torchrun over every GPU), flops (each model's "
        "training FLOPs per target token; no training), quality (the Multi30k GPU "
        "recipe trained for its minutes "
        f"and scored on test2016; not in the default, {','.join(DEFAULT_PARTS)})",
    )  # fmt: skip
    parser.add_argument(
        "--batch-tokens", help="training batch sizes, comma-separated (default 4096,16384,32768)"
    )
    parser.add_argument(
        "--models", default=",".join(MODELS),
        help=f"training rows' models, comma-separated, in this order (default {','.join(MODELS)})",
    )  # fmt: skip
    parser.add_argument(
        "--precisions",
        default=",".join(PRECISIONS),
        help=f"training rows' precisions, in this order (default {','.join(PRECISIONS)})",
    )
    args = parser.parse_args()
    started = time.monotonic()
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS):
        parser.error(f"--parts {args.parts}: choose from {', '.join(PARTS)}")
    args.models, args.precisions = args.models.split(","), args.precisions.split(",")
    if not set(args.models) <= set(MODELS):
        parser.error(f"--models {','.join(args.models)}: choose from {', '.join(MODELS)}")
    if not set(args.precisions) <= set(PRECISIONS):
        choices = ", ".join(PRECISIONS)
        parser.error(f"--precisions {','.join(args.precisions)}: choose from {choices}")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"bench_gpu: CUDA is not available here (torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda}); run it on a GPU machine, or check the pipeline on the CPU "
            "with: scripts/bench_gpu.sh --device cpu --quick"
        )
    # sizes of the runs: a full GPU run fits 10 minutes on one H100; --quick fits 2 on 2 cores
    quick = args.quick
    default_sizes = [600, 1200] if quick else BATCH_TOKENS
    args.batch_tokens = (
        [int(n) for n in args.batch_tokens.split(",")] if args.batch_tokens else (default_sizes)
    )
    args.windows, args.steps = (1, 3) if quick else (3, 20)
    args.translate_train_steps = 20 if quick else 300
    args.repeats = 1 if quick else 3
    args.batch1_sentences = 8 if quick else 100
    args.budget_s = args.budget_s or (110.0 if quick else 540.0)
    args.row_timeout_s = args.row_timeout_s or (40.0 if quick else 150.0)
    args.quality_timeout_s = 60.0 if quick else 360.0  # the recipe's 3 minutes, validations, exit
    args.ddp_steps = 12 if quick else 120
    budget = Budget(args.budget_s - (time.monotonic() - started), args.row_timeout_s, 10.0)

    from nmt.device import describe, resolve_device

    with tempfile.TemporaryDirectory(prefix="bench_gpu.") as tmp:
        work = Path(tmp)
        data_info, data, source = choose_data(args, work / "demo")
        available = modes_available(data)
        for mode in sorted(set(MODES) - available):
            log(f"{' '.join(MODES[mode])}: not keys of this checkout's config: {mode} rows skipped")
        eager, translation, later, ddp, peak, quality, flops = [], [], [], [], {}, {}, {}
        if "peak" in parts:
            peak = peak_row(args, budget)
        first, larger = args.batch_tokens[:1], args.batch_tokens[1:]
        # the first batch size, translation, then the larger batches: a budget that runs out
        # skips the rows that cost most
        if "quality" in parts:
            quality = quality_row(args, budget, data_info, data, work)
        if "eager" in parts:
            eager = train_rows(args, budget, data, "eager", available, peak, first)
        if "translate" in parts:
            translation = translate_rows(args, budget, data, source, work)
        if "eager" in parts:
            eager += train_rows(args, budget, data, "eager", available, peak, larger)
        if "ddp" in parts:  # two short runs: before the compiled rows, which take minutes
            ddp = ddp_rows(args, budget, data, work)
        for mode in ("graphs", "compiled"):
            if mode in parts:
                later += train_rows(args, budget, data, mode, available, peak, args.batch_tokens)
        if "flops" in parts:  # seconds from the cache the rows filled; else it tokenizes first
            flops = flops_part(args, data)

    report = {
        "benchmark": "bench_gpu",
        "commit": checkout(),
        "data": data_info,
        "settings": {
            "quick": quick,
            "batch_tokens": args.batch_tokens,
            "models": args.models,
            "precisions": args.precisions,
            "windows": args.windows,
            "steps_per_window": args.steps,
            "translate_train_steps": args.translate_train_steps,
            "translate_repeats_batch_64": args.repeats,
            "translate_sentences_batch_1": args.batch1_sentences,
            "budget_s": args.budget_s,
            "row_timeout_s": args.row_timeout_s,
            "parts": sorted(parts),
        },
        "peak": peak,
        "train": eager + later,
        "translate": translation,
        "ddp": ddp,
        "quality": quality,
        "flops": flops,
        "wall_s": round(time.monotonic() - started, 1),
        **describe(resolve_device(args.device)),
    }
    text = json.dumps(report, indent=2)
    print(text)
    out = args.out
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
        log(f"written to {out}")


if __name__ == "__main__":
    main()
