"""Self-describing checkpoint directories, written so that a crash never destroys a good one.

Layout of a run's checkpoints::

    checkpoints/step-00001000/ ckpt.pt  config.yaml  spm.model  lexicon.pt
    checkpoints/last -> step-00001000     (symlinks, swapped atomically with os.replace)
    checkpoints/best -> step-00000800

A step directory is filled under a temporary name and renamed into place only when complete;
`last` and `best` are symlinks replaced in one atomic rename, and the parent directory is fsynced
after each rename so that a power cut cannot undo a completed save. A save that fails (a full
disk) removes its partial directory and leaves every earlier checkpoint and link as it was.
`ckpt.pt` holds primitives and tensors only, so it loads with ``torch.load(weights_only=True)``:
a checkpoint cannot run code.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from nmt.errors import NMTError
from nmt.lexicon import LEXICON_FILE, Lexicon, load_lexicon
from nmt.run_config import TrainRunConfig, load_run_config, save_run_config
from nmt.tokenizer import Vocabs, load_vocabs

log = logging.getLogger(__name__)

CKPT_FILE = "ckpt.pt"
CONFIG_FILE = "config.yaml"
FORMAT_VERSION = 1


def step_name(step: int) -> str:
    return f"step-{step:08d}"


def save_checkpoint(
    root: Path,
    step: int,
    payload: dict,
    cfg: TrainRunConfig,
    vocabs: Vocabs,
    lexicon: Lexicon | None = None,
    files: tuple[Path, ...] = (),
) -> Path:
    """Write a new checkpoint directory for `step` atomically and return its path. `files`: more
    of the run's files copied in, those that exist (its sentence starts, `nmt.data.starts`).

    An existing directory is never modified: saving a step twice gives a second directory
    (step-N-1), and the caller moves `last`/`best` before `prune` removes the old one.
    """
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_name(step)
    for n in itertools.count(1):
        if not final.exists():
            break
        final = root / f"{step_name(step)}-{n}"
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        payload = {"format": FORMAT_VERSION, "step": step, **payload}
        payload["vocab_digest"] = {"src": vocabs.src.digest(), "tgt": vocabs.tgt.digest()}
        with open(tmp / CKPT_FILE, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        save_run_config(cfg, tmp / CONFIG_FILE)
        for path in vocabs.files():
            shutil.copy2(path, tmp / path.name)
        if lexicon is not None:
            lexicon.save(tmp / LEXICON_FILE)
        for path in files:
            if path.is_file():
                shutil.copy2(path, tmp / path.name)
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed save leaves nothing behind
        if isinstance(err, OSError):  # ENOSPC, EDQUOT, EIO, permissions: one line, not a trace
            raise NMTError(
                f"cannot save checkpoint {final.name} in {root}: {err.strerror or err}; "
                "the checkpoints already there are intact"
            ) from err
        raise
    return final


def _fsync_dir(path: Path) -> None:
    """Make the entries of `path` (a rename into it) durable; a no-op where directories cannot
    be opened (Windows)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def point(root: Path, link: str, target: Path) -> None:
    """Make root/link a symlink to `target` (a sibling), replacing any old link atomically."""
    tmp = root / f".{link}.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(target.name, tmp)
    os.replace(tmp, root / link)
    _fsync_dir(root)


def prune(root: Path, keep_last: int) -> None:
    """Delete old step directories, keeping the newest `keep_last` and whatever best/last name."""
    steps = sorted(p for p in root.glob("step-*") if p.is_dir())
    pinned = {(root / link).resolve() for link in ("best", "last") if (root / link).exists()}
    for path in steps[: max(len(steps) - keep_last, 0)]:
        if path.resolve() not in pinned:
            shutil.rmtree(path)


@dataclass
class Checkpoint:
    path: Path
    payload: dict
    config: TrainRunConfig
    vocabs: Vocabs
    lexicon: Lexicon | None  # for decode.shortlist; None in checkpoints written before it


ADAPTER = (".lora_a", ".lora_b")  # the parameters a LoRA layer adds (`nmt.models.lora`)


def merged_weights(
    base: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor], rank: int, alpha: float
) -> dict[str, torch.Tensor]:
    """The base model's state dict with each LoRA adapter folded into its layer's weight,
    W + (alpha / rank) B A (a new dict; `base` is not changed)."""
    out = dict(base)
    for key, a in adapters.items():
        if not key.endswith(ADAPTER[0]):
            continue
        layer = key.removesuffix(ADAPTER[0])
        b, weight = adapters.get(layer + ADAPTER[1]), base.get(f"{layer}.weight")
        if b is None or weight is None:
            raise NMTError(f"the adapter {layer} has no B matrix or no base weight to merge with")
        update = (alpha / rank) * (b.float() @ a.float())
        out[f"{layer}.weight"] = (weight.float() + update).to(weight.dtype)
    return out


def load_checkpoint(path: str | Path, mmap: bool = False) -> Checkpoint:
    """Read and check a checkpoint directory (or its ckpt.pt); each failure is one NMTError. A
    LoRA run's checkpoint (its payload holds `adapters` and `lora`, no `model`) is read with its
    base's weights and the adapters merged into them as `payload["model"]`. With `mmap`, the
    tensors are views of the file mapped into memory, read when touched (an int8 translator
    quantizes them one at a time, `nmt.models.int8.give_back`)."""
    path = Path(path)
    if path.name == CKPT_FILE:
        path = path.parent
    if not path.exists():
        raise NMTError(f"checkpoint not found: {path}")
    if not (path / CKPT_FILE).is_file():
        raise NMTError(f"{path} is not a checkpoint directory (no {CKPT_FILE} in it)")
    try:
        payload = torch.load(path / CKPT_FILE, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as err:  # torch raises many types for damaged files
        first = str(err).split(". ")[0]  # torch goes on with a paragraph of advice
        raise NMTError(f"cannot read {path / CKPT_FILE} (corrupt or truncated?): {first}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise NMTError(f"{path / CKPT_FILE} is not an nmt checkpoint of format {FORMAT_VERSION}")
    if not (path / CONFIG_FILE).is_file():
        raise NMTError(f"{path} has no {CONFIG_FILE}")
    try:
        config = load_run_config(path / CONFIG_FILE)
    except NMTError:
        raise
    except Exception as err:
        raise NMTError(f"{path / CONFIG_FILE} does not match the config schema: {err}") from err
    vocabs = load_vocabs(path)
    digest = payload.get("vocab_digest", {})
    if digest.get("src") != vocabs.src.digest() or digest.get("tgt") != vocabs.tgt.digest():
        raise NMTError(
            f"the tokenizer in {path} is not the one this checkpoint was trained with "
            "(different vocabulary)"
        )
    if "lora" in payload and "model" not in payload:
        lora = payload["lora"]
        if not Path(lora["base"]).exists():
            raise NMTError(
                f"{path} holds LoRA adapters of {lora['base']}, which is not there any more: "
                "the adapters need their base checkpoint"
            )
        base = load_checkpoint(lora["base"]).payload["model"]
        payload["model"] = merged_weights(base, payload["adapters"], lora["rank"], lora["alpha"])
    return Checkpoint(path, payload, config, vocabs, load_lexicon(path))


def load_resume_point(root: Path) -> Checkpoint:
    """The checkpoint a run resumes from: `last`, or when that one cannot be read (truncated by
    a crash of the filesystem, damaged on disk) the newest step directory that can, with a warning
    logged that names the damaged one. Raises NMTError when none is readable."""
    errors = []
    candidates = [root / "last", *sorted(root.glob("step-*"), key=step_key, reverse=True)]
    seen = set()
    for path in candidates:
        real = path.resolve()
        if real in seen or not path.is_dir():
            continue
        seen.add(real)
        try:
            ckpt = load_checkpoint(real)  # errors name the step directory, not `last`
        except NMTError as err:
            errors.append(str(err))
            continue
        for error in errors:
            log.warning("skipping a damaged checkpoint: %s", error)
        if errors:
            log.warning("resuming from the newest readable checkpoint instead: %s", ckpt.path)
        return ckpt
    raise NMTError(f"no readable checkpoint in {root}: " + "; ".join(errors or ["none found"]))


def step_key(path: Path) -> tuple[int, int]:
    """The order of step directories: step-00000200-1 (a second save of step 200) sorts after
    step-00000200; a name that is no step directory sorts first."""
    parts = path.name.split("-")
    try:
        return int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    except (IndexError, ValueError):
        return -1, 0
