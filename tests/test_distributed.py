"""Data-parallel training under torchrun (gloo on the CPU, 2 processes): the gradients are combined
right (2 ranks = 1 process over the union of their batches) and resume stays exact."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_train import SMALL, SMALL_RNN, losses

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli
from nmt.data.batches import epoch_batches
from nmt.data.splits import Encoded
from nmt.errors import NMTError
from nmt.training.budget import AGREE_EVERY

NMT_TRAIN = Path(sys.executable).parent / "nmt-train"
COMMON = [
    "train.log_every=1",
    "train.valid_bleu=false",
    "train.metric=loss",
    "train.scheduler=noam",
    "train.warmup_steps=2",
    "device=cpu",
]


def lengths(data: Encoded) -> tuple[list[int], list[int]]:
    return [len(s) for s in data.src], [len(t) for t in data.tgt]


def torchrun_command(
    run_dir: Path, demo_dir: Path, *extra: str, procs: int = 2
) -> tuple[list[str], dict[str, str]]:
    """`torchrun --standalone --nproc_per_node 2 --no-python nmt-train ...` and its environment
    (one thread a process)."""
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *SMALL_RNN]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
        str(procs), "--no-python", str(NMT_TRAIN), *args, *COMMON, *extra,
    ]  # fmt: skip
    return command, {**os.environ, "OMP_NUM_THREADS": "1"}


def torchrun(
    run_dir: Path, demo_dir: Path, *extra: str, procs: int = 2
) -> subprocess.CompletedProcess:
    """Run `torchrun_command` to its end; it must succeed."""
    command, env = torchrun_command(run_dir, demo_dir, *extra, procs=procs)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "checkpoints" / "last").payload["model"]


# two corpora (the demo twice, the second tagged and drawn twice as often) with subword sampling:
# every rank must plan the same mixed, sampled epoch and take its share of it
MIXED_SAMPLED = [
    "data.corpora=[{name:a},{name:b,src_tag:'<bt>',weight:2}]", "data.tokenizer.model_type=unigram",
    "data.tokenizer.sample_alpha=0.3", "data.tokenizer.sample_nbest=4",
]  # fmt: skip


@pytest.mark.parametrize("data", [[], MIXED_SAMPLED], ids=["one corpus", "mixed and sampled"])
def test_two_ranks_equal_one_process_over_the_union_of_their_batches(tmp_path, demo_dir, data):
    """Rank r takes batches r, r+2, ... of each update; one process with accum_steps=2 takes both.
    Each rank divides its loss by half the update's tokens and DDP averages: the same gradient."""
    steps = ["train.max_steps=4", "train.valid_every=4", "model.dropout=0.0", *data]
    done = torchrun(tmp_path / "ddp", demo_dir, *steps)
    # rank 0 alone prints: one copy of each line, not one per process
    lines = done.stderr.splitlines()
    assert sum("nmt-train: " in line and "x 2 processes" in line for line in lines) == 1
    assert sum(line.startswith("nmt-train: step 4: valid") for line in lines) == 1
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'one'}"]
    assert cli.train([*args, *SMALL, *SMALL_RNN, *COMMON, *steps, "train.accum_steps=2"]) == 0

    two, one = weights(tmp_path / "ddp"), weights(tmp_path / "one")
    for name in one:  # float sums in another order: equal up to rounding
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-5, msg=name)
    ddp_losses, one_losses = losses(tmp_path / "ddp"), losses(tmp_path / "one")
    assert sorted(ddp_losses) == [1, 2, 3, 4]
    assert ddp_losses == pytest.approx(one_losses, rel=1e-5)  # logged over both ranks' batches
    # rank 0 alone writes: one checkpoint set, one log
    assert [p.name for p in (tmp_path / "ddp" / "checkpoints").glob("step-*")] == ["step-00000004"]


def test_resume_under_ddp_gives_the_same_losses(tmp_path, demo_dir):
    """Dropout on: each rank's RNG state is saved and restored, not only rank 0's."""
    extra = ["train.valid_every=3", "model.dropout=0.3"]
    torchrun(tmp_path / "straight", demo_dir, *extra, "train.max_steps=6")
    torchrun(tmp_path / "split", demo_dir, *extra, "train.max_steps=3")
    torchrun(tmp_path / "split", demo_dir, *extra, "train.max_steps=6", "train.resume=true")
    assert losses(tmp_path / "split") == losses(tmp_path / "straight")
    payload = load_checkpoint(tmp_path / "split" / "checkpoints" / "last").payload
    assert payload["world_size"] == 2 and len(payload["rng_ranks"]) == 2
    a, b = weights(tmp_path / "split"), weights(tmp_path / "straight")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a single process cannot continue a 2-process run exactly: refused, naming the reason
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'split'}"]
    resumed = [*args, *SMALL, *SMALL_RNN, *COMMON, *extra, "train.max_steps=9", "train.resume=true"]
    assert cli.train(resumed) == cli.EXIT_USAGE


def test_one_process_under_torchrun_is_the_plain_run(tmp_path, demo_dir):
    """torchrun --nproc_per_node 1 sets WORLD_SIZE=1: nmt-train runs as a plain process (no
    process group, no DistributedDataParallel), so its weights and losses are the plain run's, bit
    for bit, and its checkpoints resume either way. tests/test_gpu.py checks the same on CUDA."""
    extra = ["train.max_steps=3", "train.valid_every=3", "model.dropout=0.3"]
    done = torchrun(tmp_path / "torchrun", demo_dir, *extra, procs=1)
    assert "processes" not in done.stderr  # the start line names no process count
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path / 'plain'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as torchrun's: the same order of float sums
    command = [str(NMT_TRAIN), *args, *SMALL, *SMALL_RNN, *COMMON, *extra]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=300)
    assert losses(tmp_path / "torchrun") == losses(tmp_path / "plain")
    a, b = weights(tmp_path / "torchrun"), weights(tmp_path / "plain")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (
        load_checkpoint(tmp_path / "torchrun" / "checkpoints" / "last").payload["world_size"] == 1
    )


def test_cuda_graphs_under_torchrun_are_refused_before_any_work(tmp_path, demo_dir):
    run_dir = tmp_path / "run"
    extra = ["train.compile=true", "train.cuda_graphs=true", "train.length_step=8"]
    command, env = torchrun_command(run_dir, demo_dir, *extra)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    assert "train.cuda_graphs is for one process" in done.stderr
    assert not run_dir.exists()  # nothing was read or written


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_batches_are_dealt_evenly_and_cover_the_epoch(world):
    """Dealing batch i to rank i % world gives every rank as many batches; together they are the
    epoch but for fewer than `world` batches; the deal is a pure function of seed and epoch."""
    g = torch.Generator().manual_seed(0)
    sizes = torch.randint(1, 30, (500,), generator=g).tolist()
    data = Encoded([[5] * n for n in sizes], [[6] * n for n in sizes])
    full = epoch_batches(*lengths(data), 200, seed=3, epoch=1)
    cut = epoch_batches(*lengths(data), 200, seed=3, epoch=1, world=world)
    assert cut == epoch_batches(*lengths(data), 200, seed=3, epoch=1, world=world)
    assert cut == full[: len(cut)] and len(full) - len(cut) < world
    shares = [cut[rank::world] for rank in range(world)]
    assert len({len(share) for share in shares}) == 1


def test_more_ranks_than_batches_is_a_clear_error():
    data = Encoded([[5, 2]] * 3, [[6]] * 3)
    with pytest.raises(NMTError, match="batches for 8 processes"):
        epoch_batches(*lengths(data), 100, seed=0, epoch=0, world=8)


def test_sigterm_to_one_rank_stops_every_rank_after_the_same_update(tmp_path, demo_dir):
    """SLURM signals every process, but a signal that reaches one rank alone must stop them all
    at one step (the others would otherwise wait forever in the next all-reduce)."""
    run_dir = tmp_path / "run"
    extra = ["train.max_steps=100000", "train.valid_every=100000"]
    command, env = torchrun_command(run_dir, demo_dir, *extra)
    agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 180
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert agent.poll() is None and time.monotonic() < deadline, agent.stderr.read()[-3000:]
        time.sleep(0.1)
    children = Path(f"/proc/{agent.pid}/task/{agent.pid}/children").read_text().split()
    os.kill(int(max(children, key=int)), signal.SIGTERM)  # the younger worker only
    _, err = agent.communicate(timeout=120)
    assert agent.returncode == 0, err[-3000:]
    step = load_checkpoint(run_dir / "checkpoints" / "last").payload["step"]
    assert f"after step {step}" in err and step >= 3
    assert step % AGREE_EVERY == 0  # the ranks agree on stopping every AGREE_EVERY updates
    torchrun(run_dir, demo_dir, f"train.max_steps={step + 2}", "train.resume=true")
    assert sorted(losses(run_dir)) == list(range(1, step + 3))
