"""Sweeps (`nmt-train -m`): one run directory per job through Hydra's launcher, every job's config
checked before the first one trains, a summary table, and no Hydra output folders."""

import json
from pathlib import Path

import pytest

from nmt.cli import main as cli
from nmt.run_config import load_run_config

SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
SMALL_RNN = ["model.emb_size=64", "model.hidden_size=64", "model.dropout=0.1"]
TINY = ["train.max_steps=2", "train.valid_every=2", "train.valid_bleu=false", "train.metric=loss"]


def sweep_args(demo_dir: Path, *extra: str) -> list[str]:
    return ["-m", "data=demo", f"data.local_dir={demo_dir}", *SMALL, *SMALL_RNN, *TINY, *extra]


def rows(sweep_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (sweep_dir / "sweep.jsonl").read_text().splitlines()]


def assert_no_hydra_output(root: Path) -> None:
    assert not (root / "outputs").exists() and not (root / "multirun").exists()
    assert not list(root.rglob(".hydra")) and not list(root.rglob("*.log"))


def test_a_sweep_trains_one_run_per_job(tmp_path, demo_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scorers = ["dot", "general", "additive"]
    args = sweep_args(demo_dir, f"model.attention={','.join(scorers)}", "hydra.sweep.dir=sw")
    assert cli.train(args) == 0
    sweep_dir = tmp_path / "sw"
    for job, scorer in enumerate(scorers):
        best = sweep_dir / str(job) / "checkpoints" / "best"
        assert (best / "ckpt.pt").is_file()
        stored = load_run_config(best / "config.yaml")
        assert stored.model.attention.value == scorer
        assert stored.run_dir == str(sweep_dir / str(job))  # Hydra's output dir for the job
    summary = rows(sweep_dir)
    assert [(r["job"], r["swept"]) for r in summary] == [
        (job, {"model.attention": scorer}) for job, scorer in enumerate(scorers)
    ]
    assert all(r["error"] is None and r["metric"] == "loss" and r["step"] == 2 for r in summary)
    assert all(0 < r["best"] < 10 for r in summary)
    captured = capsys.readouterr()
    table = captured.out.splitlines()
    assert table[0].split() == ["job", "model.attention", "best", "valid", "step", "run_dir"]
    assert [line.split()[:2] for line in table[1:]] == [
        ["0", "dot"],
        ["1", "general"],
        ["2", "additive"],
    ]
    assert table[1].split()[-1] == "sw/0"
    for job in range(3):  # each job says what it runs and where
        assert f"job {job}: " in captured.err and f"run_dir {sweep_dir / str(job)}" in captured.err
    assert_no_hydra_output(tmp_path)
    assert sorted(p.name for p in sweep_dir.iterdir()) == [
        "0",
        "1",
        "2",
        "multirun.yaml",
        "sweep.jsonl",
    ]

    # the same sweep directory again: refused before anything runs, unless resuming
    assert cli.train(args) == cli.EXIT_USAGE
    assert "already holds a sweep" in capsys.readouterr().err


def test_a_failing_job_is_one_line_and_the_others_still_run(
    tmp_path, demo_dir, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    args = sweep_args(demo_dir, f"data.local_dir={demo_dir},{tmp_path / 'missing'}")
    assert cli.train(args) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    failures = [line for line in err.splitlines() if "error:" in line]
    assert len(failures) == 2 and "Traceback" not in err, err
    assert failures[0].startswith("nmt-train: job 1: error: data.local_dir not found")
    assert failures[1] == "nmt-train: error: 1 of 2 job(s) failed (job 1; see above)"
    (sweep_dir,) = (tmp_path / "runs").glob("sweep-*")  # the default sweep directory
    ok, failed = rows(sweep_dir)
    assert ok["error"] is None and (Path(ok["checkpoint"]) / "ckpt.pt").is_file()
    assert "data.local_dir not found" in failed["error"] and failed["best"] is None
    assert_no_hydra_output(tmp_path)


def error_of(argv: list[str], capsys, main=cli.train) -> str:
    assert main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0, err
    return err


@pytest.mark.parametrize(
    "sweep, message",
    [
        ("model.atention=dot,general", "valid keys here: arch, name, cell"),
        ("model.attention=dot,dott", "expected one of [dot, scaled_dot, general"),
        ("model.hidden_size=64,63", "must be even"),
        ("model=gru_luong,gru_bahdanauu", "available options in 'model': gru_bahdanau"),
        ("hydra/launcher=basicc", "available options in 'hydra/launcher': basic"),
        ("model.dropout=interval(0,0.5)", "only value lists"),
        ("run_dir=a,b", "hydra.sweep.dir"),
    ],
)
def test_a_bad_job_fails_before_any_job_runs(sweep, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = error_of(["-m", "model.dropout=0.1,0.2", sweep], capsys)
    assert err.startswith("nmt-train: error:") and message in err, err
    assert list(tmp_path.iterdir()) == []  # no sweep or run directory, nothing trained


def test_the_error_names_the_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = error_of(["--multirun", "model.attention=dot,dott"], capsys)
    assert "job 1 of 2 (model.attention=dott)" in err


def test_print_every_jobs_config(capsys):
    assert cli.train(["model.attention=dot,general", "--cfg", "-m"]) == 0
    out = capsys.readouterr().out
    assert "# job 0: model.attention=dot" in out and "# job 1: model.attention=general" in out
    assert "attention: dot" in out and "attention: general" in out


@pytest.mark.parametrize("main", [cli.evaluate, cli.translate, cli.average])
def test_only_train_sweeps(main, capsys):
    err = error_of(["-m", "ckpt=a,b"], capsys, main)
    assert "only supported by nmt-train" in err


def test_compose_config_is_public_and_typed():
    cfg = cli.compose_config("train", ["model=gru_luong", "model.attention=concat"])
    assert cfg.model.attention.value == "concat"


@pytest.mark.slow
def test_the_joblib_launcher_runs_jobs_in_parallel_processes(
    tmp_path, demo_dir, monkeypatch, capsys
):
    # a plugin, not a dependency: skipped where it is not installed
    pytest.importorskip(
        "hydra_plugins.hydra_joblib_launcher", reason="pip install hydra-joblib-launcher"
    )
    monkeypatch.chdir(tmp_path)
    extra = ["model.attention=dot,general", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    assert cli.train(sweep_args(demo_dir, *extra, "hydra.sweep.dir=jl")) == 0
    summary = rows(tmp_path / "jl")
    assert [r["swept"]["model.attention"] for r in summary] == ["dot", "general"]
    for r in summary:
        assert r["error"] is None and (Path(r["checkpoint"]) / "ckpt.pt").is_file()
    assert_no_hydra_output(tmp_path)
