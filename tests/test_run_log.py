"""The run log: metrics.jsonl and the TensorBoard event files hold the same rows, and a resumed run
drops what the dead run logged after its checkpoint from both."""

import json
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nmt.training.run_log import RunLog
from tests.test_train import train


def scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def jsonl(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_training_writes_the_metrics_rows_as_tensorboard_scalars(tmp_path, demo_dir):
    run = tmp_path / "run"
    train(run, demo_dir, "train.max_steps=4", "train.log_every=2", "train.valid_every=4")
    curves = scalars(run)
    rows = jsonl(run)
    for split, field in [
        ("train", "loss"),
        ("train", "lr"),
        ("train", "tokens_per_s"),
        ("train", "grad_norm"),
        ("valid", "loss"),
        ("valid", "bleu"),
    ]:
        logged = {r["step"]: r[field] for r in rows if r["split"] == split}
        assert logged, (split, field)
        shown = curves[f"{split}/{field}"]
        assert shown.keys() == logged.keys()
        assert all(abs(shown[s] - logged[s]) <= 1e-6 * max(1.0, abs(logged[s])) for s in logged)
    assert "valid/best" not in curves  # bookkeeping fields are not curves


def test_tensorboard_false_writes_no_event_files(tmp_path, demo_dir):
    run = tmp_path / "run"
    train(run, demo_dir, "train.max_steps=2", "train.log_every=1", "train.tensorboard=false")
    assert jsonl(run)
    assert not list(run.glob("events.out.tfevents.*"))


def test_a_resumed_log_forgets_the_steps_after_its_checkpoint(tmp_path):
    with RunLog(tmp_path, tensorboard=True) as log:  # the run that died after step 5
        for step in range(1, 6):
            log.write(step, 0, {"split": "train", "loss": 10.0 + step})
    with RunLog(tmp_path, tensorboard=True, resumed_at=3) as log:  # resumed from step 3
        for step in range(4, 7):
            log.write(step, 0, {"split": "train", "loss": 20.0 + step})
    expected = {1: 11.0, 2: 12.0, 3: 13.0, 4: 24.0, 5: 25.0, 6: 26.0}
    assert {r["step"]: r["loss"] for r in jsonl(tmp_path)} == expected
    assert scalars(tmp_path)["train/loss"] == expected
