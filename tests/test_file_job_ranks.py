"""File jobs and training across ranks and machines, with real torchrun processes: a rank killed
at any point and the same command run again gives one process's bytes and leaves no parts; the
same job started twice on one output is refused by name while the first ends as if alone; two
torchrun agents of a two-node job on one machine (c10d rendezvous) give one process's bytes, for
nmt-translate and for nmt-train."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_file_job import BIN, LINES, translate_args, write
from test_train import losses

from nmt.checkpoint import load_checkpoint
from nmt.cli import main as cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def ckpt(train_small) -> Path:
    return train_small("gru")


@pytest.fixture(scope="module")
def source(demo_dir, tmp_path_factory) -> Path:
    lines = (demo_dir / "test.de").read_text(encoding="utf-8").splitlines()[:90]
    return write(tmp_path_factory.mktemp("src") / "in.de", [*lines[:40], *LINES, *lines[40:]])


@pytest.fixture(scope="module")
def alone(ckpt, source, tmp_path_factory) -> bytes:
    """One process's output of the job the tests run (chunks of 4 lines)."""
    out = tmp_path_factory.mktemp("alone") / "alone.en"
    assert cli.translate(translate_args(ckpt, source, out, "chunk_lines=4")) == 0
    return out.read_bytes()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str, procs: int = 2, node: tuple[int, int] | None = None) -> list[str]:
    """A torchrun command line: --standalone, or node (rank, port) of a two-node job."""
    where = ["--standalone"]
    if node is not None:
        rank, port = node
        where = ["--nnodes", "2", "--node_rank", str(rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"127.0.0.1:{port}"]  # fmt: skip
    return [sys.executable, "-m", "torch.distributed.run", *where, "--nproc_per_node",
            str(procs), "--no-python", *args]  # fmt: skip


def workers(agent: int) -> dict[int, int]:
    """RANK -> pid of the worker processes a torchrun agent started."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == agent:
            rank = [v for v in env if v.startswith(b"RANK=")]
            if rank:
                found[int(rank[0][5:])] = int(entry.name)
    return found


def chunks_done(parts: Path) -> int:
    try:
        return sum(p.name.startswith("chunk-") and p.suffix == ".txt" for p in parts.iterdir())
    except FileNotFoundError:
        return 0


def kill_rank_after(command: list[str], parts: Path, done: int, rank: int) -> None:
    """Run `command` (a 2-process torchrun job), SIGKILL its rank `rank` once `done` chunks are
    written, and wait for torchrun to end the job."""
    agent = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and agent.poll() is None:
        pids = workers(agent.pid)
        if rank in pids and chunks_done(parts) >= done:
            os.kill(pids[rank], signal.SIGKILL)
            break
        time.sleep(0.005)
    agent.communicate(timeout=120)


def check_kills(ckpt, source, alone, tmp_path, points: list[tuple[int, int]]) -> None:
    for done, rank in points:
        out = tmp_path / f"killed-{done}-{rank}.en"
        args = translate_args(ckpt, source, out, "chunk_lines=4")
        command = torchrun(str(BIN / "nmt-translate"), *args)
        kill_rank_after(command, Path(f"{out}.parts"), done, rank)
        again = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert out.read_bytes() == alone, (done, rank)
        assert not Path(f"{out}.parts").exists(), (done, rank)


def test_a_rank_killed_then_the_same_command_gives_one_processs_bytes(
    ckpt, source, alone, tmp_path
):
    """Rank 1 killed before any chunk, rank 0 in the middle: the same command finishes it."""
    check_kills(ckpt, source, alone, tmp_path, [(0, 1), (12, 0)])


@pytest.mark.slow
def test_a_rank_killed_at_five_points_then_the_same_command_gives_one_processs_bytes(
    ckpt, source, alone, tmp_path
):
    """Before any chunk, early, in the middle, near the end, at the last chunk (24 of 24)."""
    check_kills(ckpt, source, alone, tmp_path, [(0, 0), (3, 1), (12, 1), (20, 0), (24, 1)])


def test_the_same_job_started_twice_is_refused_and_the_first_ends_as_if_alone(
    ckpt, source, alone, tmp_path
):
    out = tmp_path / "twice.en"
    args = [str(BIN / "nmt-translate"), *translate_args(ckpt, source, out, "chunk_lines=4")]
    first = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    parts = Path(f"{out}.parts")
    deadline = time.monotonic() + 120
    while chunks_done(parts) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)  # the first job stands still, holding its lock
    try:
        second = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=300)
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0
    assert second.returncode == cli.EXIT_USAGE, second.stderr
    assert f"another nmt-translate is writing {out}" in second.stderr
    assert out.read_bytes() == alone and not parts.exists()


def two_nodes(*args: str) -> None:
    """The two agents of a two-node job (one process each) on this machine; both must succeed."""
    port = free_port()
    agents = [
        subprocess.Popen(
            torchrun(*args, procs=1, node=(rank, port)),
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    for agent in agents:
        _, err = agent.communicate(timeout=300)
        assert agent.returncode == 0, err[-2000:]


def test_a_two_node_file_job_gives_one_processs_bytes(ckpt, source, alone, tmp_path):
    out = tmp_path / "nodes.en"
    two_nodes(str(BIN / "nmt-translate"), *translate_args(ckpt, source, out, "chunk_lines=4"))
    assert out.read_bytes() == alone and not Path(f"{out}.parts").exists()


def test_two_node_training_equals_two_processes_on_one_machine(tmp_path, demo_dir):
    """The same 6 updates by two processes of one machine and by one process on each of two
    nodes: the same losses and weights, bit for bit."""
    args = ["data=demo", f"data.local_dir={demo_dir}", "data.tokenizer.vocab_size=400",
            "model=gru_bahdanau", "model.emb_size=32", "model.hidden_size=32",
            "train.batch_tokens=600", "train.max_steps=6", "train.valid_every=6",
            "train.log_every=1", "device=cpu"]  # fmt: skip
    one = subprocess.run(
        torchrun(str(BIN / "nmt-train"), *args, f"run_dir={tmp_path / 'one'}"), env=ENV,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    two_nodes(str(BIN / "nmt-train"), *args, f"run_dir={tmp_path / 'two'}")
    assert losses(tmp_path / "one") == losses(tmp_path / "two")
    assert sorted(losses(tmp_path / "one")) == [1, 2, 3, 4, 5, 6]
    a, b = (
        load_checkpoint(tmp_path / run / "checkpoints" / "last").payload["model"]
        for run in ("one", "two")
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
