"""Peak memory and time of fine-tuning an NLLB-200 model of nllb-200-distilled-600M's shape (or,
with --kind marian, a Marian model of OPUS-MT de-en's), in full and with LoRA, on the CPU. Prints
JSON.

    python scripts/bench_lora_memory.py --data-dir ../shared/data/multi30k --work runs/lora_mem
    python scripts/bench_lora_memory.py --kind marian --data-dir ../shared/data/multi30k \
        --work runs/lora_mem_marian

The model is the random-weight twin of `scripts/bench_import.py --kind nllb` (12+12 layers, d 1024,
16 heads, ff 4096, 256,203 pieces: 615M parameters; --kind marian: 6+6 layers, d 512, 58,101
pieces, 74M), written into --work once, imported with
nmt-import (whole; with --keep FILES also trimmed to their pieces, a second model) and reused.
Each fine-tune is `nmt-train --config-dir IMPORT model=imported train.init_from=IMPORT` on the
first --pairs pairs of Multi30k de-en (deu_Latn -> eng_Latn) for --updates optimizer updates of
about --batch-tokens pieces, validation loss on --valid pairs at the end (no validation decoding,
no calibration: random weights translate to the length limit), in a process of its own that
reports its peak resident memory (VmHWM, which starts afresh at exec). Legs: full fine-tuning
(Adam over every weight) and LoRA of each --ranks on q, kv, out (--targets). Beside the peak:
the run's wall time (reading the model and data, the updates, validation and checkpoints), the
trainable parameters and the size of the checkpoint each run writes (with its optimizer state).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def tune_child(argv: list[str]) -> None:
    """--tune-child: one nmt-train run in this fresh process; its peak memory and time as JSON."""
    from nmt.cli import main as cli

    start = time.perf_counter()
    code = cli.train(argv)
    seconds = time.perf_counter() - start
    print(json.dumps({"rc": code, "peak_mb": round(peak_mb()), "seconds": round(seconds, 1)}))


def small_corpus(data: Path, out: Path, pairs: int, valid: int) -> None:
    """The first `pairs` training pairs and `valid` validation pairs of Multi30k de-en."""
    out.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        train = (data / f"train.{lang}").read_text("utf-8").splitlines()[:pairs]
        val = (data / f"val.{lang}").read_text("utf-8").splitlines()[:valid]
        (out / f"train.{lang}").write_text("\n".join(train) + "\n", "utf-8")
        (out / f"val.{lang}").write_text("\n".join(val) + "\n", "utf-8")


def fine_tune(model: Path, run: Path, data: Path, args, *extra: str) -> dict:
    shutil.rmtree(run, ignore_errors=True)
    argv = [
        "--config-dir", str(model), "model=imported", f"train.init_from={model}",
        "data=multi30k", f"data.local_dir={data}", f"data.cache_dir={run.parent / 'cache'}",
        *(["+data.language_codes.de=deu_Latn", "+data.language_codes.en=eng_Latn"]
          if args.kind == "nllb" else []),
        f"run_dir={run}", f"train.max_steps={args.updates}", f"train.valid_every={args.updates}",
        f"train.batch_tokens={args.batch_tokens}", "train.valid_bleu=false",
        "train.calibrate=false", "train.metric=loss", "train.tensorboard=false",
        "train.keep_last=1", "train.scheduler=constant", "train.log_every=1", *extra,
    ]  # fmt: skip
    child = subprocess.run(
        [sys.executable, __file__, "--tune-child", json.dumps(argv)],
        stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    report = json.loads(child.stdout.strip().splitlines()[-1])
    if child.returncode != 0 or report["rc"] != 0:
        raise SystemExit(f"fine-tuning {run} failed")
    import torch

    best = run / "checkpoints" / "best" / "ckpt.pt"
    payload = torch.load(best, map_location="cpu", weights_only=True, mmap=True)
    weights = payload.get("adapters") or payload["model"]
    base = torch.load(model / "ckpt.pt", map_location="cpu", weights_only=True, mmap=True)
    total = sum(
        {v.untyped_storage().data_ptr(): v.numel() for v in base["model"].values()}.values()
    )
    trainable = sum(v.numel() for v in weights.values()) if "adapters" in payload else total
    return {
        "updates": payload["step"],
        "peak_mb": report["peak_mb"],
        "run_seconds": report["seconds"],
        "trainable_share": round(trainable / total, 4),
        "checkpoint_mb": round(best.stat().st_size / 1e6, 1),
    }


def main() -> None:
    if sys.argv[1:2] == ["--tune-child"]:  # a fine-tune in a process of its own
        tune_child(json.loads(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=["nllb", "marian"], default="nllb", help="the twin")
    parser.add_argument("--data-dir", type=Path, required=True, help="Multi30k's plain files")
    parser.add_argument("--work", type=Path, required=True, help="the twin, imports and runs")
    parser.add_argument("--keep", type=Path, nargs="*", default=[], help="also a trimmed import")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--valid", type=int, default=64)
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--batch-tokens", type=int, default=512)
    parser.add_argument("--ranks", type=int, nargs="+", default=[16])
    parser.add_argument("--targets", default="q,kv,out", help="train.lora.targets")
    args = parser.parse_args()
    work = args.work
    twin = work / "twin"
    if not twin.is_dir():
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "bench_import.py"), "--kind", args.kind,
             "--text", str(args.data_dir / "train.de"), "--write-twin", str(twin)],
            check=True, cwd=ROOT,
        )  # fmt: skip
        (twin / "pytorch_model.bin").unlink(missing_ok=True)  # safetensors is enough here
    from nmt.pretrained.importer import import_model

    models = {"whole": work / "nmt"}
    if args.keep:
        models["trimmed"] = work / "nmt_trimmed"
    for name, path in models.items():
        if not path.is_dir():
            import_model(
                str(twin), path, [str(k) for k in args.keep] if name == "trimmed" else None
            )
    data = work / "data"
    small_corpus(args.data_dir, data, args.pairs, args.valid)
    result: dict = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("work", "data_dir", "keep")},
        "keep": [str(k) for k in args.keep],
    }
    for name, path in models.items():
        rows = {"full": fine_tune(path, work / f"{name}_full", data, args)}
        print(name, "full", rows["full"], file=sys.stderr)
        for rank in args.ranks:
            rows[f"lora_r{rank}"] = fine_tune(
                path, work / f"{name}_lora{rank}", data, args, f"train.lora.rank={rank}",
                f"train.lora.targets=[{args.targets}]",
            )  # fmt: skip
            print(name, rank, rows[f"lora_r{rank}"], file=sys.stderr)
        for run in [work / f"{name}_full"] + [work / f"{name}_lora{r}" for r in args.ranks]:
            shutil.rmtree(run, ignore_errors=True)  # a full run's checkpoints are GBs
        result[name] = rows
    import torch

    result["torch"] = torch.__version__
    result["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
