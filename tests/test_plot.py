"""nmt-plot: curves of one run and of a sweep, labelled by what differs; bad input is one line."""

import json
from pathlib import Path

from test_train import SMALL, SMALL_RNN

from nmt.cli import main as cli
from nmt.training.plot import run_labels

QUICK = ["train.max_steps=4", "train.valid_every=2", "train.log_every=1"]


def train(run_dir: Path, demo_dir: Path, *extra: str) -> None:
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *SMALL_RNN]
    assert cli.train([*args, *QUICK, *extra]) == 0


def test_one_run_and_a_sweep_are_drawn_and_labelled_by_what_differs(tmp_path, demo_dir, capsys):
    import matplotlib.image

    train(tmp_path / "dot", demo_dir, "model=gru_luong", "model.attention=dot")
    train(tmp_path / "general", demo_dir, "model=gru_luong", "model.attention=general")
    assert cli.plot([f"run_dir={tmp_path / 'dot'}"]) == 0
    image = matplotlib.image.imread(tmp_path / "dot" / "curves.png")
    assert image.shape[0] > 500 and image.shape[1] > 800  # a real chart, not an empty file
    runs = [tmp_path / "dot", tmp_path / "general"]
    assert run_labels(runs) == ["model.attention=dot", "model.attention=general"]
    assert cli.plot([f"run_dirs=[{runs[0]},{runs[1]}]"]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 10_000  # the runs' common parent
    assert "curves of 2 run(s)" in capsys.readouterr().out


def test_the_same_directory_written_two_ways_is_no_difference(tmp_path, demo_dir, monkeypatch):
    monkeypatch.chdir(demo_dir.parent)
    train(tmp_path / "a", demo_dir, "model.attention=dot")
    train(tmp_path / "b", Path(demo_dir.name), "model.attention=concat")  # relative: the same
    assert run_labels([tmp_path / "a", tmp_path / "b"]) == [
        "model.attention=dot",
        "model.attention=concat",
    ]


def test_bad_input_is_one_line(tmp_path, capsys):
    assert cli.plot([f"run_dir={tmp_path / 'none'}"]) == cli.EXIT_USAGE
    assert "metrics.jsonl not found" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n{broken\n")
    assert cli.plot([f"run_dir={tmp_path / 'run'}"]) == cli.EXIT_USAGE
    assert "line 2: not JSON" in capsys.readouterr().err
    assert cli.plot(["run_dir=a", "run_dirs=[b]"]) == cli.EXIT_USAGE
    assert "not both" in capsys.readouterr().err
    assert cli.plot(["run_dirz=a"]) == cli.EXIT_USAGE
    assert "run_dirs" in capsys.readouterr().err  # the valid keys are listed


def test_each_validation_saves_the_attention_of_the_first_dev_sentences(tmp_path, demo_dir):
    train(tmp_path / "run", demo_dir, "train.valid_heatmaps=2", "train.valid_bleu=false",
          "train.metric=loss")  # fmt: skip
    names = sorted(p.name for p in (tmp_path / "run" / "attention").iterdir())
    assert names == [f"step-0000000{s}.{k}.png" for s in (2, 4) for k in (0, 1)]
    assert all(p.stat().st_size > 5_000 for p in (tmp_path / "run" / "attention").iterdir())
