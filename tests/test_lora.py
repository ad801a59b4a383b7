"""train.lora: low-rank adapters on a trained Transformer (`nmt.models.lora`). The adapters train
with the base frozen, their checkpoints hold the adapters alone and name the base, and reading
one merges them: every command decodes the merged model, which is the adapted model itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import SMALL, SMALL_MODELS

from nmt.checkpoint import load_checkpoint, merged_weights
from nmt.cli import main as cli
from nmt.config import DecodeConfig, LoraConfig, Strategy
from nmt.errors import NMTError
from nmt.models import restore_model
from nmt.models.lora import add_adapters
from nmt.translation.translator import Translator


def _lora_run(base: Path, run: Path, demo_dir: Path, *extra: str) -> Path:
    args = [
        f"train.init_from={base}", "data=demo", f"data.local_dir={demo_dir}", f"run_dir={run}",
        *SMALL, *SMALL_MODELS["transformer"], "train.max_steps=60", "train.valid_every=30",
        "train.lora.rank=4", "train.lr=0.01", *extra,
    ]  # fmt: skip
    assert cli.train(args) == 0
    return run / "checkpoints" / "last"


@pytest.fixture(scope="module")
def base(train_small) -> Path:
    return train_small("transformer")


def test_adapters_train_alone_and_save_small(base, tmp_path, demo_dir):
    """The base checkpoint is untouched, the run's checkpoint holds the adapters (a small file)
    and merges into a model whose validation loss is lower than the base's; the merged weights
    differ from the base only in the adapted layers."""
    before = (base / "ckpt.pt").read_bytes()
    last = _lora_run(base, tmp_path / "run", demo_dir)
    assert (base / "ckpt.pt").read_bytes() == before
    raw = torch.load(last / "ckpt.pt", weights_only=True)
    assert "model" not in raw and raw["lora"]["base"] == str(base.resolve())
    assert all(k.endswith((".lora_a", ".lora_b")) for k in raw["adapters"])
    assert (last / "ckpt.pt").stat().st_size < 0.5 * (base / "ckpt.pt").stat().st_size
    merged, start = load_checkpoint(last).payload["model"], load_checkpoint(base).payload["model"]
    assert merged.keys() == start.keys()
    for key, value in start.items():
        adapted = key.endswith(("q.weight", "kv.weight", "out.weight")) and "attention" in key
        assert torch.equal(merged[key], value) != adapted, key
    first_loss = load_checkpoint(base).payload["metrics"]["loss"]
    assert load_checkpoint(last).payload["metrics"]["loss"] < first_loss


def test_the_merged_model_is_the_adapted_model(base):
    """merged_weights folds B A into W: the adapted layers' output, and a translation, are the
    same through the adapters and through the merged weights."""
    ckpt = load_checkpoint(base)
    model = restore_model(ckpt, torch.device("cpu"))
    add_adapters(model, LoraConfig(rank=4, alpha=8.0, targets=["q", "kv", "out", "ff"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".lora_b"):
                param.normal_(0.0, 0.05)
    adapters = {k: v for k, v in model.state_dict().items() if ".lora_" in k}
    plain = restore_model(ckpt, torch.device("cpu"))
    plain.load_state_dict(merged_weights(ckpt.payload["model"], adapters, 4, 8.0))
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    lens, tgt_in = torch.tensor([5, 3]), torch.tensor([[2, 11, 12], [2, 13, 14]])
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(src, lens, tgt_in)[0], plain(src, lens, tgt_in)[0])
        assert not torch.equal(restore_model(ckpt, torch.device("cpu"))(src, lens, tgt_in)[0],
                               plain(src, lens, tgt_in)[0])  # fmt: skip


def test_every_command_reads_a_lora_checkpoint_and_resume_continues(base, tmp_path, demo_dir):
    """nmt-translate on the adapters' checkpoint translates as the merged model; train.resume
    continues a LoRA run with its adapters (its base named by the checkpoint); a missing base
    is one clear error."""
    last = _lora_run(base, tmp_path / "run", demo_dir)
    texts = (demo_dir / "test.de").read_text("utf-8").splitlines()[:20]
    greedy = DecodeConfig(strategy=Strategy.greedy)
    tuned = Translator.from_checkpoint(last, greedy, "cpu").translate(texts)
    assert tuned != Translator.from_checkpoint(base, greedy, "cpu").translate(texts)
    source, out = tmp_path / "in.de", tmp_path / "out.en"
    source.write_text("\n".join(texts) + "\n", "utf-8")
    assert cli.translate([f"ckpt={last}", f"input={source}", f"output={out}", "decode=greedy"]) == 0
    assert out.read_text("utf-8").splitlines() == tuned
    args = [
        "train.resume=true", "data=demo", f"data.local_dir={demo_dir}",
        f"run_dir={tmp_path / 'run'}", *SMALL, *SMALL_MODELS["transformer"],
        "train.max_steps=90", "train.valid_every=30", "train.lora.rank=4", "train.lr=0.01",
    ]  # fmt: skip
    assert cli.train(args) == 0
    resumed = torch.load(tmp_path / "run" / "checkpoints" / "last" / "ckpt.pt", weights_only=True)
    assert resumed["step"] == 90 and "model" not in resumed
    moved = tmp_path / "moved"
    (tmp_path / "run" / "checkpoints" / "last").resolve().rename(moved)
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in moved.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())
    raw = torch.load(copy / "ckpt.pt", weights_only=True)
    raw["lora"]["base"] = str(tmp_path / "gone")
    torch.save(raw, copy / "ckpt.pt")
    with pytest.raises(NMTError, match="adapters of .*gone.*not there"):
        load_checkpoint(copy)


def test_lora_needs_a_model_to_adapt(demo_dir, tmp_path, capsys):
    args = ["data=demo", f"data.local_dir={demo_dir}", f"run_dir={tmp_path}", "train.lora.rank=8"]
    assert cli.train(args) == 2
    assert "train.init_from" in capsys.readouterr().err
    assert cli.train([*args, "train.init_from=x", "train.lora.targets=[fc1]"]) == 2
    assert "choose among" in capsys.readouterr().err
