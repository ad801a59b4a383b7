"""What a run may start from: its own last checkpoint, continued exactly (`train.resume`), or the
weights and tokenizer of another run (`train.init_from`), and the settings each of them must keep.

Exact resume continues the stored batch order and random streams: a changed corpus, tokenizer,
batching or seed would make the stored data position name other batches, so such a resume is
refused with the keys named, and `train.init_from` offers the way to start afresh from the weights.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from nmt.checkpoint import Checkpoint, load_checkpoint
from nmt.errors import NMTError
from nmt.run_config import TrainRunConfig, flatten
from nmt.tokenizer import SAMPLING_KEYS, MarianVocab

log = logging.getLogger(__name__)

# settings a resumed or initialised run may change: where and how fast the corpus is prepared,
# and how many lines trained a tokenizer that comes with the checkpoint anyway
UNBOUND = ("data.cache_dir", "data.num_proc", "data.tokenizer.max_sentences")


def check_resume(cfg: TrainRunConfig, resume: Checkpoint) -> None:
    """Refuse to continue `resume` exactly with another model or another batch order."""
    _check_same_model(cfg, resume.config, "train.resume")
    _check_same_schedule(cfg, resume.config, resume.path)


def _differences(now: dict, then: dict) -> list[str]:
    keys = [k for k in then if now.get(k) != then[k]] + [k for k in now if k not in then]
    return [f"{k}={then.get(k)} (now {now.get(k)})" for k in keys]


def _check_same_model(
    cfg: TrainRunConfig, stored: TrainRunConfig, why: str, where: Path | None = None
) -> None:
    """Loading weights into another architecture would fail deep in load_state_dict; say it
    plainly, and (train.init_from, `where`) how to give the checkpoint's model."""
    diff = _differences(flatten(cfg.model, "model"), flatten(stored.model, "model"))
    if not diff:
        return
    shown = ", ".join(diff[:6]) + (f" and {len(diff) - 6} more" if len(diff) > 6 else "")
    how = ""
    if where is not None:
        how = (
            f": give nmt-train the model it was trained with (the model section of "
            f"{where / 'config.yaml'}: the model=... and model.KEY=... of its command); an "
            "imported checkpoint brings its own, taken when no model=... is given"
        )
    raise NMTError(f"{why}: the checkpoint was trained with {shown}{how}")


def _schedule_keys(cfg: TrainRunConfig) -> dict:
    """What the saved data position (epoch, batch index) and random streams mean: with another
    corpus, tokenizer, batching or seed the same position names other batches."""
    data = flatten(cfg.data, "data")
    for key in UNBOUND:
        data.pop(key, None)
    return {
        **data,
        "train.batch_tokens": cfg.train.batch_tokens,
        "train.accum_steps": cfg.train.accum_steps,
        "train.length_step": cfg.train.length_step,
        "seed": cfg.seed,
    }


def _check_same_schedule(cfg: TrainRunConfig, stored: TrainRunConfig, where: Path) -> None:
    """Exact resume continues the stored batch order; refuse settings that would silently make it
    another one, and say how to start afresh from the weights instead."""
    diff = _differences(_schedule_keys(cfg), _schedule_keys(stored))
    if diff:
        raise NMTError(
            f"train.resume: this run changes {', '.join(diff)}; resuming would not continue the "
            "same batches. Resume with the stored values, or start a new run from these weights: "
            f"run_dir=NEW train.init_from={where} (new optimizer, schedule, step count and data "
            "order)"
        )


def load_init(cfg: TrainRunConfig) -> Checkpoint:
    """train.init_from: a new run that starts from another run's weights and tokenizer."""
    init = load_checkpoint(cfg.train.init_from)
    _check_same_model(cfg, init.config, "train.init_from", init.path)
    if isinstance(init.vocabs.src, MarianVocab):  # imported: no tokenizer settings to keep
        return _starting(init)
    key = "data.tokenizer"
    now, then = flatten(cfg.data.tokenizer, key), flatten(init.config.data.tokenizer, key)
    # subword sampling changes the training segmentation, not the tokenizer: a run may turn it on
    free = (*UNBOUND, *(f"{key}.{name}" for name in SAMPLING_KEYS))
    diff = [d for d in _differences(now, then) if d.split("=")[0] not in free]
    if diff:
        raise NMTError(
            "train.init_from keeps the checkpoint's tokenizer (the embeddings are tied to it): "
            + ", ".join(diff)
        )
    return _starting(init)


def _starting(init: Checkpoint) -> Checkpoint:
    log.info(
        "starting from the weights and tokenizer of %s (step %d); optimizer, learning-rate "
        "schedule, step count, data order and early stopping start afresh",
        init.path, init.payload["step"],
    )  # fmt: skip
    return init


def rng_state() -> dict:
    """This process's random streams (dropout, sampling), for a checkpoint: resuming them makes
    the continued run draw what the uninterrupted one would have."""
    state = {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    if state["cuda"]:
        # cuDNN draws the dropout between the layers of an nn.GRU/nn.LSTM from a random stream of
        # its own, which no checkpoint can hold; it reseeds that stream from the CUDA generator at
        # its next call whenever the generator's state has been set. Setting the state to what it
        # is makes this run reseed here, as a run resumed from this checkpoint does after
        # `set_rng_state`, so both draw the same masks from here on.
        torch.cuda.set_rng_state_all(state["cuda"])
    return state


def set_rng_state(state: dict) -> None:
    """Restore `rng_state()`; a checkpoint written without CUDA leaves the CUDA streams alone."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
