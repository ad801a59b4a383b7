"""scripts/bench_gpu.py's arithmetic and row plan, without running a benchmark: the MFU of a row
is 6 x parameters x tokens/s over the measured peak of its precision; every batch size, model and
precision gets a row, in the order that spends a short budget on the cheapest rows first."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

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
        self.runs = []

    def run_json(self, argv):
        self.runs.append(argv)
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


def test_mfu_is_six_flops_per_parameter_and_token_over_the_peak(bench):
    assert bench.model_flops(10_000_000, 100_000.0, 60.0) == {"model_tflops": 6.0, "mfu": 0.1}
    assert bench.model_flops(10_000_000, 100_000.0, None)["mfu"] is None  # no peak measured


def test_every_size_model_and_precision_gets_a_row_with_its_mfu(bench):
    args = SimpleNamespace(quick=False, device="cuda", windows=3, steps=20)
    budget = FakeBudget()
    peak = {"size": 8192, "peak_tflops": {"fp32": 50.0, "bf16": 400.0}}
    rows = bench.train_rows(args, budget, ["data=demo"], "eager", {"eager"}, peak, [4096, 32768])
    assert len(rows) == len(budget.runs) == 2 * len(bench.MODELS) * 2
    assert [r["batch_tokens"] for r in rows] == [4096] * 6 + [32768] * 6  # smaller first
    fp32 = rows[0]
    assert (fp32["model"], fp32["precision"], fp32["mfu"]) == ("gru_bahdanau", "fp32", 0.06)
    assert rows[1]["model_tflops"] == 6.0 and rows[1]["mfu"] == 0.015  # bf16 peak is 8x
    skipped = [r for r in rows if "skipped" in r]
    assert len(skipped) == 3 and all(r["precision"] == "bf16" for r in skipped)
    assert not any("train.compile=true" in run for run in budget.runs)


def test_graph_rows_compile_capture_and_fix_the_shapes_or_say_why_not(bench):
    args = SimpleNamespace(quick=False, device="cuda", windows=3, steps=20)
    budget = FakeBudget()
    rows = bench.train_rows(args, budget, ["data=demo"], "graphs", {"graphs"}, {}, [4096])
    assert all(r["mode"] == "graphs" and r["compile"] for r in rows)
    for run in budget.runs:
        assert {"train.compile=true", "train.cuda_graphs=true", "train.length_step=8"} <= set(run)
    # a checkout without the keys (an older commit measured for comparison) says so per row
    rows = bench.train_rows(args, FakeBudget(), ["data=demo"], "graphs", {"eager"}, {}, [4096])
    assert len(rows) == 6 and all("not available" in r["skipped"] for r in rows)


def test_every_mode_composes_on_this_checkout(bench):
    assert bench.modes_available(["data=demo"]) == set(bench.MODES)


def test_torchrun_rows_need_two_gpus_and_say_so(bench, tmp_path):
    args = SimpleNamespace(quick=False, device="cuda", ddp_steps=120, batch_tokens=[4096])
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs to run the rows")
    rows = bench.ddp_rows(args, FakeBudget(), ["data=demo"], tmp_path)
    assert len(rows) == 1 and "need 2 or more" in rows[0]["skipped"]
