"""Faults a long training run meets, injected one by one; each test checks that nothing was lost:
preemption (SIGTERM/SIGINT), a resume with changed settings, a damaged newest checkpoint, a full
disk, NaN/inf updates, out-of-memory batches."""

import contextlib
import errno
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_train import SMALL, SMALL_RNN, losses

from nmt import checkpoint as checkpoint_module
from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.errors import NMTError
from nmt.training import trainer as train_module
from nmt.training.setup import prepare_run
from nmt.training.trainer import Trainer

QUICK = ["train.valid_bleu=false", "train.metric=loss", "train.log_every=1"]


def args(run_dir: Path, demo_dir: Path, *extra: str) -> list[str]:
    return ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *SMALL_RNN,
            *QUICK, *extra]  # fmt: skip


def last_step(run_dir: Path) -> int:
    return load_checkpoint(run_dir / "checkpoints" / "last").payload["step"]


# --- preemption ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_at_the_stop_step_and_resume_continues_the_same_losses(
    tmp_path, demo_dir, monkeypatch, capsys, sig
):
    common = ["train.valid_every=4", "train.max_steps=12", "model.dropout=0.3"]
    assert cli.train(args(tmp_path / "straight", demo_dir, *common)) == 0
    stop_at = random.Random(sig).randint(5, 10)  # between validations, never on one
    stop_at += stop_at % 4 == 0
    real_update = Trainer.update

    def signalled(self, group):
        out = real_update(self, group)
        if self.progress.step == stop_at:
            os.kill(os.getpid(), sig)  # delivered now, in the middle of the loop
        return out

    monkeypatch.setattr(Trainer, "update", signalled)
    assert cli.train(args(tmp_path / "split", demo_dir, *common)) == 0
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert f"stopped by {signal.Signals(sig).name} after step {stop_at}" in err
    assert "train.resume=true" in err
    assert last_step(tmp_path / "split") == stop_at
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers are put back
    assert cli.train(args(tmp_path / "split", demo_dir, *common, "train.resume=true")) == 0
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last").payload["model"]
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last").payload["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_to_the_nmt_train_command_exits_0_with_a_checkpoint(tmp_path, demo_dir):
    run_dir = tmp_path / "run"
    code = "from nmt.cli.main import main_train; main_train()"
    extra = ["train.max_steps=100000", "train.valid_every=100000"]
    cmd = [sys.executable, "-c", code, *args(run_dir, demo_dir, *extra)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    step = last_step(run_dir)
    assert step >= 3 and f"stopped by SIGTERM after step {step}" in err


# --- resume with changed settings ---------------------------------------------------------------


def test_resume_with_changed_batching_or_data_is_refused_naming_the_keys(
    tmp_path, demo_dir, capsys
):
    run = tmp_path / "run"
    assert cli.train(args(run, demo_dir, "train.max_steps=2", "train.valid_every=2")) == 0
    capsys.readouterr()
    for change, key in [
        ("train.batch_tokens=300", "train.batch_tokens=600 (now 300)"),
        ("train.accum_steps=2", "train.accum_steps=1 (now 2)"),
        ("train.length_step=8", "train.length_step=0 (now 8)"),
        ("seed=7", "seed="),
        ("data.max_len=20", "data.max_len="),
    ]:
        extra = ["train.max_steps=4", "train.resume=true", change]
        assert cli.train(args(run, demo_dir, *extra)) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert key in err and "train.init_from=" in err, err
    assert last_step(run) == 2  # nothing was touched
    # what may change: the length of the run, the learning rate
    extra = ["train.max_steps=3", "train.valid_every=3", "train.lr=0.001", "train.resume=true"]
    assert cli.train(args(run, demo_dir, *extra)) == 0
    assert last_step(run) == 3


def test_init_from_starts_a_new_run_from_the_weights(tmp_path, demo_dir, capsys):
    first = tmp_path / "first"
    assert cli.train(args(first, demo_dir, "train.max_steps=2", "train.valid_every=2")) == 0
    source = first / "checkpoints" / "last"
    # lr 0: the new run's weights stay the loaded ones, whatever else it does
    extra = [f"train.init_from={source}", "train.batch_tokens=300", "train.lr=0"]
    extra += ["train.max_steps=2", "train.valid_every=2"]
    assert cli.train(args(tmp_path / "second", demo_dir, *extra)) == 0
    assert "optimizer, learning-rate schedule, step count" in capsys.readouterr().err
    a = load_checkpoint(source).payload["model"]
    b = load_checkpoint(tmp_path / "second" / "checkpoints" / "last").payload["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert sorted(losses(tmp_path / "second")) == [1, 2]  # a new step count
    bad = [f"train.init_from={source}", "data.tokenizer.vocab_size=300", "train.max_steps=1"]
    assert cli.train(args(tmp_path / "third", demo_dir, *bad)) == cli.EXIT_USAGE
    assert "data.tokenizer.vocab_size=400 (now 300)" in capsys.readouterr().err


# --- damaged checkpoint, full disk -------------------------------------------------------------


def test_a_truncated_last_checkpoint_falls_back_to_the_newest_readable_one(
    tmp_path, demo_dir, capsys
):
    common = ["train.valid_every=3", "train.keep_last=3"]
    assert cli.train(args(tmp_path / "straight", demo_dir, *common, "train.max_steps=9")) == 0
    run = tmp_path / "run"
    assert cli.train(args(run, demo_dir, *common, "train.max_steps=6")) == 0
    damaged = (run / "checkpoints" / "last").resolve()
    os.truncate(damaged / "ckpt.pt", 1000)
    capsys.readouterr()
    assert cli.train(args(run, demo_dir, *common, "train.max_steps=9", "train.resume=true")) == 0
    err = capsys.readouterr().err
    assert damaged.name in err and "step-00000003" in err, err
    assert losses(run) == losses(tmp_path / "straight")  # steps 4-6 were trained again, alike


def test_a_full_disk_while_saving_keeps_the_previous_checkpoint(
    tmp_path, demo_dir, monkeypatch, capsys
):
    real_save, saves = torch.save, {"n": 0}

    def disk_full_on_second_save(obj, f, *a, **k):
        saves["n"] += "model" in obj  # checkpoints only (the run's lexicon.pt is saved too)
        if saves["n"] == 2:
            f.write(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(checkpoint_module.torch, "save", disk_full_on_second_save)
    run = tmp_path / "run"
    assert cli.train(args(run, demo_dir, "train.max_steps=4", "train.valid_every=2")) != 0
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert "No space left on device" in err[-1] and "step-00000004" in err[-1]
    assert "Traceback" not in "\n".join(err)
    root = run / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["best", "last", "step-00000002"]
    assert last_step(run) == 2  # intact, and still what `last` names


def test_saves_fsync_the_directory_after_each_rename(tmp_path, demo_dir, monkeypatch):
    synced = []
    real = checkpoint_module._fsync_dir
    monkeypatch.setattr(checkpoint_module, "_fsync_dir", lambda p: synced.append(p) or real(p))
    run = tmp_path / "run"
    assert cli.train(args(run, demo_dir, "train.max_steps=1", "train.valid_every=1")) == 0
    root = run / "checkpoints"
    assert synced.count(root) >= 3  # the step directory, best, last


# --- bad updates --------------------------------------------------------------------------------


@pytest.fixture
def trainer(tmp_path, demo_dir) -> Trainer:
    cfg = cli.compose_config("train", args(tmp_path / "run", demo_dir, "train.max_bad_updates=3"))
    data, model, _ = prepare_run(cfg)
    return Trainer(cfg, model, data, torch.device("cpu"))


def groups(trainer: Trainer) -> list[list[list[int]]]:
    batches = epoch_batches(
        trainer.data.train.src_lens, trainer.data.train.tgt_lens, 600, trainer.cfg.seed, 0, 1
    )
    return [[b] for b in batches]


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def moments(trainer: Trainer) -> dict[tuple[str, str], torch.Tensor]:
    """The optimizer's state (moments, step count) of every parameter, keyed by parameter name and
    state name: the state names repeat across parameters."""
    state = trainer.optimizer.state
    return {
        (name, key): value.clone()
        for name, param in trainer.model.named_parameters()
        for key, value in state.get(param, {}).items()
    }


def unchanged(before: dict, after: dict) -> bool:
    return before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def inject(monkeypatch, fault, at: set[int], trainer: Trainer) -> None:
    """Make the loss of the updates numbered in `at` go wrong with `fault`."""
    real = train_module.batch_loss

    def faulty(model, batch, smoothing, guide=None):
        loss, nll = real(model, batch, smoothing, guide)
        if trainer.progress.step in at:
            if fault == "nan":
                return loss * float("nan"), nll * float("nan")
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return loss, nll

    monkeypatch.setattr(train_module, "batch_loss", faulty)


@pytest.mark.parametrize("fault", ["nan", "oom"])
def test_a_bad_update_is_skipped_and_leaves_the_weights_alone(trainer, monkeypatch, caplog, fault):
    inject(monkeypatch, fault, {2}, trainer)
    batches = groups(trainer)
    trainer.update(batches[0])
    before, optimizer = weights(trainer), moments(trainer)
    assert len(optimizer) == 3 * len(list(trainer.model.parameters()))  # step, exp_avg, exp_avg_sq
    done = trainer.update(batches[1])
    assert not done.applied  # and the window leaves it out: see the log line test below
    after = weights(trainer)
    assert unchanged(before, after)
    # the moments and the step count too: a skipped update is no update at all
    assert unchanged(optimizer, moments(trainer))
    trainer.bad.settle()  # what the loop does once per log window
    assert trainer.bad.skipped == 1 and trainer.progress.step == 2
    err = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "step 2:" in err and "update skipped" in err
    if fault == "oom":
        assert f"{len(batches[1][0])} sentences" in err
    done = trainer.update(batches[2])
    assert done.applied and done.tokens > 0 and torch.isfinite(done.sums).all()
    assert any(not torch.equal(after[k], v) for k, v in trainer.model.state_dict().items())


@pytest.mark.parametrize(
    "fault, advice", [("nan", "train.lr"), ("oom", "train.batch_tokens (now 600)")]
)
def test_repeated_bad_updates_stop_the_run_with_advice(trainer, monkeypatch, fault, advice):
    inject(monkeypatch, fault, {2, 3, 4, 5}, trainer)
    batches = groups(trainer)
    for group in batches[:3]:
        trainer.update(group)
    with pytest.raises(NMTError, match="stopping at step 4: 3 updates in a row") as err:
        trainer.update(batches[3])  # out of memory is known on the host: it stops here
        trainer.update(batches[4])  # a NaN is read once per window: the run stops there
        trainer.bad.settle()
    assert advice in str(err.value)


def test_updates_that_recover_before_the_limit_do_not_stop_the_run(trainer, monkeypatch, caplog):
    inject(monkeypatch, "nan", {2, 3, 5}, trainer)
    for group in groups(trainer)[:6]:
        trainer.update(group)
    trainer.bad.settle()
    assert trainer.bad.skipped == 3
    err = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "steps 2-5:" in err and "3 updates skipped (0 in a row at the end)" in err


def test_the_nan_log_line_counts_skipped_updates(tmp_path, demo_dir, monkeypatch):
    real, calls = train_module.batch_loss, {"n": 0}

    def nan_once(model, batch, smoothing, guide=None):
        calls["n"] += 1
        loss, nll = real(model, batch, smoothing, guide)
        return (loss * float("nan"), nll) if calls["n"] == 3 else (loss, nll)

    monkeypatch.setattr(train_module, "batch_loss", nan_once)
    run = tmp_path / "run"
    extra = ["train.max_steps=4", "train.valid_every=4", "train.log_every=2"]
    assert cli.train(args(run, demo_dir, *extra)) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["split"] == "train"]
    assert [r["skipped"] for r in train_rows] == [0, 1]
    assert all(r["loss"] == r["loss"] for r in train_rows)  # no NaN reached the log
    assert all(0 < r["grad_norm"] < float("inf") for r in train_rows)  # the good updates' mean


# --- fp16: GradScaler's verdict -----------------------------------------------------------------


@pytest.fixture
def fp16_trainer(tmp_path, demo_dir, monkeypatch) -> Trainer:
    """A trainer with train.precision=fp16 on the CPU: a real, enabled GradScaler("cpu") scales,
    unscales, steps and rescales. The forward runs in fp32 (fp16 autocast on the CPU is slow, and
    nmt refuses fp16 on the CPU before it builds a Trainer): what is under test is GradScaler and
    the bookkeeping around it, and the overflows are planted (`overflow`)."""
    extra = ["train.max_bad_updates=3", "train.precision=fp16"]
    cfg = cli.compose_config("train", args(tmp_path / "run", demo_dir, *extra))
    data, model, _ = prepare_run(cfg)
    monkeypatch.setattr(
        train_module, "autocast", lambda device, precision: contextlib.nullcontext()
    )
    trainer = Trainer(cfg, model, data, torch.device("cpu"))
    assert trainer.scaler.is_enabled() and trainer.scaler.get_scale() == 2.0**16
    return trainer


def overflow(monkeypatch, trainer: Trainer, when: Callable[[int, float], bool]) -> None:
    """Updates for which `when(step, loss scale)` holds get gradients that overflow (inf, found by
    GradScaler's unscale_) under a finite loss, as fp16 gradients do when the scale is too high."""
    real = train_module.batch_loss

    def overflowing(model, batch, smoothing, guide=None):
        loss, nll = real(model, batch, smoothing, guide)
        if when(trainer.progress.step, trainer.scaler.get_scale()):
            loss.register_hook(lambda grad: grad * float("inf"))
        return loss, nll

    monkeypatch.setattr(train_module, "batch_loss", overflowing)


def nan_loss(monkeypatch, trainer: Trainer, at: set[int], gradients: str = "finite") -> None:
    """The updates numbered in `at` get a NaN loss whose gradients stay those of the real loss
    (finite: GradScaler alone finds nothing wrong with them), or are NaN too."""
    real = train_module.batch_loss

    def nan_valued(model, batch, smoothing, guide=None):
        loss, nll = real(model, batch, smoothing, guide)
        if trainer.progress.step in at:
            if gradients == "finite":
                loss = loss - loss.detach() + float("nan")  # the value NaN, the gradient the same
            else:
                loss = loss * float("nan")
        return loss, nll

    monkeypatch.setattr(train_module, "batch_loss", nan_valued)


def host_reads(monkeypatch) -> list[str]:
    """The device-to-host reads (.item(), .tolist(), bool(), float(), int() of a tensor) that the
    fp16 step and its bookkeeping make, recorded as they happen: on a GPU each would wait there."""
    reads, real_step = [], Trainer._fp16_step

    def recording(self, *args):
        with monkeypatch.context() as m:
            for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__"):
                real = getattr(torch.Tensor, name)
                m.setattr(
                    torch.Tensor,
                    name,
                    lambda t, *a, _n=name, _r=real: reads.append(_n) or _r(t, *a),
                )
            return real_step(self, *args)

    monkeypatch.setattr(Trainer, "_fp16_step", recording)
    return reads


def messages(caplog, level: int) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == level)


def test_fp16_overflows_are_skipped_by_gradscaler_and_logged_as_routine(
    fp16_trainer, monkeypatch, caplog
):
    trainer = fp16_trainer
    caplog.set_level(logging.INFO, logger="nmt")
    overflow(monkeypatch, trainer, lambda step, scale: step in {2, 3})
    reads = host_reads(monkeypatch)
    batches = groups(trainer)
    assert trainer.update(batches[0]).applied
    before, optimizer = weights(trainer), moments(trainer)
    for group in batches[1:3]:
        done = trainer.update(group)
        assert not done.applied and not torch.isfinite(done.norm)
    assert unchanged(before, weights(trainer)) and unchanged(optimizer, moments(trainer))
    assert reads == []  # GradScaler's verdict stayed on the device
    assert trainer.scaler.get_scale() == 2.0**14  # GradScaler halved it once per overflow
    trainer._settle()  # what the loop does once per log window
    assert trainer.bad.skipped == 2
    assert "steps 2-3: fp16 overflow (GradScaler lowers the scale); 2 updates skipped" in messages(
        caplog, logging.INFO
    )
    assert "skipped" not in messages(caplog, logging.WARNING)  # the scale search is no fault
    assert trainer.update(batches[3]).applied
    assert not unchanged(before, weights(trainer))


@pytest.mark.parametrize("gradients", ["finite", "nan"])
def test_an_fp16_nan_loss_is_skipped_not_applied(fp16_trainer, monkeypatch, caplog, gradients):
    """GradScaler checks only the gradients; a NaN loss is skipped as in fp32 whatever its
    gradients, and what is counted is what reached the weights."""
    trainer = fp16_trainer
    nan_loss(monkeypatch, trainer, {2}, gradients)
    batches = groups(trainer)
    trainer.update(batches[0])
    before, optimizer = weights(trainer), moments(trainer)
    done = trainer.update(batches[1])
    assert bool(torch.isfinite(done.norm)) == (gradients == "finite")
    assert not torch.isfinite(done.sums[0]) and not done.applied
    assert unchanged(before, weights(trainer)) and unchanged(optimizer, moments(trainer))
    trainer._settle()
    assert trainer.bad.skipped == 1
    warned = messages(caplog, logging.WARNING)
    assert "step 2: the loss is NaN/inf" in warned and "update skipped" in warned
    assert trainer.update(batches[2]).applied


@pytest.mark.parametrize(
    "fault, stop_at",
    [("nan", 4), ("overflow", 16 + 3)],
    ids=["nan-loss", "overflow-at-every-scale"],
)
def test_fp16_bad_updates_in_a_row_stop_the_run(fp16_trainer, monkeypatch, fault, stop_at):
    """max_bad_updates=3 under fp16: three NaN losses in a row; or gradients that overflow at
    every scale, where the 16 halvings from 2^16 down to 1 are GradScaler's search and the three
    overflows at a scale of 1 and below stop the run."""
    trainer = fp16_trainer
    if fault == "nan":
        nan_loss(monkeypatch, trainer, set(range(2, 100)))
    else:
        overflow(monkeypatch, trainer, lambda step, scale: True)
    batches = groups(trainer)
    with pytest.raises(NMTError, match=f"stopping at step {stop_at}: 3 updates in a row") as err:
        for group in batches[: stop_at + 2]:
            trainer.update(group)
            trainer._settle()
    assert trainer.progress.step == stop_at  # read at the window that ends with it
    assert "the loss is NaN/inf, or the gradients overflow fp16" in str(err.value)
    assert "train.lr" in str(err.value)
    assert all(bool(torch.isfinite(w).all()) for w in weights(trainer).values())  # none applied


def test_a_healthy_fp16_run_whose_scale_finds_itself_is_not_stopped(
    fp16_trainer, monkeypatch, caplog
):
    """Gradients that overflow above a scale of 2^10: six overflows in a row (over the limit of
    3) while GradScaler lowers its scale from 2^16, then every update applies."""
    trainer = fp16_trainer
    caplog.set_level(logging.INFO, logger="nmt")
    overflow(monkeypatch, trainer, lambda step, scale: scale > 2.0**10)
    applied = []
    for group in groups(trainer)[:9]:
        applied.append(bool(trainer.update(group).applied))
        trainer._settle()
    assert applied == [False] * 6 + [True] * 3
    assert trainer.scaler.get_scale() == 2.0**10 and trainer.bad.skipped == 6
    assert "skipped" not in messages(caplog, logging.WARNING)


def test_a_collapsed_fp16_loss_scale_stops_the_run(fp16_trainer, monkeypatch):
    """Overflows between applied updates make no row; each halves the scale, and below 1e-4 the
    run stops. The scale starts at 2^-10 here (GradScaler's own init_scale) to get there fast."""
    trainer = fp16_trainer
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**-10)
    overflow(monkeypatch, trainer, lambda step, scale: step % 2 == 1)
    batches = groups(trainer)
    for group in batches[:6]:  # overflows at steps 1, 3, 5: scale 2^-13 = 1.2e-4
        trainer.update(group)
        trainer._settle()
    trainer.update(batches[6])  # the fourth: 2^-14 = 6.1e-5
    with pytest.raises(NMTError, match=r"fp16 loss scale collapsed to 6\.1e-05"):
        trainer._settle()


# --- a time budget ------------------------------------------------------------------------------


@pytest.mark.parametrize("valid_every", [20, 100000], ids=["validating", "first-validation"])
def test_a_time_budget_ends_the_run_validated_and_saved_within_it(
    tmp_path, demo_dir, capsys, valid_every
):
    """Also when the closing validation is the first one: its time is estimated from the
    training speed, not taken as zero."""
    run = tmp_path / "run"
    extra = ["train.max_minutes=0.1", "train.max_steps=100000", f"train.valid_every={valid_every}"]
    began = time.monotonic()
    assert cli.train(args(run, demo_dir, *extra)) == 0
    elapsed = time.monotonic() - began
    err = capsys.readouterr().err
    step = last_step(run)
    assert f"time budget of 0.1 min reached after step {step}" in err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["split"] == "valid" and rows[-1]["step"] == step  # validated at the stop
    assert 1 <= step < 100000
    # within the budget, give or take one update and the last validation's estimate
    assert elapsed < 6 + 3, elapsed


def test_a_linear_decay_ends_at_min_lr_and_resume_keeps_the_budget(tmp_path, demo_dir, capsys):
    run = tmp_path / "run"
    extra = [
        "train.max_minutes=0.1", "train.max_steps=100000", "train.valid_every=100000",
        "train.scheduler=linear", "train.lr=0.01", "train.min_lr=0.0001", "train.log_every=1",
    ]  # fmt: skip
    assert cli.train(args(run, demo_dir, *extra)) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if r["split"] == "train"]
    # the decay follows the minutes, not max_steps: it ends near min_lr at the budget
    assert lrs == sorted(lrs, reverse=True) and lrs[0] > 0.008 and lrs[-1] < 0.002, lrs
    step = last_step(run)
    seconds = load_checkpoint(run / "checkpoints" / "last").payload["progress"]["seconds"]
    assert 4 < seconds < 9, seconds
    # resumed, the run has already spent its budget: one more update near the floor (not at
    # the 0.01 peak a schedule that forgot the stored minutes would give), saved, done
    capsys.readouterr()
    assert cli.train(args(run, demo_dir, *extra, "train.resume=true")) == 0
    assert f"time budget of 0.1 min reached after step {step + 1}" in capsys.readouterr().err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-2]["split"] == "train" and rows[-2]["lr"] < 0.002, rows[-2]


def test_the_first_validation_is_estimated_from_the_training_speed(trainer):
    """Before any validation the budget reserves the validation targets' time at the training
    speed, so a run whose only validation closes it still ends within its minutes."""
    budget = trainer.budget
    assert budget.validation_estimate() == 0.0  # nothing trained yet, nothing to go on
    budget.add_training(1000, 2.0)  # 500 target tokens per second
    tokens = sum(len(t) + 1 for t in trainer.data.valid.tgt)
    assert budget.validation_estimate() == pytest.approx(tokens / 500)
    budget.valid_seconds = 3.5  # once measured, the last validation's time is used
    assert budget.validation_estimate() == 3.5


def test_a_resumed_run_saves_after_its_resume_checkpoint_is_pruned(tmp_path, demo_dir):
    """A resumed run's checkpoints copy the vocabulary files; they must come from the run's own
    copy, not from the step directory it resumed from, which keep_last later deletes: the save
    after that one failed with 'No such file or directory'. Likewise train.init_from's
    checkpoint may be deleted while the new run goes on."""
    run_dir = tmp_path / "run"
    common = ["train.valid_every=2", "train.keep_last=1", "train.valid_bleu=false"]
    common += ["train.metric=loss", "train.log_every=2"]
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *SMALL_RNN]
    assert cli.train([*args, *common, "train.max_steps=2"]) == 0
    resumed_from = (run_dir / "checkpoints" / "last").resolve()
    assert cli.train([*args, *common, "train.max_steps=8", "train.resume=true"]) == 0
    assert not resumed_from.exists()  # pruned on the way
    last = load_checkpoint(run_dir / "checkpoints" / "last")
    assert last.payload["step"] == 8
    assert all(path.parent == last.path for path in last.vocabs.files())

    # init_from: the parent run's checkpoints vanish while the child trains
    child = tmp_path / "child"
    parent = tmp_path / "parent"
    parent_ckpt = run_dir.rename(parent) / "checkpoints" / "last"
    child_args = [*args[:2], f"run_dir={child}", *SMALL, *SMALL_RNN, *common]
    original = train_module.save_checkpoint
    saves = []

    def save_then_drop_the_parent(*a, **kw):
        saves.append(original(*a, **kw))
        if len(saves) == 1:
            shutil.rmtree(parent)
        return saves[-1]

    init = [f"train.init_from={parent_ckpt}", "train.max_steps=4"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_module, "save_checkpoint", save_then_drop_the_parent)
        assert cli.train([*child_args, *init]) == 0
    assert load_checkpoint(child / "checkpoints" / "last").payload["step"] == 4
