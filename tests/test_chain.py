"""scripts/multi30k_chain.py end to end, on a small Multi30k-shaped corpus cut from the demo
corpus and tiny models: every step runs with the experiments' own configs, the second run skips
what the first finished, and a training step that was cut off resumes instead of starting over."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SMALL, SMALL_MODELS

from nmt.data.splits import read_lines

ROOT = Path(__file__).resolve().parents[1]
TINY = ["train.max_minutes=0", "train.max_steps=4", "train.valid_every=2", "train.warmup_steps=1"]


def multi30k_like(demo_dir: Path, out: Path) -> Path:
    """Multi30k's file names (train, val, test_2016_flickr), a few hundred demo pairs."""
    out.mkdir()
    splits = [("train", "train", 300), ("valid", "val", 30), ("test", "test_2016_flickr", 30)]
    for split, name, n in splits:
        for lang in ("de", "en"):
            lines = read_lines(demo_dir / f"{split}.{lang}")[:n]
            (out / f"{name}.{lang}").write_text("".join(t + "\n" for t in lines), encoding="utf-8")
    return out


def chain(data: Path, runs: Path) -> tuple[dict, str]:
    """The chain's JSON report and what it said on stderr."""
    gru = [*SMALL, *SMALL_MODELS["gru"][1:], *TINY]  # the experiments choose the model family
    tf = [*SMALL, *SMALL_MODELS["transformer"][1:], *TINY]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "multi30k_chain.py"), "--data", str(data),
         "--runs", str(runs), "--gru-args", *gru, "--transformer-args", *tf,
         "--alphas", "1.0", "2.0"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.slow  # six trainings and two distillations in subprocesses (minutes on 2 cores)
def test_the_chain_runs_every_step_then_skips_or_resumes(demo_dir, tmp_path):
    data, runs = multi30k_like(demo_dir, tmp_path / "multi30k"), tmp_path / "runs"
    report, _ = chain(data, runs)
    steps = ["tf_long", "distill-both", "kd_both", "kd_both_more", "distill-three", "tf_kd3"]
    assert list(report["steps"]) == steps
    assert not any(s.get("skipped") for s in report["steps"].values())
    # the three-target corpus: the sources three times, the references first
    sources, references = read_lines(data / "train.de"), read_lines(data / "train.en")
    three = runs / "distill-three"
    assert read_lines(three / "train.de") == sources * 3
    assert read_lines(three / "train.en")[:300] == references
    # the second cycles started from the first ones' weights
    for run, first in [("kd_both_more", "kd_both"), ("tf_kd3", "tf_long")]:
        config = (runs / run / "checkpoints" / "best" / "config.yaml").read_text()
        assert str(runs / first / "checkpoints" / "best") in config
    for model in ("recurrent", "transformer"):
        result = report[model]
        assert set(result["valid_bleu"]) == {"1.0", "2.0"}
        assert result["alpha"] in (1.0, 2.0) and result["test"]["report"][1].startswith("  sig")

    # again: a cut-off step (its record gone) resumes its own run, and every step after it runs
    # again, starting over, since its inputs may have changed; the steps before it are kept
    (runs / "chain" / "kd_both_more.json").unlink()
    kept = {run: (runs / "chain" / f"{run}.json").stat().st_mtime_ns for run in steps[:3]}
    scored = next((runs / "tf_kd3").glob("eval-test-*/test.scores.json")).stat().st_mtime_ns
    again, said = chain(data, runs)
    ran = [n for n, s in again["steps"].items() if not s.get("skipped")]
    assert ran == ["kd_both_more", "distill-three", "tf_kd3"]
    assert all((runs / "chain" / f"{r}.json").stat().st_mtime_ns == t for r, t in kept.items())
    lines = {line.split(":")[0]: line for line in said.splitlines() if line.startswith("[chain]")}
    assert lines["[chain] kd_both_more"].endswith("train.resume=true train.init_from=null")
    assert lines["[chain] tf_kd3"].endswith("train.overwrite=true")
    assert next((runs / "tf_kd3").glob("eval-test-*/test.scores.json")).stat().st_mtime_ns > scored
