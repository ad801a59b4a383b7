"""The whole chain behind `multi30k_gru_kd_both_more` and `multi30k_transformer_kd3`, Multi30k
de->en, one command from the raw corpus:

    python scripts/multi30k_chain.py --data ../shared/data/multi30k --runs runs

Steps, each writing RUNS/<step>:
1. tf_long: `multi30k_transformer_long`, a Transformer on the references (75 min);
2. distill-both: `distill.py` with tf_long as the teacher, references kept (6 min);
3. kd_both: `multi30k_gru_kd_both`, a 512-wide GRU on both targets (75 min);
4. kd_both_more: `multi30k_gru_kd_both_more`, its second cycle (70 min): the recurrent model;
5. distill-three: `distill.py` with tf_long and kd_both_more, references kept (11 min);
6. tf_kd3: `multi30k_transformer_kd3`, tf_long's second cycle on three targets (55 min);

then, for the two final models, beam 5 on valid at each `--alphas` length penalty, and test
once with the one valid chose. About 5 hours on 2 CPU cores: 275 minutes of training budgets
(`train.max_minutes`), 17 of distillation, then the scoring. Each experiment's YAML names its
inputs under runs/; the chain passes the paths under RUNS explicitly, so RUNS may be anywhere.

A step that finished is skipped when the chain runs again (RUNS/chain/<step>.json holds its
record), and a training step that was cut off resumes from its last checkpoint
(`train.resume=true`, the budget counting the minutes already spent). Once a step runs, every
later step runs again (a training one with `train.overwrite=true`): its inputs may have changed.
`--gru-args` and `--transformer-args` add Hydra overrides to every training run of that family
(a smaller model for a quick try; `device=cuda`). Prints one JSON object: each step's seconds,
and per final model the valid BLEU at each penalty, the choice and the test scores with their
signatures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent


def _command(name: str) -> list[str]:
    """An nmt entry point run by this interpreter (whatever venv the script runs in)."""
    return [sys.executable, "-c", f"from nmt.cli.main import main_{name}; main_{name}()"]


class Chain:
    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.records = runs / "chain"
        self.records.mkdir(parents=True, exist_ok=True)
        self.steps: dict[str, dict] = {}
        self.stale = False  # a step ran in this chain: every later one's inputs may have changed

    def step(self, name: str, command: list[str], training: bool = False) -> None:
        """Run `command` unless an earlier chain finished it and nothing before it ran again. A
        training step that was cut off resumes its run; one whose inputs changed starts over."""
        record = self.records / f"{name}.json"
        if record.exists() and not self.stale:
            self.steps[name] = {**json.loads(record.read_text()), "skipped": True}
            print(f"[chain] {name}: done before, skipped", file=sys.stderr, flush=True)
            return
        if training and self.stale:
            command = [*command, "train.overwrite=true"]
        elif training and (self.runs / name / "checkpoints" / "last").exists():
            # the run continues its own weights: the experiment's init_from would be refused
            command = [a for a in command if not a.startswith("train.init_from=")]
            command += ["train.resume=true", "train.init_from=null"]
        self.stale = True
        print(f"[chain] {name}: {' '.join(command[3:])}", file=sys.stderr, flush=True)
        began = time.monotonic()
        subprocess.run(command, check=True)
        done = {"seconds": round(time.monotonic() - began, 1)}
        record.write_text(json.dumps(done) + "\n")
        self.steps[name] = done

    def train(self, name: str, experiment: str, extra: list[str]) -> None:
        run = ["experiment=" + experiment, f"run_dir={self.runs / name}", *extra]
        self.step(name, [*_command("train"), *run], training=True)
        if not self.steps[name].get("skipped"):  # its best checkpoint may have changed
            for scored in (self.runs / name).glob("eval-*-alpha*"):
                shutil.rmtree(scored)

    def distill(self, name: str, teachers: list[str], alphas: list[float], data: Path) -> None:
        ckpts = [str(self.best(t)) for t in teachers]
        out = ["--data", str(data), "--out", str(self.runs / name), "--with-references"]
        alpha = ["--alpha", *map(str, alphas)]
        self.step(name, [sys.executable, str(SCRIPTS / "distill.py"), *ckpts, *out, *alpha])

    def best(self, name: str) -> Path:
        return self.runs / name / "checkpoints" / "best"

    def score(self, name: str, split: str, alpha: float) -> dict:
        """Beam 5 with the gnmt length penalty `alpha`; the record nmt-evaluate writes."""
        out = self.runs / name / f"eval-{split}-alpha{alpha}"
        scores = out / f"{split}.scores.json"
        if not scores.exists():
            args = [f"ckpt={self.best(name)}", f"split={split}", "decode=beam"]
            args += [f"decode.alpha={alpha}", f"out_dir={out}"]
            subprocess.run([*_command("evaluate"), *args], check=True, stdout=sys.stderr)
        return json.loads(scores.read_text())

    def choose_and_test(self, name: str, alphas: list[float]) -> dict:
        """The penalty with the best valid BLEU (the smallest on a tie), then test once."""
        valid = {alpha: self.score(name, "valid", alpha)["bleu"] for alpha in alphas}
        chosen = max(alphas, key=lambda a: (valid[a], -a))
        test = self.score(name, "test", chosen)
        keep = ("step", "bleu", "chrf", "ter", "report")
        return {
            "valid_bleu": {str(a): b for a, b in valid.items()},
            "alpha": chosen,
            "test": {k: test[k] for k in keep if k in test},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="Multi30k as plain text files")
    parser.add_argument("--runs", type=Path, default=Path("runs"))
    parser.add_argument("--gru-args", nargs="*", default=[], metavar="OVERRIDE")
    parser.add_argument("--transformer-args", nargs="*", default=[], metavar="OVERRIDE")
    parser.add_argument("--alphas", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0])
    args = parser.parse_args()
    data, chain = args.data.resolve(), Chain(args.runs.resolve())
    gru, tf = args.gru_args, args.transformer_args

    def init(name: str) -> str:
        return f"train.init_from={chain.best(name)}"

    chain.train("tf_long", "multi30k_transformer_long", [f"data.local_dir={data}", *tf])
    chain.distill("distill-both", ["tf_long"], [1.5], data)
    local = f"data.local_dir={chain.runs / 'distill-both'}"
    chain.train("kd_both", "multi30k_gru_kd_both", [local, *gru])
    chain.train("kd_both_more", "multi30k_gru_kd_both_more", [local, init("kd_both"), *gru])
    chain.distill("distill-three", ["tf_long", "kd_both_more"], [1.5, 3.0], data)
    local = f"data.local_dir={chain.runs / 'distill-three'}"
    chain.train("tf_kd3", "multi30k_transformer_kd3", [local, init("tf_long"), *tf])

    models = {"recurrent": "kd_both_more", "transformer": "tf_kd3"}
    result = {name: chain.choose_and_test(run, args.alphas) for name, run in models.items()}
    print(json.dumps({"runs": str(chain.runs), "steps": chain.steps, **result}))


if __name__ == "__main__":
    main()
