"""A Marian model with learned weights, end to end: trained with `transformers` on Multi30k,
imported with nmt-import, scored by both, fine-tuned with nmt-train. Prints JSON.

    python scripts/marian_multi30k.py --data-dir ../shared/data/multi30k --work runs/marian \\
        --hf-minutes 10 --tune-minutes 5

1. Two sentencepiece models (de, en; --pieces each) and a joint vocab.json, as OPUS-MT ships them.
2. A MarianMTModel (3+3 layers, d 256, 4 heads, ff 1024, swish, tied) trained with transformers'
   model in a plain loop (Adam, inverse-square-root schedule, label smoothing 0.1, batches of
   about --batch-tokens target pieces) for --hf-minutes, saved with save_pretrained.
3. `nmt-import` of that directory; test2016 translated with beam 5 by Hugging Face's `generate`
   (length_penalty 1.0, early_stopping) and by nmt (length penalty `average`), the same length
   limit: BLEU of each, and how many lines are identical.
4. `nmt-train --config-dir OUT model=imported train.init_from=OUT` on Multi30k for
   --tune-minutes (or --tune-updates updates, the same for every leg whatever else runs on the
   machine), validated every --valid-every updates; test2016 BLEU of the best checkpoint (nmt,
   beam 5, the same settings), beside its valid BLEU (greedy, as training validates).
5. With --lora-rank R, the same for LoRA (`train.lora.rank=R`), one leg per --lora-lr: each
   fine-tune runs in a process of its own, which reports its peak resident memory (VmHWM, which
   starts afresh at exec, unlike ru_maxrss); beside BLEU, the updates made, the trainable
   parameters and the size of the checkpoint each writes. `lora_chosen` names the leg with the
   best valid BLEU: the one to quote.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu
import sentencepiece as spm
import torch

from nmt.cli import main as cli
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.pretrained.marian import import_marian
from nmt.translation.translator import Translator

MAX_NEW = 100  # generated pieces at most, both systems


def read(path: Path) -> list[str]:
    return path.read_text("utf-8").splitlines()


def tokenizer_files(out: Path, src: list[str], tgt: list[str], pieces: int) -> dict:
    vocab = {"</s>": 0, "<unk>": 1}
    for name, lines in (("source", src), ("target", tgt)):
        spm.SentencePieceTrainer.Train(
            sentence_iterator=iter(lines), model_prefix=str(out / name), vocab_size=pieces,
            model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2,
            hard_vocab_limit=False,
        )  # fmt: skip
        (out / f"{name}.model").rename(out / f"{name}.spm")
        (out / f"{name}.vocab").unlink()
        sp = spm.SentencePieceProcessor(model_file=str(out / f"{name}.spm"))
        for i in range(sp.GetPieceSize()):
            if not sp.IsControl(i) and not sp.IsUnknown(i):
                vocab.setdefault(sp.IdToPiece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    return vocab


def batches(tokenizer, src: list[str], tgt: list[str], batch_tokens: int, seed: int):
    """Endless shuffled batches of pairs of similar length, about batch_tokens target pieces."""
    lengths = [len(t.split()) for t in tgt]
    rng = random.Random(seed)
    while True:
        order = sorted(range(len(src)), key=lambda i: (lengths[i], rng.random()))
        groups, group, size = [], [], 0
        for i in order:
            group.append(i)
            size += lengths[i] * 1.4 + 2  # pieces per word, about
            if size >= batch_tokens:
                groups.append(group)
                group, size = [], 0
        rng.shuffle(groups)
        for group in groups:
            yield tokenizer(
                [src[i] for i in group], text_target=[tgt[i] for i in group], padding=True,
                return_tensors="pt",
            )  # fmt: skip


def train_marian(out: Path, src, tgt, args) -> dict:
    import transformers

    vocab = tokenizer_files(out, src, tgt, args.pieces)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=256, encoder_layers=3,
        decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=1024, decoder_ffn_dim=1024, activation_function="swish",
        max_position_embeddings=512, pad_token_id=vocab["<pad>"], eos_token_id=0,
        decoder_start_token_id=vocab["<pad>"], scale_embedding=True, dropout=0.1,
        attention_dropout=0.0, share_encoder_decoder_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(args.seed)
    model = transformers.MarianMTModel(config)
    model.generation_config.bad_words_ids = [[vocab["<pad>"]]]  # as OPUS-MT's
    tokenizer = transformers.MarianTokenizer(
        str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
        source_lang="de", target_lang="en",
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98))
    warmup, peak = 400, 1e-3
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: peak * min((s + 1) / warmup, math.sqrt(warmup / (s + 1)))
    )
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
    model.train()
    start, steps = time.monotonic(), 0
    for batch in batches(tokenizer, src, tgt, args.batch_tokens, args.seed):
        if time.monotonic() - start > args.hf_minutes * 60:
            break
        labels = batch.pop("labels")
        labels[labels == tokenizer.pad_token_id] = -100
        logits = model(**batch, labels=labels).logits
        loss = loss_fn(logits.view(-1, logits.size(-1)), labels.view(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        steps += 1
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {"updates": steps, "minutes": round((time.monotonic() - start) / 60, 2)}


def hf_translate(directory: Path, texts: list[str], batch: int = 32) -> list[str]:
    import transformers

    model = transformers.MarianMTModel.from_pretrained(directory).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(directory)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = [""] * len(texts)
    with torch.no_grad():
        for k in range(0, len(order), batch):
            rows = order[k : k + batch]
            inputs = tokenizer([texts[i] for i in rows], padding=True, return_tensors="pt")
            ids = model.generate(
                **inputs, num_beams=5, length_penalty=1.0, early_stopping=True,
                max_new_tokens=MAX_NEW, do_sample=False,
            )  # fmt: skip
            for i, text in zip(rows, tokenizer.batch_decode(ids, skip_special_tokens=True)):
                out[i] = text
    return out


def nmt_translate(ckpt: Path, texts: list[str]) -> list[str]:
    decode = DecodeConfig(
        strategy=Strategy.beam, beam_size=5, length_penalty=LengthPenalty.average,
        max_len_a=0.0, max_len_b=MAX_NEW - 1,
    )  # fmt: skip
    return Translator.from_checkpoint(ckpt, decode, "cpu").translate(texts)


BLEU = sacrebleu.BLEU()


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def tune_child(argv: list[str]) -> None:
    """--tune-child: one nmt-train run in this fresh process, then its peak memory as JSON."""
    code = cli.train(argv)
    print(json.dumps({"rc": code, "peak_mb": round(peak_mb())}))


def parameters(state: dict) -> int:
    """Elements of a state dict, a tied table once (its names share one storage)."""
    return sum({v.untyped_storage().data_ptr(): v.numel() for v in state.values()}.values())


def fine_tune(imported: Path, run: Path, data: Path, args, lr: float, *extra: str) -> dict:
    minutes, valid_every = args.tune_minutes, args.valid_every
    if args.tune_updates:
        extra = (f"train.max_steps={args.tune_updates}", *extra)
        minutes = 0.0
    argv = [
        "--config-dir", str(imported), "model=imported", f"train.init_from={imported}",
        "data=multi30k", f"data.local_dir={data}", f"run_dir={run}",
        f"train.max_minutes={minutes}", f"train.lr={lr}", "train.scheduler=constant",
        f"train.valid_every={valid_every}", "train.label_smoothing=0.1", *extra,
    ]  # fmt: skip
    start = time.monotonic()
    child = subprocess.run(
        [sys.executable, __file__, "--tune-child", json.dumps(argv)],
        stdout=subprocess.PIPE, text=True, check=False,
    )  # fmt: skip
    report = json.loads(child.stdout.strip().splitlines()[-1])
    if child.returncode != 0 or report["rc"] != 0:
        raise SystemExit(f"fine-tuning {run} failed")
    best = run / "checkpoints" / "best"
    payload = torch.load(best / "ckpt.pt", map_location="cpu", weights_only=True)
    weights = payload.get("adapters") or payload["model"]
    base = torch.load(imported / "ckpt.pt", map_location="cpu", weights_only=True)["model"]
    trainable, total = parameters(weights), parameters(base)
    return {
        "minutes": round((time.monotonic() - start) / 60, 2),  # the whole run, validation too
        "lr": lr,
        "updates": payload["step"],  # the best checkpoint's, chosen on valid
        "valid_bleu": payload["metrics"].get("bleu"),
        "peak_mb": report["peak_mb"],
        "trainable_share": round(trainable / total, 4),
        "checkpoint_mb": round((best / "ckpt.pt").stat().st_size / 1e6, 2),
        "checkpoint_share": round(
            (best / "ckpt.pt").stat().st_size / (imported / "ckpt.pt").stat().st_size, 4
        ),
    }


def bleu(hyps: list[str], refs: list[str]) -> float:
    return round(BLEU.corpus_score(hyps, [refs]).score, 2)


def main() -> None:
    if sys.argv[1:2] == ["--tune-child"]:  # a fine-tune in a process of its own (`fine_tune`)
        tune_child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument(
        "--work", type=Path, required=True,
        help="a new directory, or an earlier run's (its trained Marian model is reused)",
    )  # fmt: skip
    parser.add_argument("--hf-minutes", type=float, default=10.0)
    parser.add_argument("--tune-minutes", type=float, default=5.0)
    parser.add_argument("--tune-updates", type=int, default=0, help="0: --tune-minutes")
    parser.add_argument("--valid-every", type=int, default=200)
    parser.add_argument("--tune-lr", type=float, default=3e-4)
    parser.add_argument("--pieces", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lora-rank", type=int, default=0, help="0: no LoRA leg")
    parser.add_argument("--lora-lr", type=float, nargs="+", default=[2e-3])
    parser.add_argument("--lora-targets", default="q,kv,out", help="train.lora.targets")
    parser.add_argument("--skip-full", action="store_true", help="the LoRA leg alone")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.data_dir
    src, tgt = read(data / "train.de"), read(data / "train.en")
    test_src, test_ref = read(data / "test_2016_flickr.de"), read(data / "test_2016_flickr.en")
    hf_dir, record = args.work / "hf", args.work / "hf_training.json"
    if not record.is_file():  # a --work of an earlier run keeps its trained model
        shutil.rmtree(hf_dir, ignore_errors=True)
        hf_dir.mkdir()
        record.write_text(json.dumps(train_marian(hf_dir, src, tgt, args)))
    result = {"hf_training": json.loads(record.read_text())}
    imported = args.work / "imported"
    if not imported.is_dir():
        import_marian(str(hf_dir), imported)
    if not args.skip_full:
        shutil.rmtree(args.work / "tuned", ignore_errors=True)
    if not args.skip_full:  # the import against Hugging Face, then full fine-tuning
        theirs, ours = hf_translate(hf_dir, test_src), nmt_translate(imported, test_src)
        result["test2016"] = {
            "hugging_face_bleu": bleu(theirs, test_ref),
            "nmt_bleu": bleu(ours, test_ref),
            "identical_lines": f"{sum(a == b for a, b in zip(theirs, ours))}/{len(ours)}",
        }
        full = fine_tune(imported, args.work / "tuned", data, args, args.tune_lr)
        best = args.work / "tuned" / "checkpoints" / "best"
        tuned = bleu(nmt_translate(best, test_src), test_ref)
        result["fine_tuned"] = {**full, "test2016_bleu": tuned}
    for lr in args.lora_lr if args.lora_rank else []:
        run = args.work / f"lora_{lr:g}"
        shutil.rmtree(run, ignore_errors=True)
        lora = fine_tune(
            imported, run, data, args, lr,
            f"train.lora.rank={args.lora_rank}", f"train.lora.targets=[{args.lora_targets}]",
        )  # fmt: skip
        best = run / "checkpoints" / "best"
        result[f"lora_{lr:g}"] = {
            "rank": args.lora_rank, "targets": args.lora_targets, **lora,
            "test2016_bleu": bleu(nmt_translate(best, test_src), test_ref),
        }  # fmt: skip
        print(run.name, result[run.name], file=sys.stderr)
    legs = [k for k in result if k.startswith("lora_")]
    if legs:
        result["lora_chosen"] = max(legs, key=lambda k: result[k]["valid_bleu"] or 0.0)
    result["signature"] = str(BLEU.get_signature())
    result["torch"] = torch.__version__
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
