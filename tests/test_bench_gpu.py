"""scripts/bench_gpu.py's arithmetic and row plan, without running a benchmark: the FLOPs a row
counts per target token agree with torch's own count of a real training batch; the MFU of a row is
those FLOPs x tokens/s over the measured peak of its precision; every batch size, model and
precision gets a row, in the order that spends a short budget on the cheapest rows first."""

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SMALL, SMALL_MODELS
from torch.utils.flop_counter import FlopCounterMode

from nmt.cli import main as cli
from nmt.training.loss import batch_loss
from nmt.training.setup import prepare_run

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = module
    spec.loader.exec_module(module)
    return module


class FakeBudget:
    """Answers each bench_train.py run with a known speed; the 32k bf16 row does not fit."""

    def __init__(self):
        self.runs, self.limits = [], []

    def run_json(self, argv, limit=None):
        self.runs.append(argv)
        self.limits.append(limit)
        if "train.batch_tokens=32768" in argv and "train.precision=bf16" in argv:
            return None, "timed out after 150 s"
        speed = 100_000.0 if "train.precision=bf16" in argv else 50_000.0
        return {
            "median_tgt_tokens_per_s": speed,
            "windows_tgt_tokens_per_s": [speed],
            "parameters": 10_000_000,
            "steps_per_window": 20,
            "peak_memory_mib": 1000.0,
        }, None


def train_args(bench) -> SimpleNamespace:
    """The parsed options `train_rows` reads: every model and precision, in the default order."""
    return SimpleNamespace(
        quick=False, device="cuda", windows=3, steps=20, row_timeout_s=150.0,
        models=list(bench.MODELS), precisions=list(bench.PRECISIONS),
    )  # fmt: skip


def fake_count(overrides):
    """30 MFLOP per target token for every model (the counting is tested below): not 6 x the
    10M parameters of FakeBudget's rows, the count this script used before."""
    assert "data=demo" in overrides and any(o.startswith("model=") for o in overrides)
    return 30e6


def test_mfu_is_the_counted_flops_per_token_times_tokens_over_the_peak(bench):
    assert bench.model_flops(60e6, 100_000.0, 60.0) == {"model_tflops": 6.0, "mfu": 0.1}
    assert bench.model_flops(60e6, 100_000.0, None)["mfu"] is None  # no peak measured


def test_every_size_model_and_precision_gets_a_row_with_its_mfu(bench):
    args = train_args(bench)
    budget = FakeBudget()
    peak = {"size": 8192, "peak_tflops": {"fp32": 50.0, "bf16": 400.0}}
    rows = bench.train_rows(
        args, budget, ["data=demo"], "eager", {"eager"}, peak, [4096, 32768], count=fake_count
    )
    assert len(rows) == len(budget.runs) == 2 * len(bench.MODELS) * 2
    assert [r["batch_tokens"] for r in rows] == [4096] * 6 + [32768] * 6  # smaller first
    fp32 = rows[0]
    assert (fp32["model"], fp32["precision"], fp32["mfu"]) == ("gru_bahdanau", "fp32", 0.03)
    assert fp32["train_flops_per_tgt_token"] == 30_000_000
    assert rows[1]["model_tflops"] == 3.0 and rows[1]["mfu"] == 0.0075  # bf16 peak is 8x
    skipped = [r for r in rows if "skipped" in r]
    assert len(skipped) == 3 and all(r["precision"] == "bf16" for r in skipped)
    assert not any("train.compile=true" in run for run in budget.runs)


def test_a_row_whose_flops_cannot_be_counted_keeps_its_speed_and_says_why(bench):
    def failing(overrides):
        raise KeyError("model.arch")

    args = train_args(bench)
    peak = {"peak_tflops": {"fp32": 50.0, "bf16": 400.0}}
    rows = bench.train_rows(
        args, FakeBudget(), ["data=demo"], "eager", {"eager"}, peak, [4096], count=failing
    )
    assert len(rows) == 6
    assert rows[0]["tgt_tokens_per_s"] == 50_000.0 and rows[0]["mfu"] is None
    assert rows[0]["flops_skipped"] == "KeyError: 'model.arch'"


def test_graph_rows_compile_capture_and_fix_the_shapes_or_say_why_not(bench):
    args = train_args(bench)
    budget = FakeBudget()
    rows = bench.train_rows(
        args, budget, ["data=demo"], "graphs", {"graphs"}, {}, [4096], count=fake_count
    )
    assert all(r["mode"] == "graphs" and r["compile"] for r in rows)
    for run in budget.runs:
        assert {"train.compile=true", "train.cuda_graphs=true", "train.length_step=8"} <= set(run)
    # compiling takes minutes: a compiled row gets three times an eager row's time limit
    assert budget.limits == [450.0] * 6
    # a checkout without the keys (an older commit measured for comparison) says so per row
    rows = bench.train_rows(args, FakeBudget(), ["data=demo"], "graphs", {"eager"}, {}, [4096])
    assert len(rows) == 6 and all("not available" in r["skipped"] for r in rows)


def test_models_and_precisions_choose_the_rows_and_their_order(bench):
    args = train_args(bench)
    args.models, args.precisions = ["transformer_base", "gru_bahdanau"], ["bf16"]
    budget = FakeBudget()
    rows = bench.train_rows(
        args, budget, ["data=demo"], "eager", {"eager"}, {}, [4096, 16384], count=fake_count
    )
    assert [(r["batch_tokens"], r["model"], r["precision"]) for r in rows] == [
        (4096, "transformer_base", "bf16"), (4096, "gru_bahdanau", "bf16"),
        (16384, "transformer_base", "bf16"), (16384, "gru_bahdanau", "bf16"),
    ]  # fmt: skip
    assert budget.limits == [150.0] * 4


def test_every_mode_composes_on_this_checkout(bench):
    assert bench.modes_available(["data=demo"]) == set(bench.MODES)


def test_torchrun_rows_need_two_gpus_and_say_so(bench, tmp_path):
    args = SimpleNamespace(quick=False, device="cuda", ddp_steps=120, batch_tokens=[4096])
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs to run the rows")
    rows = bench.ddp_rows(args, FakeBudget(), ["data=demo"], tmp_path)
    assert len(rows) == 1 and "need 2 or more" in rows[0]["skipped"]


@pytest.fixture(scope="module", params=sorted(SMALL_MODELS))
def prepared(request, demo_dir, tmp_path_factory):
    """(the nmt-train overrides, the run's data, its model) of a small GRU + Bahdanau or
    Transformer on the demo corpus, prepared as nmt-train prepares a run."""
    overrides = ("data=demo", f"data.local_dir={demo_dir}", *SMALL, *SMALL_MODELS[request.param])
    run_dir = tmp_path_factory.mktemp(f"flops-{request.param}")
    data, model, _ = prepare_run(cli.compose_config("train", [*overrides, f"run_dir={run_dir}"]))
    with data.train:
        yield overrides, data, model


def test_counted_flops_agree_with_torchs_count_of_a_real_batch(bench, prepared):
    """torch.utils.flop_counter counts the matrix products torch runs, forward and backward (for
    a GRU on the CPU too: its cell decomposes into matrix products), independently of
    `train_flops`'s formula. The batch: the training pairs of the most common (source, target)
    length, so no position is padding and both counts see the same positions. Tolerance 1%:
    elementwise work is counted by neither; torch skips the gradient of a product's constant
    input, where `train_flops` counts it: each recurrent layer's first step from its zero state
    (2 x its hidden-to-hidden multiply-adds per sentence and direction: 0.08% here for the
    GRU; the Transformer's counts are equal)."""
    _, data, model = prepared
    lengths = list(zip(data.train.src_lens.tolist(), data.train.tgt_lens.tolist(), strict=True))
    (src_len, tgt_len), _ = Counter(lengths).most_common(1)[0]
    index = [i for i, pair in enumerate(lengths) if pair == (src_len, tgt_len)][:32]
    assert len(index) >= 8
    batch = data.train.batch(index)
    assert batch.src.shape == (len(index), src_len)  # no padding
    assert batch.tgt_in.shape == (len(index), tgt_len + 1)  # BOS + target
    model.train()
    with FlopCounterMode(display=False) as counter:
        loss, _ = batch_loss(model, batch, smoothing=0.1)
        loss.backward()
    measured = counter.get_total_flops()
    counted = len(index) * bench.train_flops(model, src_len, tgt_len + 1)
    assert counted == pytest.approx(measured, rel=0.01)
    # the old count, 6 x every parameter per target token, is off: 1.34x (GRU), 0.81x here
    old = 6 * sum(p.numel() for p in model.parameters()) * batch.n_tgt_tokens
    assert abs(old / measured - 1) > 0.15


def test_a_rows_flops_per_token_are_its_models_over_the_training_split(bench, prepared):
    """`corpus_flops` (what a row's MFU uses) builds the row's model with the run's vocabulary
    and weighs every training pair: the sum of the pairs' FLOPs over their target tokens (EOS
    included, as tokens/s counts them)."""
    overrides, data, model = prepared
    src, tgt = data.train.src_lens[:200], data.train.tgt_lens[:200]
    per_pair = [bench.train_flops(model, s, t + 1) for s, t in zip(src.tolist(), tgt.tolist())]
    assert bench.train_flops_per_token(model, src, tgt) == pytest.approx(
        sum(per_pair) / (int(tgt.sum()) + len(tgt))
    )
    counted = bench.corpus_flops(overrides)
    assert counted["parameters"] == sum(p.numel() for p in model.parameters())
    assert counted["train_pairs"] == len(data.train)
    every_pair = bench.train_flops_per_token(model, data.train.src_lens, data.train.tgt_lens)
    assert counted["train_flops_per_tgt_token"] == round(every_pair)
