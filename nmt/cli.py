"""The command-line entry points; the only module that imports Hydra or reads argv.

Configs are composed with Hydra's compose API onto the typed schemas of `nmt/run_config.py`, so a
run never changes directory or writes Hydra output folders, and every error (a misspelt key, a bad
choice, a missing file, a broken checkpoint) is one readable line and a non-zero exit status.

    nmt-train [--cfg] [--config-dir DIR] key=value ... group=choice ...
    nmt-train -m key=a,b,c ...   a sweep: one job per combination, run by Hydra's launcher
    nmt-evaluate ckpt=DIR ...    nmt-translate ckpt=DIR ...    nmt-average run_dir=DIR last=N
    nmt-plot run_dir=DIR         nmt-plot run_dirs=[A,B,...]
    nmt-serve ckpt=DIR port=N    nmt-export ckpt=DIR format=onnx|torchscript|ctranslate2 out=DIR

A sweep (`-m`/`--multirun`) goes through Hydra's own runtime, so launcher plugins
(`hydra/launcher=joblib`, `submitit_slurm`, ...) work; but every job's config is composed onto the
schemas first, so a typo in any job fails before the first one trains.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import nmt
from nmt.config import RNNConfig, TransformerConfig
from nmt.errors import NMTError
from nmt.run_config import (
    AverageRunConfig,
    EvaluateRunConfig,
    ExportRunConfig,
    PlotRunConfig,
    ServeRunConfig,
    TrainRunConfig,
    TranslateRunConfig,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig

EXIT_USAGE = 2
EXAMPLES = {
    "train": "model=gru_luong model.attention=concat",
    "evaluate": "ckpt=runs/NAME/checkpoints/best split=test",
    "translate": "ckpt=runs/NAME/checkpoints/best",
    "average": "run_dir=runs/NAME last=5",
    "plot": "run_dirs=[runs/a,runs/b]",
    "serve": "ckpt=runs/NAME/checkpoints/best port=8000",
    "export": "ckpt=runs/NAME/checkpoints/best format=onnx out=runs/export",
}
SWEEP_SUMMARY = "sweep.jsonl"


def config_dir() -> Path:
    """configs/ inside an installed wheel, else the checkout's top-level configs/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise NMTError(f"cannot find the nmt configs directory near {here}")


SCHEMAS = {
    "train": TrainRunConfig,
    "evaluate": EvaluateRunConfig,
    "translate": TranslateRunConfig,
    "average": AverageRunConfig,
    "plot": PlotRunConfig,
    "serve": ServeRunConfig,
    "export": ExportRunConfig,
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
    return " ".join(text.split()) or type(err).__name__  # Hydra's parse errors span lines


@contextlib.contextmanager
def _hydra(name: str) -> Iterator[None]:
    """Hydra initialised on nmt's configs (for compose, override parsing and multirun)."""
    from hydra import initialize_config_dir

    _register_schemas(name)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3", job_name=name):
        yield


def _search_path(extra_dir: str | None) -> list[str]:
    # like Hydra's --config-dir: the user's configs are searched too
    return [f"hydra.searchpath=[file://{Path(extra_dir).resolve()}]"] if extra_dir else []


def _composed(name: str, overrides: list[str], extra_dir: str | None, prefix: str = "") -> object:
    """Compose and convert to the schema's dataclass (inside `_hydra`); errors as NMTError."""
    from hydra import compose
    from omegaconf import OmegaConf

    try:
        composed = compose(config_name=name, overrides=[*overrides, *_search_path(extra_dir)])
        return OmegaConf.to_object(composed)  # runs the schemas' __post_init__ checks
    except NMTError as err:
        if not prefix:
            raise
        raise NMTError(f"{prefix}{err}") from err
    except Exception as err:  # Hydra/OmegaConf composition errors
        raise NMTError(f"config: {prefix}{_explain(err)}") from err


def compose_config(name: str, overrides: list[str], config_dir: str | None = None) -> object:
    """The typed config (`TrainRunConfig`, `EvaluateRunConfig`, ...) that `nmt-<name>` would run
    with these overrides; `config_dir` is an extra directory of configs, like `--config-dir`.

    Raises NMTError with a one-line explanation for a bad key, value or combination.
    """
    with _hydra(name):
        return _composed(name, overrides, config_dir)


# --- sweeps (nmt-train -m) -------------------------------------------------------------------


@dataclasses.dataclass
class _Sweep:
    jobs: list[list[str]]  # each job's task overrides, in Hydra's job order
    swept: list[str]  # the keys that take several values
    launch: list[str]  # what Hydra's multirun receives (hydra.sweep.dir excluded)
    settings: list[str]  # the hydra.* overrides alone


def _expand(overrides: list[str]) -> _Sweep:
    """Hydra's own reading of a sweep: its override parser and the basic sweeper's expansion."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        loader = GlobalHydra.instance().config_loader()  # glob() sweeps list a group's options
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(overrides)
    except Exception as err:
        raise NMTError(f"config: {_explain(err)}") from err
    task = [o for o in parsed if not o.is_hydra_override()]
    for o in task:
        if o.is_sweep_override() and not o.is_discrete_sweep():
            raise NMTError(
                f"{o.input_line}: only value lists (a,b,c), choice(), range() and glob() sweeps "
                "can be expanded and checked before launching"
            )
        if o.key_or_group == "run_dir":
            raise NMTError(
                "run_dir is set per job in a sweep (<sweep dir>/<job number>): "
                "pick the sweep directory with hydra.sweep.dir=DIR instead"
            )
    hydra = [o for o in parsed if o.is_hydra_override()]
    return _Sweep(
        jobs=BasicSweeper.split_arguments(task, max_batch_size=None)[0],
        swept=[o.get_key_element() for o in task if o.is_sweep_override()],
        launch=[o.input_line for o in parsed if o.key_or_group != "hydra.sweep.dir"],
        settings=[o.input_line for o in hydra],
    )


def _sweep_dir(overrides: list[str], extra_dir: str | None) -> Path:
    """hydra.sweep.dir resolved once here (its ${now:} timestamp too), so that every job and the
    summary agree on it, whichever launcher runs the jobs. The overrides are the hydra.* ones and
    the first job's (an experiment=... config may set hydra.sweep.dir)."""
    from hydra import compose

    try:
        cfg = compose(
            config_name="train",
            overrides=[*overrides, *_search_path(extra_dir)],
            return_hydra_config=True,
        )
        return Path(str(cfg.hydra.sweep.dir)).resolve()
    except Exception as err:  # e.g. hydra/launcher=joblib without the plugin installed
        raise NMTError(f"config: {_explain(err)}") from err


def _quote(value: str) -> str:
    """A Hydra override value that stays one string whatever characters it holds."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _raised_by_a_job(err: BaseException) -> bool:
    # Hydra hands a job's exception back through JobReturn.return_value, whichever launcher ran it
    frames = traceback.extract_tb(err.__traceback__)
    return any(f.name == "return_value" and "hydra" in Path(f.filename).parts for f in frames)


def _train_job(cfg: DictConfig) -> dict:
    """One job of a sweep, called by Hydra's launcher (maybe in another process or on another
    machine): train into the job's output directory. An NMTError is reported, not raised, so
    the other jobs still run and the summary says which one failed."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from nmt.train import train_main

    hydra = HydraConfig.get()
    job, run_dir = int(hydra.job.num), str(hydra.runtime.output_dir)
    overrides = [str(o) for o in hydra.overrides.task]
    print(f"nmt-train: job {job}: {' '.join(overrides)} -> run_dir {run_dir}", file=sys.stderr)
    result = {"job": job, "overrides": overrides, "run_dir": run_dir}
    try:
        cfg.run_dir = run_dir
        try:
            run = OmegaConf.to_object(cfg)
        except NMTError:
            raise
        except Exception as err:
            raise NMTError(f"config: {_explain(err)}") from err
        result["metric"] = run.train.metric.value
        result["checkpoint"] = str(train_main(run))
    except NMTError as err:
        print(f"nmt-train: job {job}: error: {err}", file=sys.stderr)
        result["error"] = str(err)
    return result


def _best_validation(run_dir: Path) -> dict | None:
    """The validation the run marked best: the last `"best": true` row of its metrics.jsonl,
    else the metrics stored in its best checkpoint."""
    log, best = run_dir / "metrics.jsonl", None
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("split") == "valid" and row.get("best"):
                best = row
    if best is None and (run_dir / "checkpoints" / "best").exists():
        from nmt.checkpoint import load_checkpoint

        with contextlib.suppress(NMTError):
            payload = load_checkpoint(run_dir / "checkpoints" / "best").payload
            best = {"step": payload["step"], **payload.get("metrics", {})}
    return best


def _summary_row(result: dict, swept: list[str]) -> dict:
    values = dict(o.split("=", 1) for o in result["overrides"] if "=" in o)
    row = {
        "job": result["job"],
        "swept": {key: values.get(key) for key in swept},
        "run_dir": result["run_dir"],
        "metric": result.get("metric"),
        "best": None,
        "step": None,
        "checkpoint": result.get("checkpoint"),
        "error": result.get("error"),
    }
    found = _best_validation(Path(result["run_dir"]))
    if found is not None and row["metric"] in found:
        row["best"], row["step"] = found[row["metric"]], found.get("step")
    return row


def _print_summary(rows: list[dict], swept: list[str]) -> None:
    table = [["job", *swept, "best valid", "step", "run_dir"]]
    for r in rows:
        if r["error"] is not None:
            score = "failed"
        elif r["best"] is None:
            score = "-"
        else:
            score = f"{r['metric']} {r['best']:.4g}"
        values = [str(r["swept"][k]) for k in swept]
        run_dir = Path(r["run_dir"])
        if run_dir.is_relative_to(Path.cwd()):  # shorter to read; sweep.jsonl keeps it absolute
            run_dir = run_dir.relative_to(Path.cwd())
        table.append([str(r["job"]), *values, score, str(r["step"] or "-"), str(run_dir)])
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())


def sweep_train(overrides: list[str], extra_dir: str | None, print_only: bool = False) -> int:
    """`nmt-train -m ...`: check every job's config, run the sweep through Hydra's launcher,
    print a summary table and write it to <sweep dir>/sweep.jsonl."""
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    with _hydra("train"):
        sweep = _expand(overrides)
        n = len(sweep.jobs)
        configs: list[TrainRunConfig] = []
        for i, job in enumerate(sweep.jobs):
            prefix = f"job {i} of {n} ({' '.join(job) or 'defaults'}): "
            configs.append(_composed("train", job, extra_dir, prefix))  # type: ignore[arg-type]
        if print_only:
            print("# each job's run_dir is set when it runs: <hydra.sweep.dir>/<job number>")
            for i, (job, cfg) in enumerate(zip(sweep.jobs, configs)):
                print(f"# job {i}: {' '.join(job)}")
                print(OmegaConf.to_yaml(OmegaConf.structured(cfg)), end="")
            return 0
        sweep_dir = _sweep_dir([*sweep.jobs[0], *sweep.settings], extra_dir)
        restarts = all(c.train.resume or c.train.overwrite for c in configs)
        # what Hydra writes before the first job (multirun.yaml, submitit's logs) is no sweep yet
        held = [p for p in sweep_dir.glob("*") if p.name not in ("multirun.yaml", ".submitit")]
        if held and not restarts:
            raise NMTError(
                f"{sweep_dir} already holds a sweep: pass another hydra.sweep.dir, "
                "train.resume=true to continue its jobs, or train.overwrite=true to start over"
            )
        print(f"nmt-train: sweep of {n} job(s) into {sweep_dir}", file=sys.stderr)
        launch = [
            *sweep.launch,
            f"hydra.sweep.dir={_quote(str(sweep_dir))}",
            *_search_path(extra_dir),
        ]
        try:
            # Hydra's public entry, @hydra.main, reads sys.argv itself; this is the call it makes
            returns = GlobalHydra.instance().hydra.multirun(
                config_name="train", task_function=_train_job, overrides=launch
            )
        except NMTError:
            raise
        except Exception as err:
            if _raised_by_a_job(err):
                raise  # a bug, not a user error: keep the traceback
            # the launcher's own config or environment, e.g. submitit_slurm without SLURM
            raise NMTError(f"launcher: {_explain(err)}") from err
    results = [r.return_value for batch in returns for r in batch]
    rows = sorted((_summary_row(r, sweep.swept) for r in results), key=lambda r: r["job"])
    _print_summary(rows, sweep.swept)
    (sweep_dir / SWEEP_SUMMARY).write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    print(f"nmt-train: summary in {sweep_dir / SWEEP_SUMMARY}", file=sys.stderr)
    failed = [r for r in rows if r["error"] is not None]
    if failed:
        jobs = ", ".join(str(r["job"]) for r in failed)
        raise NMTError(f"{len(failed)} of {len(rows)} job(s) failed (job {jobs}; see above)")
    return 0


# --- entry points ----------------------------------------------------------------------------


def _run(
    name: str,
    action: Callable[[object], object],
    argv: list[str] | None,
    sweep: Callable[[list[str], str | None, bool], int] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog=f"nmt-{name}",
        description=f"nmt {name}: Hydra overrides as key=value, e.g. {EXAMPLES[name]}",
        epilog=f"configs/{name}.yaml lists every key with a comment; --cfg shows their values",
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, group=choice)")
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    parser.add_argument("--config-dir", help="an extra directory of configs to search")
    parser.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        # only nmt-train sweeps; elsewhere the flag is accepted to fail with a clear message
        help="sweep: one run per combination of key=a,b,c values" if sweep else argparse.SUPPRESS,
    )
    args = parser.parse_intermixed_args(argv)  # `-m` before or after the overrides
    try:
        if args.multirun:
            if sweep is None:
                raise NMTError("-m/--multirun (a sweep) is only supported by nmt-train")
            return sweep(args.overrides, args.config_dir, args.cfg)
        cfg = compose_config(name, args.overrides, args.config_dir)
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


def train(argv: list[str] | None = None, started: float | None = None) -> int:
    """nmt-train; `started` (time.monotonic()) is where train.max_minutes counts from."""
    from nmt.train import train_main

    run = functools.partial(train_main, started=started)
    return _run("train", run, argv, sweep=sweep_train)


def evaluate(argv: list[str] | None = None) -> int:
    from nmt.evaluate import evaluate_main

    return _run("evaluate", evaluate_main, argv)


def translate(argv: list[str] | None = None) -> int:
    from nmt.translate import translate_main

    return _run("translate", translate_main, argv)


def average(argv: list[str] | None = None) -> int:
    from nmt.average import average_main

    return _run("average", average_main, argv)


def main_train() -> None:
    sys.exit(train(started=nmt.IMPORTED))  # the budget includes Python's and torch's start


def main_evaluate() -> None:
    sys.exit(evaluate())


def main_translate() -> None:
    sys.exit(translate())


def plot(argv: list[str] | None = None) -> int:
    from nmt.plot import plot_main

    return _run("plot", plot_main, argv)


def main_average() -> None:
    sys.exit(average())


def main_plot() -> None:
    sys.exit(plot())


def serve(argv: list[str] | None = None) -> int:
    from nmt.serve import serve_main

    return _run("serve", serve_main, argv)


def export(argv: list[str] | None = None) -> int:
    from nmt.export import export_main

    return _run("export", export_main, argv)


def main_serve() -> None:
    sys.exit(serve())


def main_export() -> None:
    sys.exit(export())
