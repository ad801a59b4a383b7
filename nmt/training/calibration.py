"""The confidence calibration of a run's best checkpoint, fitted at the end of training."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import torch

from nmt.config import Split, Strategy
from nmt.data.splits import read_split
from nmt.run_config import TrainRunConfig
from nmt.translation.confidence import fit, search_kind
from nmt.translation.translator import Translator

log = logging.getLogger(__name__)

CALIBRATION_SENTENCES = 1000  # of the valid split, at most, that the calibration is fitted on


def calibrate(cfg: TrainRunConfig, best: Path, device: torch.device) -> None:
    """The best checkpoint's confidence calibrations, fitted on the valid split with
    `cfg.calibration_decode` (beam 5: what the decoding commands use unless told otherwise;
    `nmt.translation.confidence.fit`) and with greedy search, stored beside it. A run on
    several corpora is left uncalibrated (nmt-evaluate confidence=true fits one direction's)."""
    if cfg.data.corpora:
        log.info("confidence: not calibrated (several corpora): nmt-evaluate confidence=true")
        return
    valid = read_split(cfg.data, Split.valid)
    sources = valid.src[:CALIBRATION_SENTENCES]
    references = valid.tgt[:CALIBRATION_SENTENCES]
    translator = Translator.from_checkpoint(best, device=str(device))
    # one calibration per kind of search (`search_kind`): beam search's, and greedy's
    beam = cfg.calibration_decode
    for decode in (beam, replace(beam, strategy=Strategy.greedy)):
        fitted = fit(translator, sources, references, decode=decode)
        fitted.calibration.save(best)
        log.info(
            "confidence calibrated for %s search on %d valid sentences: pieces' ECE %.3f -> "
            "%.3f (held out)", search_kind(decode), len(sources), fitted.report["token_ece_t1"],
            fitted.report["token_ece"],
        )  # fmt: skip
