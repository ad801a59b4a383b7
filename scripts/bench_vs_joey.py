"""nmt and Joey NMT 2.3.0 side by side on Multi30k de→en, one after the other, printed as one JSON.

    python scripts/bench_vs_joey.py --data ../shared/data/multi30k --work /tmp/vs_joey \
        [--parts train_rnn train_transformer translate] [--translate-steps 400]

Same machine, same data, the same sentencepiece model for both (nmt's, trained by the first part),
the same architectures and batches of 2,048 tokens:

- train_rnn: GRU + Bahdanau, emb 256, bidirectional encoder 2×128, decoder 256, input feeding,
  dropout 0, no label smoothing. Joey's figure comes from ../shared/peers/joey_peer.sh (its own
  log's "Tokens per Sec", median); nmt's from scripts/bench_train.py (median of 5 windows), with
  its default target vocabulary pruned to the pieces of the English training text (3,853 of
  8,000) and again with all 8,000 pieces, the vocabulary joey_peer.sh gives Joey.
- train_transformer: 3+3 layers, d 256, 4 heads, ff 1024, tied embeddings, dropout 0.1; nmt's
  shared table keeps the pieces of both training texts with the target's first, and its tied
  output layer scores only those (3,853 on Multi30k); again with all 8,000 pieces.
- translate: both recurrent models trained for --translate-steps updates at a constant 1e-3
  (Adam, no warm-up; nmt's default plateau schedule acts only after a validation; Joey gets
  "exponential" with factor 1.0, because its "plateau" fails on today's torch and it refuses no
  schedule), so that both translate with trained models of similar output length; then the
  whole CLI run that translates the 1,000 sentences of test2016 with beam 5, batch 64, timed by
  the wall clock (model loading included, as a user waits for it); each output's BLEU and length
  ratio are reported too. nmt runs three times: exact, with `decode.shortlist=20` (the lexical
  shortlist, nmt/lexicon.py) and exact with `decode.precision=bf16` (the search's matrix products
  in bfloat16). --repeats N runs the four commands in turn N times; the ratios
  are the medians of the ratios within each round, since the machine's speed drifts.

Joey is installed by joey_peer.sh into its own venv under /tmp (never a dependency of nmt). Run
nothing else meanwhile: two torch processes on two cores slow each other by 10× or more.
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

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "joey_peer.sh"
JOEY_PY = Path("/tmp/venv-joey/bin/python")
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


def joey_config(work: Path, sp: Path, arch: str, steps: int, validate: bool) -> Path:
    """A Joey NMT 2.3.0 config for `arch` (rnn: the peer script's model; transformer: 3+3 d256)."""
    vocab = work / "vocab.txt"  # written by joey_peer.sh: the pieces of our sentencepiece model
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
        f'name: {arch}\njoeynmt_version: "2.3.0"\nmodel_dir: "{work}/model-{arch}"\n'
        "use_cuda: False\nrandom_seed: 42\n"
        f'data:\n  train: "{work}/train"\n  dev: "{work}/val"\n  test: "{work}/test"\n'
        '  dataset_type: "plain"\n'
        f"  src: {side.format(lang='de', vocab=vocab, sp=sp)}\n"
        f"  trg: {side.format(lang='en', vocab=vocab, sp=sp)}\n"
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
    path = work / f"joey-{arch}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def joey_train(cfg: Path) -> tuple[float, Path]:
    """Train with Joey; (median tokens/s of its log lines after the first, the log)."""
    log = cfg.with_suffix(".log")
    with open(log, "w", encoding="utf-8") as out:
        run([JOEY_PY, "-m", "joeynmt", "train", cfg, "-t"], stdout=out, stderr=subprocess.STDOUT)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vs_joey"))
    parser.add_argument(
        "--parts", nargs="*", default=["train_rnn", "train_transformer", "translate"]
    )
    parser.add_argument("--peer-steps", type=int, default=150, help="Joey updates timed")
    parser.add_argument("--translate-steps", type=int, default=600, help="updates before translate")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the translate timings")
    args = parser.parse_args()
    data, work = args.data.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ENC_HID": "128", "BATCH": "2048", "BATCH_TYPE": "token"}

    # nmt's recurrent model for `translate`; its run also gives the shared sentencepiece model
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
    # Joey's training, which translating alone does not need once that is done)
    peer = {}
    if args.parts != ["translate"] or not (JOEY_PY.exists() and (work / "vocab.txt").exists()):
        peer = last_json(
            run([PEER, sp, data, work, args.peer_steps], capture_output=True, env=env).stdout
        )
    result: dict = {"machine": os.uname().nodename, "threads": os.cpu_count()}

    if "train_rnn" in args.parts:
        joey = peer["train_tgt_tok_per_s_median"]
        ours = nmt_train_speed(data, RNN)
        full = nmt_train_speed(data, [*RNN, "data.tokenizer.prune_unseen=false"])
        result["train_rnn_tokens_per_s"] = {
            "joey": joey, "nmt": ours, "ratio": ours / joey,
            "nmt_all_8000_pieces": full, "ratio_all_8000_pieces": full / joey,
        }  # fmt: skip
    if "train_transformer" in args.parts:
        joey, _ = joey_train(joey_config(work, sp, "transformer", args.peer_steps, False))
        ours = nmt_train_speed(data, TRANSFORMER)
        full = nmt_train_speed(data, [*TRANSFORMER, "data.tokenizer.prune_unseen=false"])
        result["train_transformer_tokens_per_s"] = {
            "joey": joey, "nmt": ours, "ratio": ours / joey,
            "nmt_all_8000_pieces": full, "ratio_all_8000_pieces": full / joey,
        }  # fmt: skip
    if "translate" in args.parts:
        cfg = joey_config(work, sp, "rnn", args.translate_steps, True)
        if not (work / "model-rnn" / "best.ckpt").exists():
            joey_train(cfg)
        test_de, test_en = data / "test_2016_flickr.de", data / "test_2016_flickr.en"
        ckpt = nmt_run / "checkpoints" / "best"
        if not (ckpt / "lexicon.pt").exists():  # a run from before nmt learned lexicons
            run([BIN / "python", "-m", "nmt.lexicon", ckpt], stdout=subprocess.DEVNULL)
        joey_out = work / "joey.test.en"
        joey_cmd = [JOEY_PY, "-m", "joeynmt", "translate", cfg]
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
