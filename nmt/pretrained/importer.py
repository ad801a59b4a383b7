"""nmt-import: the importer of a model's kind, by its config.json's model_type."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nmt.data.starts import write_sentence_files
from nmt.errors import NMTError
from nmt.pretrained.m2m100 import import_m2m100
from nmt.pretrained.marian import import_marian, locate, read_json
from nmt.pretrained.t5 import import_t5
from nmt.run_config import ImportRunConfig


def import_model(
    source: str,
    out: Path,
    keep_text: Sequence[str] = (),
    add_languages: dict[str, str] | None = None,
) -> Path:
    """Write the model `source` (a directory, or a Hugging Face hub id) as the new checkpoint
    `out`: an M2M-100 (NLLB-200, M2M-100: model_type m2m_100) or an mBART-50 (mbart), both by
    `nmt.pretrained.m2m100`, a T5 (t5, mt5: T5 v1.1, mT5, MADLAD-400) by `nmt.pretrained.t5`,
    or a Marian model (`nmt.pretrained.marian`, which names what it refuses). With `keep_text`
    (files), only the pieces those texts need are kept (`nmt.pretrained.trimming`);
    `add_languages` adds language codes to a model that has codes (`m2m100.add_codes`)."""
    directory = locate(source)
    kind = read_json(directory / "config.json").get("model_type")
    if kind in ("m2m_100", "mbart"):
        return import_m2m100(source, out, directory, keep_text, add_languages)
    if add_languages:
        raise NMTError(
            "add_languages is for models that name their languages by added code pieces "
            "(NLLB-200, M2M-100); a Marian model's >>xx<< tags and MADLAD-400's <2xx> are "
            "pieces of its vocabulary"
        )
    if kind in ("t5", "mt5"):
        return import_t5(source, out, directory, keep_text)
    return import_marian(source, out, directory, keep_text)


def import_main(cfg: ImportRunConfig) -> None:
    """nmt-import: write the checkpoint and say where it is and how to use it. With
    `sentence_text`, the words that start and end its sentences go with it (`nmt.data.starts`):
    read before the model, so that a missing file fails before any work."""
    sentences = [line for path in cfg.sentence_text for line in _read_text(path)]
    out = import_model(cfg.source, Path(cfg.out), cfg.keep_text, cfg.add_languages)
    if sentences:
        write_sentence_files(sentences, out)
    print(
        f"{out}\n  nmt-translate ckpt={out}\n  nmt-evaluate ckpt={out} data=NAME split=test\n"
        f"  nmt-train --config-dir {out} model=imported train.init_from={out} data=NAME ..."
    )


def _read_text(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as err:
        raise NMTError(f"sentence_text: cannot read {path}: {err.strerror}") from None
