"""nmt and Joey NMT 2.3.0 side by side on Multi30k de→en, one after the other, printed as one JSON.

    python scripts/bench_vs_joey.py --data ../shared/data/multi30k --work runs/vs_joey \
        --joey-python JOEY_VENV/bin/python [--parts train_rnn train_transformer translate] \
        [--rounds 2] [--translate-steps 600]

Same machine, same data, the same sentencepiece model for both (nmt's, trained by the first part),
the same architectures and batches of 2,048 tokens. Joey NMT is installed by
../shared/peers/joey_peer.sh into a virtual environment of its own (never a dependency of nmt);
pass that environment's Python as --joey-python. The first run of the peer script installs Joey,
links the data and writes the vocabulary of all 8,000 pieces into --work.

- train_rnn: GRU + Bahdanau, emb 256, bidirectional encoder 2×128, decoder 256, input feeding,
  dropout 0, no label smoothing. Training target tokens/s: Joey's from its own log's "Tokens per
  Sec" (median of its log lines after the first, over --peer-steps updates), nmt's from
  scripts/bench_train.py (median of 5 windows of 20 updates). Two like-for-like pairs, each with
  the same output layer on both sides:
    full:   both with all 8,000 pieces on both sides (nmt: data.tokenizer.prune_unseen=false);
    pruned: both with the target vocabulary cut to the pieces of the English training text (nmt's
            default; Joey's target vocabulary file lists the same pieces) and all 8,000 source
            pieces.
  --rounds N runs the four measurements in turn N times; each ratio is the median of the ratios
  within each round, since the machine's speed drifts.
- train_transformer: 3+3 layers, d 256, 4 heads, ff 1024, tied embeddings, dropout 0.1. Joey ties
  its embeddings and output layer to one vocabulary for both sides, so only the full pair is like
  for like; nmt's pruned run (its output layer scores the 3,853 target pieces) is reported beside
  it, labelled as not like for like.
- translate: both recurrent models trained for --translate-steps updates at a constant 1e-3
  (Adam, no warm-up; nmt's default plateau schedule acts only after a validation; Joey gets
  "exponential" with factor 1.0, because its "plateau" fails on today's torch and it refuses no
  schedule), so that both translate with trained models of similar output length; then the
  whole CLI run that translates the 1,000 sentences of test2016 with beam 5, batch 64, timed by
  the wall clock (model loading included, as a user waits for it); each output's BLEU and length
  ratio are reported too. nmt runs three times: exact, with `decode.shortlist=20` (the lexical
  shortlist, nmt/lexicon.py) and exact with `decode.precision=bf16` (the search's matrix products
  in bfloat16). --repeats N runs the four commands in turn N times; the ratios are the medians of
  the ratios within each round. nmt's model here has its pruned target vocabulary.

Run nothing else meanwhile: two torch processes on two cores slow each other by 10× or more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nmt.device import cpu_name

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "joey_peer.sh"
BIN = Path(sys.executable).parent
RNN = [
    "model=gru_bahdanau",
    "model.dropout=0.0",
    "train.label_smoothing=0.0",
    "train.batch_tokens=2048",
]
TRANSFORMER = ["model=transformer_small", "train.batch_tokens=2048"]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kw)


def last_json(text: str) -> dict:
    """The last JSON object printed, on one line or spread over several (bench_train indents)."""
    decoder, found = json.JSONDecoder(), None
    for start in (m.start() for m in re.finditer(r"^\{", text, re.MULTILINE)):
        with contextlib.suppress(json.JSONDecodeError):
            found = decoder.raw_decode(text, start)[0]
    if found is None:
        raise SystemExit(f"bench_vs_joey: no JSON in the output:\n{text[-2000:]}")
    return found


def nmt_train_speed(data: Path, model: list[str]) -> float:
    out = run(
        [BIN / "python", ROOT / "scripts" / "bench_train.py", "data=multi30k",
         f"data.local_dir={data}", *model, "--windows", "5", "--steps", "20"],
        capture_output=True,
    ).stdout  # fmt: skip
    return last_json(out)["median_tgt_tokens_per_s"]


def joey_config(
    work: Path,
    sp: Path,
    arch: str,
    steps: int,
    validate: bool,
    tgt_vocab: Path | None = None,
    name: str | None = None,
) -> Path:
    """A Joey NMT 2.3.0 config for `arch` (rnn: the peer script's model; transformer: 3+3 d256).
    Both sides use vocab.txt (written by joey_peer.sh: every piece of our sentencepiece model)
    unless `tgt_vocab` names the target side's own list."""
    vocab = work / "vocab.txt"
    name = name or arch
    side = (
        '{{lang: "{lang}", max_length: 100, level: "bpe", voc_file: "{vocab}", '
        'tokenizer_type: "sentencepiece", tokenizer_cfg: {{model_file: "{sp}"}}}}'
    )
    if arch == "rnn":
        model = (
            '  encoder: {type: "recurrent", rnn_type: "gru", embeddings: {embedding_dim: 256}, '
            "hidden_size: 128, bidirectional: True, dropout: 0.0, num_layers: 1}\n"
            '  decoder: {type: "recurrent", rnn_type: "gru", embeddings: {embedding_dim: 256}, '
            "hidden_size: 256, dropout: 0.0, hidden_dropout: 0.0, num_layers: 1, "
            'input_feeding: True, init_hidden: "bridge", attention: "bahdanau"}\n'
        )
    else:
        layer = (
            '{{type: "transformer", num_layers: 3, num_heads: 4, embeddings: {{embedding_dim: 256, '
            "scale: True}}, hidden_size: 256, ff_size: 1024, dropout: 0.1, "
            'layer_norm: "pre"}}'
        )
        model = (
            "  tied_embeddings: True\n  tied_softmax: True\n"
            f"  encoder: {layer.format()}\n  decoder: {layer.format()}\n"
        )
    text = (
        f'name: {name}\njoeynmt_version: "2.3.0"\nmodel_dir: "{work}/model-{name}"\n'
        "use_cuda: False\nrandom_seed: 42\n"
        f'data:\n  train: "{work}/train"\n  dev: "{work}/val"\n  test: "{work}/test"\n'
        '  dataset_type: "plain"\n'
        f"  src: {side.format(lang='de', vocab=vocab, sp=sp)}\n"
        f"  trg: {side.format(lang='en', vocab=tgt_vocab or vocab, sp=sp)}\n"
        "testing: {n_best: 1, beam_size: 5, beam_alpha: 1.0, batch_size: 64, "
        'batch_type: "sentence", eval_metrics: ["bleu"], max_output_length: 60}\n'
        'training:\n  optimizer: "adam"\n  learning_rate: 0.001\n  clip_grad_norm: 1.0\n'
        '  batch_size: 2048\n  batch_type: "token"\n  normalization: "tokens"\n'
        '  scheduling: "exponential"\n  decrease_factor: 1.0\n'  # constant: x 1.0 per epoch
        f"  epochs: 100\n  updates: {steps}\n"
        f"  validation_freq: {steps if validate else 100000}\n  logging_freq: 10\n"
        "  overwrite: True\n  shuffle: True\n  keep_best_ckpts: 1\n"
        f'model:\n  initializer: "xavier_uniform"\n{model}'
    )
    path = work / f"joey-{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def joey_train(joey: Path, cfg: Path) -> tuple[float, Path]:
    """Train with Joey; (median tokens/s of its log lines after the first, the log)."""
    log = cfg.with_suffix(".log")
    with open(log, "w", encoding="utf-8") as out:
        run([joey, "-m", "joeynmt", "train", cfg, "-t"], stdout=out, stderr=subprocess.STDOUT)
    speeds = [float(v) for v in re.findall(r"Tokens per Sec: +([0-9.]+)", log.read_text())][1:]
    return statistics.median(speeds), log


def bleu(hyp: Path, ref: Path) -> dict:
    import sacrebleu

    hyps = hyp.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    score = sacrebleu.corpus_bleu(hyps, [refs])
    return {"bleu": round(score.score, 2), "length_ratio": round(score.sys_len / score.ref_len, 3)}


def timed(cmd: list, stdin: Path, stdout: Path) -> float:
    began = time.perf_counter()
    with open(stdin, encoding="utf-8") as inp, open(stdout, "w", encoding="utf-8") as out:
        run(cmd, stdin=inp, stdout=out, stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def target_pieces(run_dir: Path, out: Path) -> Path:
    """Joey's vocabulary file for the target pieces nmt keeps (pieces.tgt.tsv, specials left
    out as in vocab.txt): the same output layer on both sides."""
    rows = (run_dir / "pieces.tgt.tsv").read_text(encoding="utf-8").splitlines()
    pieces = [row.split("\t", 1)[1] for row in rows]
    specials = {"<unk>", "<pad>", "<s>", "</s>"}
    out.write_text("".join(p + "\n" for p in pieces if p not in specials), encoding="utf-8")
    return out


def median_ratio(ours: list[float], joey: list[float]) -> float:
    """The median over the rounds of nmt's speed over Joey's in the same round."""
    return statistics.median(n / j for n, j in zip(ours, joey))


def train_rnn(args: argparse.Namespace, data: Path, work: Path, sp: Path, nmt_run: Path) -> dict:
    """Both like-for-like pairs (full, pruned), alternating, --rounds times."""
    pruned_vocab = target_pieces(nmt_run, work / "vocab.tgt.txt")
    full_cfg = joey_config(work, sp, "rnn", args.peer_steps, False, name="rnn-full")
    pruned_cfg = joey_config(
        work, sp, "rnn", args.peer_steps, False, pruned_vocab, name="rnn-pruned"
    )
    speeds: dict[str, list[float]] = {
        k: [] for k in ("joey_full", "nmt_full", "joey_pruned", "nmt_pruned")
    }
    for _ in range(args.rounds):
        speeds["joey_full"].append(joey_train(args.joey_python, full_cfg)[0])
        speeds["nmt_full"].append(
            nmt_train_speed(data, [*RNN, "data.tokenizer.prune_unseen=false"])
        )
        speeds["joey_pruned"].append(joey_train(args.joey_python, pruned_cfg)[0])
        speeds["nmt_pruned"].append(nmt_train_speed(data, RNN))
    return {
        "unit": "target tokens/s in training, per round",
        **{name: [round(v) for v in values] for name, values in speeds.items()},
        "ratio_full": median_ratio(speeds["nmt_full"], speeds["joey_full"]),
        "ratio_pruned": median_ratio(speeds["nmt_pruned"], speeds["joey_pruned"]),
        "target_pieces": {"full": 8000, "pruned": len(pruned_vocab.read_text().splitlines()) + 4},
        "like_for_like": "each ratio compares the same output vocabulary on both sides",
    }


def train_transformer(args: argparse.Namespace, data: Path, work: Path, sp: Path) -> dict:
    cfg = joey_config(work, sp, "transformer", args.peer_steps, False)
    speeds: dict[str, list[float]] = {"joey_full": [], "nmt_full": [], "nmt_pruned": []}
    for _ in range(args.rounds):
        speeds["joey_full"].append(joey_train(args.joey_python, cfg)[0])
        full = [*TRANSFORMER, "data.tokenizer.prune_unseen=false"]
        speeds["nmt_full"].append(nmt_train_speed(data, full))
        speeds["nmt_pruned"].append(nmt_train_speed(data, TRANSFORMER))
    return {
        "unit": "target tokens/s in training, per round",
        **{name: [round(v) for v in values] for name, values in speeds.items()},
        "ratio_full": median_ratio(speeds["nmt_full"], speeds["joey_full"]),
        "ratio_pruned_vs_joey_full": median_ratio(speeds["nmt_pruned"], speeds["joey_full"]),
        "like_for_like": "ratio_full only: Joey ties one vocabulary to both sides and its output",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--work", type=Path, default=Path("runs") / "vs_joey")
    parser.add_argument(
        "--joey-python", type=Path, required=True,
        help="the Python of the virtual environment joey_peer.sh installs Joey NMT 2.3.0 into",
    )  # fmt: skip
    parser.add_argument(
        "--parts", nargs="*", default=["train_rnn", "train_transformer", "translate"]
    )
    parser.add_argument("--peer-steps", type=int, default=150, help="Joey updates timed")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the training timings")
    parser.add_argument("--translate-steps", type=int, default=600, help="updates before translate")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the translate timings")
    args = parser.parse_args()
    data, work = args.data.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ENC_HID": "128", "BATCH": "2048", "BATCH_TYPE": "token"}

    # nmt's recurrent model for `translate`; its run also gives the shared sentencepiece model
    # and the target pieces it keeps
    nmt_run = work / "nmt-rnn"
    if not (nmt_run / "checkpoints" / "best").exists():
        run(
            [BIN / "nmt-train", "data=multi30k", f"data.local_dir={data}", *RNN,
             f"train.max_steps={args.translate_steps}",
             f"train.valid_every={args.translate_steps}", f"run_dir={nmt_run}",
             "train.overwrite=true"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    sp = nmt_run / "spm.model"
    # joey_peer.sh installs Joey, links the data and writes vocab.txt into `work` (and times
    # Joey's training with its own config, reported as `joey_peer`)
    result: dict = {
        "cpu": cpu_name(),
        "threads": os.cpu_count(),
    }
    if not (args.joey_python.exists() and (work / "vocab.txt").exists()):
        result["joey_peer"] = last_json(
            run([PEER, sp, data, work, args.peer_steps], capture_output=True, env=env).stdout
        )

    if "train_rnn" in args.parts:
        result["train_rnn_tokens_per_s"] = train_rnn(args, data, work, sp, nmt_run)
    if "train_transformer" in args.parts:
        result["train_transformer_tokens_per_s"] = train_transformer(args, data, work, sp)
    if "translate" in args.parts:
        cfg = joey_config(work, sp, "rnn", args.translate_steps, True)
        if not (work / "model-rnn" / "best.ckpt").exists():
            joey_train(args.joey_python, cfg)
        test_de, test_en = data / "test_2016_flickr.de", data / "test_2016_flickr.en"
        ckpt = nmt_run / "checkpoints" / "best"
        if not (ckpt / "lexicon.pt").exists():  # a run from before nmt learned lexicons
            run([BIN / "python", "-m", "nmt.cli.lexicon", ckpt], stdout=subprocess.DEVNULL)
        joey_out = work / "joey.test.en"
        joey_cmd = [args.joey_python, "-m", "joeynmt", "translate", cfg]
        nmt_cmd = [BIN / "nmt-translate", f"ckpt={ckpt}", "decode=beam", "decode.batch_size=64"]
        ours = {
            "nmt": nmt_cmd,
            "nmt_shortlist": [*nmt_cmd, "decode.shortlist=20"],
            "nmt_bf16": [*nmt_cmd, "decode.precision=bf16"],
        }
        times: dict[str, list[float]] = {"joey": [], **{name: [] for name in ours}}
        for _ in range(args.repeats):
            times["joey"].append(timed(joey_cmd, test_de, joey_out))
            for name, cmd in ours.items():
                times[name].append(timed(cmd, test_de, work / f"{name}.test.en"))

        def ratio(name: str) -> float:  # Joey's time over ours, the median over the rounds
            return statistics.median(j / n for j, n in zip(times["joey"], times[name]))

        result["translate_test2016_beam5_s"] = {
            **{name: round(statistics.median(ts), 2) for name, ts in times.items()},
            "runs": {name: [round(t, 2) for t in ts] for name, ts in times.items()},
            "ratio": ratio("nmt"),
            "ratio_shortlist": ratio("nmt_shortlist"),
            "ratio_bf16": ratio("nmt_bf16"),
            "updates": args.translate_steps,
            "joey_output": bleu(joey_out, test_en),
            **{f"{name}_output": bleu(work / f"{name}.test.en", test_en) for name in ours},
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
