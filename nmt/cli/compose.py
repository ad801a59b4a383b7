"""Hydra composition: nmt's configs/ composed onto the typed schemas of ``nmt/run_config.py``.

Composition goes through Hydra's compose API, so a command never changes directory or writes
Hydra output folders, and a misspelt key, a bad choice or a bad combination is one NMTError whose
message names the valid keys or options. Only this module and ``nmt/cli/sweep.py`` import Hydra.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from nmt.config import RNNConfig, TransformerConfig
from nmt.errors import NMTError
from nmt.run_config import (
    CHECKPOINT_OPTIONS,
    AverageRunConfig,
    EvaluateRunConfig,
    ExportRunConfig,
    ImportRunConfig,
    PlotRunConfig,
    ScoreRunConfig,
    ServeRunConfig,
    TrainRunConfig,
    TranslateRunConfig,
    load_data_yaml,
)


def config_dir() -> Path:
    """configs/ inside an installed wheel, else the checkout's top-level configs/."""
    here = Path(__file__).resolve().parents[1]  # the nmt package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise NMTError(f"cannot find the nmt configs directory near {here}")


def config_groups(name: str) -> dict[str, tuple[str | None, list[str]]]:
    """The config groups `nmt-<name>` composes, from the defaults list of configs/<name>.yaml:
    {group: (default option or None, every option in configs/<group>/)}."""
    from omegaconf import OmegaConf

    root = config_dir()
    groups = {}
    defaults = OmegaConf.to_container(OmegaConf.load(root / f"{name}.yaml")).get("defaults", [])
    for entry in defaults:
        if not isinstance(entry, dict):  # the schema, _self_
            continue
        for group, option in entry.items():
            if not (root / group).is_dir():  # `override hydra/...`, schemas
                continue
            options = sorted(p.stem for p in (root / group).glob("*.yaml"))
            groups[group] = (option, options)
    return groups


SCHEMAS = {
    "train": TrainRunConfig,
    "evaluate": EvaluateRunConfig,
    "translate": TranslateRunConfig,
    "average": AverageRunConfig,
    "plot": PlotRunConfig,
    "serve": ServeRunConfig,
    "export": ExportRunConfig,
    "score": ScoreRunConfig,
    "import": ImportRunConfig,
}


def _register_schemas(name: str) -> None:
    """configs/<name>.yaml's schema, and the model schemas for training: each store converts a
    dataclass to a config, a start-up cost every command would pay for all of them."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name=f"{name}_schema", node=SCHEMAS[name])
    if name == "train":
        store.store(group="model", name="rnn", node=RNNConfig)
        store.store(group="model", name="transformer", node=TransformerConfig)


def explain(err: Exception) -> str:
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
    return " ".join(text.split()) or type(err).__name__  # Hydra's parse errors span lines


@contextlib.contextmanager
def hydra_session(name: str) -> Iterator[None]:
    """Hydra initialised on nmt's configs (for compose, override parsing and multirun)."""
    from hydra import initialize_config_dir

    _register_schemas(name)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name=name):
        yield


def search_path(*extra_dirs: str | Path | None) -> list[str]:
    # like Hydra's --config-dir: the user's configs are searched too
    dirs = [f"file://{Path(d).resolve()}" for d in extra_dirs if d]
    return [f"hydra.searchpath=[{','.join(dirs)}]"] if dirs else []


# the commands that decode with a `ckpt`: an imported one brings its authors' decode settings
DECODING = ("evaluate", "translate", "score", "serve")


def checkpoint_options(name: str, overrides: list[str]) -> tuple[list[str], list[Path]]:
    """The options a checkpoint named on the command line brings (`CHECKPOINT_OPTIONS`), as
    overrides, and the directories that hold them: for nmt-train, the model of train.init_from
    when no model=... is given (an imported model fine-tunes with its own architecture); for the
    decoding commands, the decode settings of ckpt (the first of an ensemble's) when no
    decode=... is given, so that an imported model decodes as its authors ship it, and
    decode.KEY=VALUE changes those. A checkpoint without them changes nothing."""
    given = {_key(o) for o in overrides}
    group, source = {"train": ("model", "train.init_from")}.get(name, ("decode", "ckpt"))
    if (name != "train" and name not in DECODING) or group in given:
        return [], []
    value = next((o.partition("=")[2] for o in overrides if _key(o) == source), "")
    first = value.strip().strip("[]").split(",")[0].strip().strip("'\"")
    if first and (Path(first) / CHECKPOINT_OPTIONS[group]).is_file():
        load_data_yaml(Path(first) / CHECKPOINT_OPTIONS[group])  # no interpolation in it
        return [f"{group}={CHECKPOINT_OPTIONS[group].stem}"], [Path(first)]
    return [], []


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def composed(name: str, overrides: list[str], extra_dir: str | None, prefix: str = "") -> object:
    """Compose and convert to the schema's dataclass (inside `hydra_session`), with the options
    the command's checkpoint brings (`checkpoint_options`); errors raise NMTError."""
    from hydra import compose
    from omegaconf import OmegaConf

    brought, dirs = checkpoint_options(name, overrides)
    _check_unchosen_groups(name, [*brought, *overrides])
    try:
        cfg = compose(
            config_name=name, overrides=[*brought, *overrides, *search_path(extra_dir, *dirs)]
        )
        return OmegaConf.to_object(cfg)  # runs the schemas' __post_init__ checks
    except NMTError as err:
        if not prefix:
            raise
        raise NMTError(f"{prefix}{err}") from err
    except Exception as err:  # Hydra/OmegaConf composition errors
        raise NMTError(f"config: {prefix}{explain(err)}") from err


def _check_unchosen_groups(name: str, overrides: list[str]) -> None:
    """A key set in a group that no option chose (nmt-evaluate's data is null: the checkpoint's
    is read) fails naming the group's options, not with OmegaConf's "Unexpected type for root:
    NoneType"."""
    given = {_key(o) for o in overrides}
    for group, (default, options) in config_groups(name).items():
        if default is not None or group in given:
            continue
        keys = sorted(k for k in given if k.startswith(f"{group}."))
        if keys:
            raise NMTError(
                f"{keys[0]}: no {group} config is chosen here ({name}'s {group} is its "
                f"checkpoint's): choose one first, {group}=NAME ({', '.join(options)}), then "
                f"change its keys"
            )


def compose_config(name: str, overrides: list[str], config_dir: str | None = None) -> object:
    """The typed config (`TrainRunConfig`, `EvaluateRunConfig`, ...) that `nmt-<name>` would run
    with these overrides; `config_dir` is an extra directory of configs, like `--config-dir`.

    Raises NMTError with a one-line explanation for a bad key, value or combination.
    """
    with hydra_session(name):
        return composed(name, overrides, config_dir)
