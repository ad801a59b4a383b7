"""``nmt-train -m``: a sweep, one training run per combination of the swept values.

The sweep goes through Hydra's own runtime, so launcher plugins (``hydra/launcher=joblib``,
``submitit_slurm``, ...) run the jobs; but every job's config is composed onto the schemas first,
so a typo in any job fails before the first one trains. A summary table is printed at the end and
written to ``<sweep dir>/sweep.jsonl``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from nmt.cli.compose import checkpoint_options, composed, explain, hydra_session, search_path
from nmt.errors import NMTError

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from nmt.run_config import TrainRunConfig

SWEEP_SUMMARY = "sweep.jsonl"


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
        raise NMTError(f"config: {explain(err)}") from err
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
            overrides=[*overrides, *search_path(extra_dir)],
            return_hydra_config=True,
        )
        return Path(str(cfg.hydra.sweep.dir)).resolve()
    except Exception as err:  # e.g. hydra/launcher=joblib without the plugin installed
        raise NMTError(f"config: {explain(err)}") from err


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

    from nmt.training.trainer import train_main

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
            raise NMTError(f"config: {explain(err)}") from err
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

    with hydra_session("train"):
        sweep = _expand(overrides)
        n = len(sweep.jobs)
        configs: list[TrainRunConfig] = []
        for i, job in enumerate(sweep.jobs):
            prefix = f"job {i} of {n} ({' '.join(job) or 'defaults'}): "
            configs.append(composed("train", job, extra_dir, prefix))  # type: ignore[arg-type]
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
        # the model an imported train.init_from brings, when every job takes it (each job's
        # config above was composed with its own)
        brought = {tuple(map(tuple, checkpoint_options("train", job))) for job in sweep.jobs}
        options, dirs = (
            checkpoint_options("train", sweep.jobs[0]) if len(brought) == 1 else ([], [])
        )
        launch = [
            *options,
            *sweep.launch,
            f"hydra.sweep.dir={_quote(str(sweep_dir))}",
            *search_path(extra_dir, *dirs),
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
            raise NMTError(f"launcher: {explain(err)}") from err
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
