"""Training curves from a run's `metrics.jsonl`: `nmt-plot run_dir=DIR` draws one run,
`nmt-plot run_dirs=[A,B,...]` draws several on one chart (a sweep), each labelled by the config
values in which it differs from the others (`model.attention=dot`).

Four panels: training loss and validation loss against updates, validation BLEU against updates
and against wall-clock minutes (since the run's first log line; a resumed run shows its pause).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from nmt.errors import NMTError
from nmt.run_config import PlotRunConfig, flatten, load_run_config

CONFIG = Path("checkpoints") / "last" / "config.yaml"  # the config a run was trained with
UNLABELLED = {"run_dir"}  # differs between any two runs and says nothing


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of run_dir/metrics.jsonl; a missing, empty or damaged log is one NMTError."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise NMTError(f"{path} not found: is {run_dir} a training run directory?")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise NMTError(f"{path}, line {number}: not JSON ({err.msg})") from err
    if not rows:
        raise NMTError(f"{path} is empty: the run has not logged yet")
    return rows


def run_labels(run_dirs: list[Path]) -> list[str]:
    """One legend label per run: the config keys whose values differ between the runs, read from
    each run's last checkpoint; the directory name where a config cannot be read or none differs."""
    configs = []
    for run_dir in run_dirs:
        try:
            configs.append(flatten(load_run_config(run_dir / CONFIG)))
        except Exception:  # noqa: BLE001 - no checkpoint yet, or an old one: fall back to names
            return [str(run_dir) for run_dir in run_dirs]
    keys = sorted({k for c in configs for k in c} - UNLABELLED)
    differing = [k for k in keys if len({_same(c.get(k)) for c in configs}) > 1]
    if not differing:
        return [str(run_dir) for run_dir in run_dirs]
    return [", ".join(f"{k}={c.get(k)}" for k in differing) for c in configs]


def _same(value: object) -> str:
    """What makes two config values the same: one directory written two ways (relative,
    absolute) is."""
    if isinstance(value, str) and value and os.path.exists(value):
        return str(Path(value).resolve())
    return repr(value)


def plot_runs(run_dirs: list[Path], labels: list[str], out: Path) -> Path:
    """Draw the curves of `run_dirs` into the PNG `out` (written atomically) and return it."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, nothing pops up
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (train_ax, valid_ax), (bleu_ax, time_ax) = axes
    any_bleu = False
    for run_dir, label in zip(run_dirs, labels):
        rows = read_metrics(run_dir)
        start = rows[0]["time"]
        train = [r for r in rows if r.get("split") == "train"]
        valid = [r for r in rows if r.get("split") == "valid" and "loss" in r]
        (line,) = train_ax.plot([r["step"] for r in train], [r["loss"] for r in train], lw=1)
        colour = line.get_color()
        valid_ax.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", c=colour)
        scored = [r for r in valid if "bleu" in r]
        any_bleu |= bool(scored)
        bleu_ax.plot([r["step"] for r in scored], [r["bleu"] for r in scored], "o-", c=colour)
        minutes = [(r["time"] - start) / 60 for r in scored]
        time_ax.plot(minutes, [r["bleu"] for r in scored], "o-", c=colour, label=label)
    train_ax.set(title="training loss (label-smoothed, per token)", xlabel="update")
    valid_ax.set(title="validation loss (per token)", xlabel="update")
    bleu_ax.set(title="validation BLEU", xlabel="update")
    time_ax.set(title="validation BLEU", xlabel="minutes since the first log line")
    if not any_bleu:
        for ax in (bleu_ax, time_ax):
            ax.text(0.5, 0.5, "no BLEU logged (train.valid_bleu=false)", ha="center",
                    transform=ax.transAxes)  # fmt: skip
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    columns = max(1, min(len(labels), 120 // (max(map(len, labels)) + 8)))
    fig.legend(*time_ax.get_legend_handles_labels(), loc="lower center", ncol=columns,
               fontsize="small", frameon=False)  # fmt: skip
    rows = -(-len(labels) // columns)
    fig.tight_layout(rect=(0, 0.015 + 0.03 * rows, 1, 1))  # room for the legend below
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)  # a viewer that reloads the file never sees half of it
    return out


def plot_main(cfg: PlotRunConfig) -> Path:
    if cfg.run_dir is not None:
        run_dirs = [Path(cfg.run_dir)]
        out = Path(cfg.out) if cfg.out else run_dirs[0] / "curves.png"
        labels = [run_dirs[0].name]
    else:
        run_dirs = [Path(d) for d in cfg.run_dirs]
        parent = Path(os.path.commonpath([d.resolve() for d in run_dirs]))
        out = Path(cfg.out) if cfg.out else parent / "curves.png"
        labels = run_labels(run_dirs)
    for run_dir in run_dirs:  # every log is checked before anything is drawn
        read_metrics(run_dir)
    path = plot_runs(run_dirs, labels, out)
    print(f"nmt-plot: curves of {len(run_dirs)} run(s) written to {path}")
    return path
