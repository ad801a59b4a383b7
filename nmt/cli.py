"""The three command-line entry points; the only module that imports Hydra or reads argv.

Configs are composed with Hydra's compose API onto the typed schemas of `nmt/config.py`, so a run
never changes directory or writes Hydra output folders, and every error (a misspelt key, a bad
choice, a missing file, a broken checkpoint) is one readable line and a non-zero exit status.

    nmt-train [--cfg] [--config-dir DIR] key=value ... group=choice ...
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from nmt.config import (
    EvaluateRunConfig,
    RNNConfig,
    TrainRunConfig,
    TransformerConfig,
    TranslateRunConfig,
)
from nmt.errors import NMTError

EXIT_USAGE = 2


def config_dir() -> Path:
    """configs/ inside an installed wheel, else the checkout's top-level configs/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise NMTError(f"cannot find the nmt configs directory near {here}")


def _register_schemas() -> None:
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainRunConfig)
    store.store(name="evaluate_schema", node=EvaluateRunConfig)
    store.store(name="translate_schema", node=TranslateRunConfig)
    store.store(group="model", name="rnn", node=RNNConfig)
    store.store(group="model", name="transformer", node=TransformerConfig)


def _explain(err: Exception) -> str:
    """One line (or a short list) a user can act on, from Hydra/OmegaConf's exception chain."""
    from omegaconf.errors import (
        ConfigAttributeError,
        ConfigKeyError,
        MissingMandatoryValue,
        OmegaConfBaseException,
    )

    chain, seen = [], err
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for e in chain:
        if isinstance(e, MissingMandatoryValue):
            return f"missing value: {e.full_key} (pass {e.full_key}=...)"
        if isinstance(e, (ConfigAttributeError, ConfigKeyError)) and dataclasses.is_dataclass(
            e.object_type
        ):
            valid = ", ".join(f.name for f in dataclasses.fields(e.object_type))
            return f"unknown key '{e.full_key}'; valid keys here: {valid}"
        if isinstance(e, OmegaConfBaseException) and getattr(e, "msg", None):
            where = f" (at {e.full_key})" if getattr(e, "full_key", None) else ""
            return f"{str(e.msg).splitlines()[0]}{where}"
    # Hydra's own errors (an unknown group choice lists the available ones); drop the search path
    text = str(err).split("Config search path:")[0].strip()
    head, _, options = text.partition("Available options in")
    if options:
        group, _, names = options.partition(":")
        text = f"{head.strip()}; available options in{group}: {', '.join(names.split())}"
    return text or type(err).__name__


def _compose(name: str, overrides: list[str], extra_dir: str | None) -> object:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    _register_schemas()
    if extra_dir:  # like Hydra's --config-dir: the user's configs are searched too
        overrides = [*overrides, f"hydra.searchpath=[file://{Path(extra_dir).resolve()}]"]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name=name):
        composed = compose(config_name=name, overrides=overrides)
    return OmegaConf.to_object(composed)  # runs the schemas' __post_init__ checks


def _run(name: str, action: Callable[[object], object], argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"nmt-{name}",
        description=f"nmt {name}: Hydra overrides as key=value, e.g. model=gru_luong",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, group=choice)")
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    parser.add_argument("--config-dir", help="an extra directory of configs to search")
    args = parser.parse_args(argv)
    try:
        try:
            cfg = _compose(name, args.overrides, args.config_dir)
        except NMTError:
            raise
        except Exception as err:  # Hydra/OmegaConf composition errors
            raise NMTError(f"config: {_explain(err)}") from err
        if args.cfg:
            from omegaconf import OmegaConf

            print(OmegaConf.to_yaml(OmegaConf.structured(cfg)), end="")
            return 0
        action(cfg)
    except NMTError as err:
        print(f"nmt-{name}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"nmt-{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `nmt-translate ... | head`
        return 0
    return 0


def train(argv: list[str] | None = None) -> int:
    from nmt.train import train_main

    return _run("train", train_main, argv)


def evaluate(argv: list[str] | None = None) -> int:
    from nmt.evaluate import evaluate_main

    return _run("evaluate", evaluate_main, argv)


def translate(argv: list[str] | None = None) -> int:
    from nmt.translate import translate_main

    return _run("translate", translate_main, argv)


def main_train() -> None:
    sys.exit(train())


def main_evaluate() -> None:
    sys.exit(evaluate())


def main_translate() -> None:
    sys.exit(translate())
