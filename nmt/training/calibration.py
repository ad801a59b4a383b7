"""The confidence calibration of a run's best checkpoint, fitted at the end of training."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from nmt.config import Split
from nmt.data.splits import read_split
from nmt.run_config import TrainRunConfig
from nmt.translation.confidence import fit
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

CALIBRATION_SENTENCES = 1000  # of the valid split, at most, that the calibration is fitted on


def calibrate(cfg: TrainRunConfig, best: Path, device: torch.device) -> None:
    """The best checkpoint's confidence calibration, fitted on the valid split with its decode
    settings (`nmt.translation.confidence.fit`) and stored beside it. A run on several corpora
    is left uncalibrated (nmt-evaluate confidence=true fits one direction's)."""
    if cfg.data.corpora:
        log.info("confidence: not calibrated (several corpora): nmt-evaluate confidence=true")
        return
    valid = read_split(cfg.data, Split.valid)
    sources = valid.src[:CALIBRATION_SENTENCES]
    references = valid.tgt[:CALIBRATION_SENTENCES]
    translator = Translator.from_checkpoint(best, device=str(device))
    fitted = fit(translator, sources, references)
    fitted.calibration.save(best)
    log.info(
        "confidence calibrated on %d valid sentences: temperature %.1f, pieces' ECE %.3f -> %.3f",
        len(sources), fitted.calibration.temperature, fitted.report["token_ece_t1"],
        fitted.report["token_ece"],
    )  # fmt: skip
