"""scripts/distill.py: the teacher's translations replace the training targets line for line, the
other files are linked, and a student trains on the result as on any data.local_dir."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.config import DecodeConfig, LengthPenalty, Strategy
from nmt.data.splits import read_lines
from nmt.translation.translator import Translator

ROOT = Path(__file__).resolve().parents[1]


def test_a_student_trains_on_the_teachers_translations(train_small, demo_dir, tmp_path):
    teacher = train_small("gru")
    out = tmp_path / "distilled"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "distill.py"), str(teacher), "--data",
         str(demo_dir), "--out", str(out), "--beam-size", "2"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    sources = read_lines(demo_dir / "train.de")
    assert report["sentences"] == len(sources)
    targets = read_lines(out / "train.en")
    assert len(targets) == len(sources) and (out / "train.en").is_file()
    assert not (out / "train.en").is_symlink() and (out / "train.de").is_symlink()
    assert read_lines(out / "valid.en") == read_lines(demo_dir / "valid.en")
    # what the script wrote is what the teacher says, batched differently
    beam = DecodeConfig(strategy=Strategy.beam, beam_size=2, length_penalty=LengthPenalty.gnmt,
                        alpha=1.0)  # fmt: skip
    check = Translator.from_checkpoint(teacher, beam, "cpu")
    assert check.translate(sources[:20]) == targets[:20]

    run = tmp_path / "student"
    args = ["data=demo", f"data.local_dir={out}", f"run_dir={run}", "data.tokenizer.vocab_size=400"]
    args += ["model=gru_bahdanau", "model.emb_size=32", "model.hidden_size=32"]
    assert cli.train([*args, "train.max_steps=4", "train.valid_every=4"]) == 0
    assert (run / "checkpoints" / "best").exists()


def test_with_references_the_student_gets_both_targets(train_small, demo_dir, tmp_path):
    teacher, out = train_small("gru"), tmp_path / "distilled"

    def distill(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "distill.py"), str(teacher), "--data",
             str(demo_dir), "--out", str(out), "--beam-size", "2", *extra],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip

    assert distill().returncode == 0
    translations = read_lines(out / "train.en")
    # the same --out again: the linked sources become a written file
    assert distill("--with-references").returncode == 0
    sources, references = read_lines(demo_dir / "train.de"), read_lines(demo_dir / "train.en")
    assert read_lines(out / "train.de") == sources + sources
    assert read_lines(out / "train.en") == references + translations
    assert not (out / "train.de").is_symlink() and (out / "valid.de").is_symlink()
    # and back: the sources are a link to the data again
    assert distill().returncode == 0
    assert (out / "train.de").is_symlink() and read_lines(out / "train.en") == translations

    refused = distill("--out", str(demo_dir))  # argparse: the last --out wins
    assert refused.returncode != 0 and "must not be --data" in refused.stderr


@pytest.mark.slow  # translates the demo training set three times (about 30 s alone on 2 cores)
def test_several_teachers_each_get_a_copy_of_the_sources(train_small, demo_dir, tmp_path):
    # a recurrent and a Transformer teacher, each with its own tokenizer and length penalty
    gru, transformer = train_small("gru"), train_small("transformer")
    out, single = tmp_path / "both", tmp_path / "single"

    def distill(out: Path, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "distill.py"), *args, "--data", str(demo_dir),
             "--out", str(out), "--beam-size", "2"],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip

    def report(done: subprocess.CompletedProcess) -> dict:
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    both = report(distill(out, str(gru), str(transformer), "--alpha", "1.0", "2.0",
                          "--with-references"))  # fmt: skip
    assert [(t["teacher"], t["decode"]) for t in both["teachers"]] == [
        (str(gru.resolve()), "beam 2, length penalty gnmt alpha 1"),
        (str(transformer.resolve()), "beam 2, length penalty gnmt alpha 2"),
    ]
    sources, references = read_lines(demo_dir / "train.de"), read_lines(demo_dir / "train.en")
    assert read_lines(out / "train.de") == sources * 3
    targets = read_lines(out / "train.en")
    assert targets[: len(sources)] == references
    # each teacher's block is what that teacher alone writes
    n = len(sources)
    report(distill(single, str(transformer), "--alpha", "2.0"))
    assert targets[2 * n :] == read_lines(single / "train.en")
    report(distill(single, str(gru)))
    assert targets[n : 2 * n] == read_lines(single / "train.en")

    refused = distill(tmp_path / "x", str(gru), str(transformer), "--alpha", "1", "2", "3")
    assert refused.returncode != 0 and "give 1 value or 2" in refused.stderr
    assert not (tmp_path / "x").exists()


def test_under_torchrun_the_processes_write_one_processs_targets(train_small, demo_dir, tmp_path):
    """Each teacher's translation is a file job: 2 torchrun processes share its chunks, and the
    targets are one process's, byte for byte (rank 0 writes OUT)."""
    teacher = train_small("gru")
    common = [str(ROOT / "scripts" / "distill.py"), str(teacher), "--data", str(demo_dir),
              "--beam-size", "2", "--chunk-lines", "500", "--progress", "false"]  # fmt: skip
    alone = subprocess.run([sys.executable, *common, "--out", str(tmp_path / "one")],
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         *common, "--out", str(tmp_path / "two")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert two.returncode == 0, two.stderr[-2000:]
    assert (tmp_path / "two" / "train.en").read_bytes() == (
        tmp_path / "one" / "train.en"
    ).read_bytes()
    assert two.stdout.count('"benchmark": "distill"') == 1  # rank 0 alone reports
