"""Checkpoint averaging (nmt.training.average, nmt-average): the mean of the weights, written as a
normal checkpoint that loads and translates; incompatible checkpoints are refused with one line."""

import shutil
from pathlib import Path

import pytest
import torch

from nmt.checkpoint import CKPT_FILE, load_checkpoint
from nmt.cli import main as cli
from nmt.errors import NMTError
from nmt.training.average import average_checkpoints, newest_checkpoints

SMALL = ["data.tokenizer.vocab_size=400", "train.batch_tokens=600", "train.lr=0.003"]
SMALL_RNN = ["model.emb_size=64", "model.hidden_size=64", "model.dropout=0.1"]
QUICK = ["train.valid_bleu=false", "train.metric=loss", "train.log_every=2"]


def train(run_dir: Path, demo_dir: Path, *extra: str) -> Path:
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={run_dir}", *SMALL, *SMALL_RNN]
    assert cli.train([*args, *QUICK, *extra]) == 0
    return run_dir


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_dir) -> Path:
    """Checkpoints at steps 2, 4 and 6, all kept."""
    run_dir = tmp_path_factory.mktemp("avg") / "run"
    return train(run_dir, demo_dir, "train.max_steps=6", "train.valid_every=2", "train.keep_last=5")


def weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / CKPT_FILE, weights_only=True)["model"]


def test_average_is_the_mean_of_the_state_dicts(run):
    paths = newest_checkpoints(run, 3)
    assert [p.name for p in paths] == ["step-00000002", "step-00000004", "step-00000006"]
    inputs = [weights(p) for p in paths]
    mean = average_checkpoints(paths)
    assert mean.keys() == inputs[0].keys()
    for key, value in mean.items():
        by_hand = sum(w[key].double() for w in inputs) / 3
        assert value.dtype == inputs[0][key].dtype
        torch.testing.assert_close(value, by_hand.to(value.dtype), rtol=0, atol=1e-7)
    changed = [k for k in mean if not torch.equal(inputs[0][k], inputs[2][k])]
    assert changed  # training moved the weights, so the mean is not any one input
    assert not all(torch.equal(mean[k], inputs[2][k]) for k in changed)


def test_nmt_average_writes_a_checkpoint_that_loads_and_translates(run, capsys):
    from nmt.translation.translator import Translator

    links = {name: (run / "checkpoints" / name).resolve() for name in ("best", "last")}
    assert cli.average([f"run_dir={run}", "last=3"]) == 0
    out = run / "checkpoints" / "average-last3"
    assert str(out) in capsys.readouterr().out
    ckpt = load_checkpoint(out)  # checks format, config and the tokenizer's digest
    assert ckpt.payload["step"] == 6 and ckpt.payload["averaged_steps"] == [2, 4, 6]
    assert "optimizer" not in ckpt.payload
    expected = average_checkpoints(newest_checkpoints(run, 3))
    assert all(torch.equal(ckpt.payload["model"][k], v) for k, v in expected.items())
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "ckpt.pt",
        "config.yaml",
        "lexicon.pt",
        "pieces.tgt.tsv",
        "sentence_edges.json",
        "sentence_starts.txt",
        "spm.model",
    ]

    translator = Translator.from_checkpoint(out, device="cpu")
    texts = translator.translate(["Ich sehe einundzwanzig rote Äpfel.", ""])
    assert len(texts) == 2 and texts[1] == ""

    # the run itself is untouched: same links, and the average is no step checkpoint
    assert {name: (run / "checkpoints" / name).resolve() for name in links} == links
    assert len(newest_checkpoints(run, 3)) == 3

    assert cli.average([f"run_dir={run}", "last=3"]) == cli.EXIT_USAGE  # never clobbered...
    assert "overwrite=true" in capsys.readouterr().err
    assert cli.average([f"run_dir={run}", "last=2", f"out={out}", "overwrite=true"]) == 0
    assert load_checkpoint(out).payload["averaged_steps"] == [4, 6]  # ...unless asked
    assert not [p for p in out.parent.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def one_line_error(argv: list[str], capsys) -> str:
    assert cli.average(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("nmt-average: error:") and "\n" not in err, err
    return err


def test_asking_for_more_checkpoints_than_the_run_kept(run, capsys):
    err = one_line_error([f"run_dir={run}", "last=9"], capsys)
    assert "holds 3 step checkpoint(s)" in err and "train.keep_last>=9" in err


def test_mismatched_configs_are_refused(run, demo_dir, tmp_path, capsys):
    other = train(tmp_path / "dot", demo_dir, "train.max_steps=2", "model.attention=dot")
    capsys.readouterr()
    ckpts = f"ckpts=[{run / 'checkpoints' / 'last'},{other / 'checkpoints' / 'last'}]"
    err = one_line_error([ckpts, f"out={tmp_path / 'avg'}"], capsys)
    assert "they differ in model.attention (additive vs dot)" in err
    assert not (tmp_path / "avg").exists()


def test_integer_tensors_must_be_equal(run, tmp_path):
    copies = []
    for n in (1, 2):
        copy = tmp_path / f"copy{n}"
        shutil.copytree(run / "checkpoints" / "last", copy)
        payload = torch.load(copy / CKPT_FILE, weights_only=True)
        payload["model"]["counter"] = torch.tensor([7, n])
        torch.save(payload, copy / CKPT_FILE)
        copies.append(copy)
    with pytest.raises(NMTError, match="counter is not a floating-point tensor"):
        average_checkpoints(copies)
    same = average_checkpoints([copies[0], copies[0]])
    assert torch.equal(same["counter"], torch.tensor([7, 1]))


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give run_dir=DIR"),
        (["run_dir=a", "ckpts=[b]"], "not both"),
        (["ckpts=[a,b]"], "needs out=DIR"),
        (["run_dir=a", "last=0"], "last=0"),
        (["run_dir=nowhere"], "no step checkpoints in nowhere/checkpoints"),
        (["ckpts=[a,./a]", "out=b"], "the same checkpoint twice"),
    ],
)
def test_bad_arguments_are_one_line_errors(args, message, capsys):
    assert message in one_line_error(args, capsys)


def test_help(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.average(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: nmt-average") and "run_dir=runs/NAME last=5" in out
