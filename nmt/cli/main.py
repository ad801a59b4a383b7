"""The command-line entry points (`nmt-train`, `nmt-evaluate`...): the only module that reads argv.

Each command composes its config (`nmt/cli/compose.py`) and hands the typed result to the library;
every error (a misspelt key, a bad choice, a missing file, a broken checkpoint) is one readable
line and a non-zero exit status.

    nmt-train [--cfg] [--config-dir DIR] key=value ... group=choice ...
    nmt-train -m key=a,b,c ...   a sweep: one job per combination, run by Hydra's launcher
    nmt-evaluate ckpt=DIR ...    nmt-translate ckpt=DIR ...    nmt-average run_dir=DIR last=N
    nmt-plot run_dir=DIR         nmt-plot run_dirs=[A,B,...]
    nmt-serve ckpt=DIR port=N    nmt-export ckpt=DIR format=onnx|torchscript|ctranslate2 out=DIR
    nmt-score ckpt=DIR src=FILE hyp=FILE   (or tsv=FILE, or source<TAB>translation on stdin)
    nmt-import source=DIR_OR_HUB_ID out=DIR   a Marian model (OPUS-MT) as an nmt checkpoint

A sweep (`-m`/`--multirun`) is `nmt/cli/sweep.py`.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import textwrap
from collections.abc import Callable

import nmt
from nmt.cli.compose import SCHEMAS, compose_config, config_groups
from nmt.cli.logs import command_logging
from nmt.errors import NMTError

EXIT_USAGE = 2
EXAMPLES = {
    "train": "model=gru_luong model.attention=concat",
    "evaluate": "ckpt=runs/NAME/checkpoints/best split=test",
    "translate": "ckpt=runs/NAME/checkpoints/best",
    "average": "run_dir=runs/NAME last=5",
    "plot": "run_dirs=[runs/a,runs/b]",
    "serve": "ckpt=runs/NAME/checkpoints/best port=8000",
    "export": "ckpt=runs/NAME/checkpoints/best format=onnx out=runs/export",
    "score": "ckpt=runs/NAME/checkpoints/best src=test.de hyp=test.hyp",
    "import": "source=Helsinki-NLP/opus-mt-de-en out=runs/opus-mt-de-en",
}


def _help(name: str) -> str:
    """The epilog of `nmt-<name> --help`: its config groups with their options, and where every
    key is documented."""
    lines = []
    groups = config_groups(name)
    if groups:
        lines.append("config groups (group=option; the default in brackets):")
        width = max(len(group) for group in groups) + 1
        for group, (default, options) in groups.items():
            shown = ", ".join(f"[{o}]" if o == default else o for o in options)
            lines += textwrap.wrap(
                shown, 96, initial_indent=f"  {group + ':':<{width}} ",
                subsequent_indent=" " * (width + 3),
            )  # fmt: skip
    where = f"configs/{name}.yaml" + (" and configs/<group>/<option>.yaml" if groups else "")
    about = (
        f"Every key is in {where}, each with a comment; the typed schemas are in "
        f"nmt/run_config.py ({SCHEMAS[name].__name__}) and nmt/config.py. --cfg prints the "
        "composed values; --config-dir DIR adds options of your own (DIR/<group>/<option>.yaml)."
    )
    lines += ["", *textwrap.wrap(about, 96)]
    return "\n".join(lines)


def _run(
    name: str,
    action: Callable[[object], object],
    argv: list[str] | None,
    sweep: Callable[[list[str], str | None, bool], int] | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog=f"nmt-{name}",
        description=f"nmt {name}: Hydra overrides as key=value, e.g. {EXAMPLES[name]}",
        epilog=_help(name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    with command_logging(f"nmt-{name}"):
        return _act(name, action, args, sweep)


def _act(
    name: str,
    action: Callable[[object], object],
    args: argparse.Namespace,
    sweep: Callable[[list[str], str | None, bool], int] | None,
) -> int:
    """Compose the config and run the command; every error is one line and an exit status."""
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
    from nmt.cli.sweep import sweep_train
    from nmt.training.trainer import train_main

    run = functools.partial(train_main, started=started)
    return _run("train", run, argv, sweep=sweep_train)


def evaluate(argv: list[str] | None = None) -> int:
    from nmt.cli.evaluate import evaluate_main

    return _run("evaluate", evaluate_main, argv)


def translate(argv: list[str] | None = None) -> int:
    from nmt.cli.translate import translate_main

    return _run("translate", translate_main, argv)


def score(argv: list[str] | None = None) -> int:
    from nmt.cli.score import score_main

    return _run("score", score_main, argv)


def average(argv: list[str] | None = None) -> int:
    from nmt.training.average import average_main

    return _run("average", average_main, argv)


def plot(argv: list[str] | None = None) -> int:
    from nmt.training.plot import plot_main

    return _run("plot", plot_main, argv)


def serve(argv: list[str] | None = None) -> int:
    from nmt.serving.app import serve_main

    return _run("serve", serve_main, argv)


def export(argv: list[str] | None = None) -> int:
    from nmt.export.exporter import export_main

    return _run("export", export_main, argv)


def import_model(argv: list[str] | None = None) -> int:
    from nmt.pretrained.importer import import_main

    return _run("import", import_main, argv)


# --- the console scripts of pyproject.toml ----------------------------------------------------


def main_train() -> None:
    code = train(started=nmt.IMPORTED)  # the budget includes Python's and torch's start
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A rank of a torchrun job leaves without the interpreter's teardown. DDP keeps the
        # process group, and with it gloo's worker threads, alive past destroy_process_group; a
        # worker that frees a tensor during the teardown needs the GIL, and Python then ends
        # the thread mid-destructor: std::terminate, SIGABRT, a failed job after a finished
        # training (about 1 run in 20 of tests/test_distributed.py on 2 CPU cores). Everything
        # the run writes is closed by now; only the standard streams need a flush.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def main_evaluate() -> None:
    sys.exit(evaluate())


def main_translate() -> None:
    sys.exit(translate())


def main_score() -> None:
    sys.exit(score())


def main_average() -> None:
    sys.exit(average())


def main_plot() -> None:
    sys.exit(plot())


def main_serve() -> None:
    sys.exit(serve())


def main_export() -> None:
    sys.exit(export())


def main_import() -> None:
    sys.exit(import_model())
