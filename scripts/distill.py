"""Sequence-level knowledge distillation (Kim & Rush 2016): a teacher translates the training
sources, and a student trains on the teacher's translations instead of the references.

    python scripts/distill.py runs/tf_long/checkpoints/best --data ../shared/data/multi30k \\
        --out runs/distill-multi30k --alpha 1.5
    nmt-train experiment=multi30k_gru_kd    # the student (data.local_dir=runs/distill-multi30k)

Writes OUT/<train>.<tgt> (the teacher's beam-5 translation of each training source, line for
line) and links every other file of DATA into OUT (the training sources, valid and test with
their references), so OUT is a data.local_dir like DATA. With --with-references the student gets
both: OUT/<train>.<src> holds the sources twice and OUT/<train>.<tgt> the references, then the
teacher's translations (experiment=multi30k_gru_kd_both). Several teachers (each with its own
tokenizer and model family, and with `--alpha A1 A2 ...` its own length penalty) give one copy of
the sources per teacher, their translations in the order given, after the references with
--with-references. Prints one JSON object: the sentences, and per teacher its decoding, the
seconds, and the BLEU and length ratio of its output against the training references (how far the
student's targets are from the human ones).

Each teacher's translation is a file job (`nmt.cli.file_job`): killed, the same command goes on
from the chunks done; under torchrun the processes share out the chunks and rank 0 writes OUT:

    torchrun --standalone --nproc_per_node 2 scripts/distill.py TEACHER --data DATA --out OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sacrebleu.metrics import BLEU

from nmt.checkpoint import load_checkpoint
from nmt.cli.file_job import FileJob, model_digests, rank_device, show_progress
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.device import resolve_device
from nmt.distributed import Dist, from_environment
from nmt.models import restore_model
from nmt.run_config import flatten
from nmt.translation.translator import Translator


def _write(path: Path, lines: list[str]) -> None:
    path.unlink(missing_ok=True)  # may be a link to DATA, left by a run without --with-references
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _translated(
    translator: Translator,
    args: argparse.Namespace,
    src_path: Path,
    teacher: Path,
    number: int,
    where: Dist,
) -> list[str] | None:
    """A teacher's translation of the training sources, as a file job (`nmt.cli.file_job`):
    resumable after a kill, split among torchrun's processes; OUT/.<train>.teacher-N.out while
    it runs. Rank 0 returns the lines (the other processes None)."""
    target = args.out / f".{args.train}.teacher-{number}.out"
    settings = {"models": model_digests([str(teacher)]), "decode": flatten(translator.decode)}
    progress = show_progress(args.progress)
    FileJob(src_path, target, settings, args.chunk_lines, where, progress).run(
        lambda lines, first: translator.translate(lines, first_line=first)
    )
    if not where.main:
        return None
    outputs = read_lines(target)
    target.unlink()
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teachers", nargs="+", help="checkpoint directories of the teachers")
    parser.add_argument("--data", type=Path, required=True, help="directory of plain text files")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train", default="train", help="file stem of the training split")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument(
        "--alpha",
        type=float,
        nargs="+",
        default=[1.0],
        help="gnmt length penalty: one for every teacher, or one per teacher in order",
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--chunk-lines", type=int, default=1000, help="lines per unit of work")
    parser.add_argument("--progress", default="auto", choices=["auto", "true", "false"])
    parser.add_argument(
        "--with-references",
        action="store_true",
        help="train on the references and the translations (each source twice)",
    )
    args = parser.parse_args()
    if args.out.resolve() == args.data.resolve():
        parser.error("--out must not be --data: the training targets would be replaced")

    if len(args.alpha) not in (1, len(args.teachers)):
        parser.error(f"--alpha: give 1 value or {len(args.teachers)} (one per teacher)")
    alphas = args.alpha * len(args.teachers) if len(args.alpha) == 1 else args.alpha
    where = from_environment()
    device = resolve_device(rank_device(args.device, where))
    ckpts = [load_checkpoint(teacher) for teacher in args.teachers]
    langs = {(c.config.data.src_lang, c.config.data.tgt_lang) for c in ckpts}
    if len(langs) > 1:
        parser.error(f"the teachers translate different language pairs: {sorted(langs)}")
    ((src_lang, tgt_lang),) = langs
    src_path = args.data / f"{args.train}.{src_lang}"
    sources = read_lines(src_path)
    references = read_lines(args.data / f"{args.train}.{tgt_lang}")

    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / f"{args.train}.{tgt_lang}"
    source = args.out / f"{args.train}.{src_lang}"
    copies = len(ckpts) + args.with_references  # of the sources, one per target set
    written = {target, source} if copies > 1 else {target}
    for path in sorted(args.data.iterdir()) if where.main else []:
        link = args.out / path.name
        if path.is_file() and link not in written:
            link.unlink(missing_ok=True)  # a file an earlier run wrote, with other options
            link.symlink_to(path.resolve())
    targets = [references] if args.with_references else []
    report = []
    for teacher, ckpt, alpha in zip(args.teachers, ckpts, alphas):
        decode = DecodeConfig(
            strategy=Strategy.beam,
            beam_size=args.beam_size,
            length_penalty=LengthPenalty.gnmt,
            alpha=alpha,
        )
        translator = Translator(restore_model(ckpt, device), ckpt.vocabs, device, decode=decode)
        began = time.perf_counter()
        outputs = _translated(translator, args, src_path, Path(teacher), len(targets), where)
        seconds = time.perf_counter() - began
        if outputs is None:
            continue  # another process writes the results
        targets.append(outputs)
        score = BLEU().corpus_score(outputs, [references])
        report.append(
            {
                "teacher": str(Path(teacher).resolve()),
                "decode": decode.describe(),
                "seconds": round(seconds, 1),
                "teacher_vs_references_bleu": round(score.score, 2),
                "length_ratio": round(score.sys_len / score.ref_len, 3),
            }
        )
    if not where.main:
        return
    if copies > 1:
        _write(source, sources * copies)
    _write(target, [line for lines in targets for line in lines])
    print(
        json.dumps(
            {
                "benchmark": "distill",
                "sentences": len(sources),
                "teachers": report,
                "with_references": args.with_references,
                "out": str(target),
            }
        )
    )


if __name__ == "__main__":
    main()
