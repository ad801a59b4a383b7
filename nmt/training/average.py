"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints of one model.

Averaging the last few checkpoints of a run (Vaswani et al. 2017, sec. 6.1, averages the last 5)
smooths out the noise of the final updates and often gains a little BLEU at no training cost.
The result is an ordinary checkpoint directory, written through `nmt.checkpoint.save_checkpoint`
(atomic, self-describing), so `nmt-evaluate` and `nmt-translate` take it like any other.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import torch

from nmt.checkpoint import CKPT_FILE, Checkpoint, load_checkpoint, save_checkpoint, step_key
from nmt.data.starts import EDGES_FILE, STARTS_FILE
from nmt.errors import NMTError
from nmt.run_config import AverageRunConfig, flatten


@dataclasses.dataclass
class _Averaged:
    weights: dict[str, torch.Tensor]  # the mean state dict
    newest: Checkpoint  # the input with the highest step (its payload dropped): config, vocabs
    steps: list[int]  # the step of each input, in the order given


def _differences(a: Checkpoint, b: Checkpoint) -> list[str]:
    """What makes two checkpoints' weights incomparable: the model, the languages, the vocabulary.

    Training settings (max_steps, lr, resume, ...) may differ: a resumed run changes them.
    """
    left, right = flatten(a.config.model, "model"), flatten(b.config.model, "model")
    diffs = [
        f"{key} ({left.get(key)} vs {right.get(key)})"
        for key in sorted(left.keys() | right.keys())
        if left.get(key) != right.get(key)
    ]
    for key in ("src_lang", "tgt_lang"):
        if getattr(a.config.data, key) != getattr(b.config.data, key):
            diffs.append(
                f"data.{key} ({getattr(a.config.data, key)} vs {getattr(b.config.data, key)})"
            )
    if a.payload.get("vocab_digest") != b.payload.get("vocab_digest"):
        diffs.append("the sentencepiece vocabulary")
    return diffs


def _average(paths: list[Path]) -> _Averaged:
    """Load the checkpoints one at a time (memory: one checkpoint plus the float64 sums)."""
    if not paths:
        raise NMTError("no checkpoints to average")
    sums: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    first: Checkpoint | None = None
    newest: Checkpoint | None = None
    steps: list[int] = []
    for path in paths:
        ckpt = load_checkpoint(path)
        weights = ckpt.payload["model"]
        if first is None:
            first = ckpt
            dtypes = {k: v.dtype for k, v in weights.items()}
            # float64 sums: averaging many float32 (or bf16) tensors in their own precision
            # loses digits that the mean should keep
            sums = {
                k: v.to(torch.float64) if v.is_floating_point() else v.clone()
                for k, v in weights.items()
            }
        else:
            if diffs := _differences(first, ckpt):
                raise NMTError(
                    f"cannot average {ckpt.path} with {first.path}: they differ in "
                    + ", ".join(diffs)
                )
            if weights.keys() != sums.keys():
                odd = sorted(weights.keys() ^ sums.keys())
                raise NMTError(f"{ckpt.path} and {first.path} hold different weights: {odd[:5]}")
            for key, value in weights.items():
                if value.shape != sums[key].shape:
                    raise NMTError(
                        f"{key} has shape {tuple(value.shape)} in {ckpt.path} but "
                        f"{tuple(sums[key].shape)} in {first.path}"
                    )
                if sums[key].is_floating_point():
                    sums[key] += value.to(torch.float64)
                elif not torch.equal(value, sums[key]):
                    # an integer buffer (a counter, an index table) has no meaningful mean
                    raise NMTError(
                        f"{key} is not a floating-point tensor and differs between "
                        f"{first.path} and {ckpt.path}: it cannot be averaged"
                    )
        steps.append(int(ckpt.payload["step"]))
        if newest is None or steps[-1] >= newest.payload["step"]:
            # keep what the output needs (config, vocabularies, step), not the weights
            newest = dataclasses.replace(ckpt, payload={"step": steps[-1]})
        del weights, ckpt
    assert newest is not None
    mean = {
        k: (v / len(paths)).to(dtypes[k]) if v.is_floating_point() else v for k, v in sums.items()
    }
    return _Averaged(mean, newest, steps)


def average_checkpoints(paths: list[Path]) -> dict:
    """The element-wise mean of the model weights (state dicts) of these checkpoint directories.

    Floating-point tensors are averaged in float64 and cast back to their dtype; any other tensor
    must be equal in every checkpoint. The checkpoints must share the model config, the languages
    and the vocabulary, or an NMTError names the difference.
    """
    return _average(paths).weights


def newest_checkpoints(run_dir: Path, n: int) -> list[Path]:
    """The newest `n` step checkpoints of a run, oldest first."""
    root = run_dir / "checkpoints"
    found = sorted(
        (p for p in root.glob("step-*") if (p / CKPT_FILE).is_file() and not p.is_symlink()),
        key=step_key,
    )
    if not found:
        raise NMTError(f"no step checkpoints in {root}")
    if len(found) < n:
        raise NMTError(
            f"last={n} but {root} holds {len(found)} step checkpoint(s): pass last={len(found)}, "
            f"or train with train.keep_last>={n} (it keeps {len(found)} now)"
        )
    return found[-n:]


def _place(built: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished directory to `out`; an old `out` is removed only after that."""
    if out.is_symlink():
        raise NMTError(f"out={out} is a link (a run's best/last?): choose another name")
    old = None
    if out.exists():
        if not overwrite:
            raise NMTError(f"{out} already exists: pass overwrite=true or another out=DIR")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)  # directories cannot be replaced in one rename
    os.rename(built, out)
    if old is not None:
        shutil.rmtree(old)


def average_main(cfg: AverageRunConfig) -> Path:
    """Write the average of the configured checkpoints as a new checkpoint directory."""
    if cfg.ckpts is not None:
        paths = [Path(p) for p in cfg.ckpts]
    else:
        paths = newest_checkpoints(Path(cfg.run_dir), cfg.last)
    n = len(paths)
    if len({p.resolve() for p in paths}) < n:  # best/last are links to step directories
        raise NMTError("ckpts names the same checkpoint twice: " + ", ".join(map(str, paths)))
    out = Path(cfg.out) if cfg.out else Path(cfg.run_dir) / "checkpoints" / f"average-last{n}"
    if out.exists() and not cfg.overwrite:  # fail before the (slow) loading
        raise NMTError(f"{out} already exists: pass overwrite=true or another out=DIR")
    result = _average(paths)
    newest = result.newest
    # No optimizer, scheduler or RNG state: the mean of the weights matches none of the inputs'
    # optimizer moments, training never resumes from an average (train.resume reads `last`),
    # and Adam's two moments would triple the file for nothing.
    payload = {
        "model": result.weights,
        "averaged_steps": result.steps,
        "averaged_from": [str(p.resolve()) for p in paths],
    }
    # save_checkpoint fills a step-N directory atomically under a scratch root beside `out`
    # (same filesystem), so the final rename is atomic too
    scratch = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        built = save_checkpoint(
            scratch, newest.payload["step"], payload, newest.config, newest.vocabs,
            newest.lexicon, (newest.path / STARTS_FILE, newest.path / EDGES_FILE),
        )  # fmt: skip
        _place(built, out, cfg.overwrite)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    steps = ", ".join(str(s) for s in result.steps)
    print(f"nmt-average: averaged {n} checkpoint(s) (steps {steps}) into {out}")
    return out
