"""The translation benchmarks run end to end on a tiny model and print what docs/benchmarks.md
quotes: every row, BLEU beside each speed, batch-1 latency percentiles and the "headline"
object; nmt against CTranslate2 at fp32 and int8 on the same checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # rows may stream one per line first; the report is the last, indented, JSON object
    lines = done.stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


def test_bench_translate_times_each_precision_with_bleu_and_latency(train_small, demo_dir):
    ckpt = train_small("gru")
    report = run_script(
        "bench_translate.py", str(ckpt), "--src", str(demo_dir / "test.de"),
        "--ref", str(demo_dir / "test.en"), "--limit", "12", "--latency-limit", "4",
        "--repeats", "1", "--strategies", "greedy", "beam", "--batch-sizes", "1", "8",
        "--precisions", "fp32,int8",
    )  # fmt: skip
    rows = {(r["strategy"], r["batch_size"], r["precision"]): r for r in report["results"]}
    assert set(rows) == {
        (s, b, p) for s in ("greedy", "beam") for b in (1, 8) for p in ("fp32", "int8")
    }
    for (_, batch, _), row in rows.items():
        assert row["sentences"] == (4 if batch == 1 else 12)
        assert row["sentences_per_s"] > 0 and 0 <= row["bleu"] <= 100
        assert row["bleu_signature"].startswith("nrefs:1")
        if batch == 1:
            latency = row["latency_ms"]
            assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"]
    headline = report["headline"]
    beam = {p: rows["beam", 8, p] for p in ("fp32", "int8")}
    assert headline["batch_size"] == 8
    assert headline["int8_speedup"] == round(beam["fp32"]["median_s"] / beam["int8"]["median_s"], 3)
    assert headline["int8_bleu_delta"] == round(beam["int8"]["bleu"] - beam["fp32"]["bleu"], 2)
    assert headline["latency_p50_ms_int8"] == rows["beam", 1, "int8"]["latency_ms"]["p50"]


def test_bench_translate_times_the_compiled_step_beside_eager(train_small, demo_dir):
    report = run_script(
        "bench_translate.py", str(train_small("transformer")), "--src", str(demo_dir / "test.de"),
        "--limit", "10", "--repeats", "1", "--strategies", "beam", "--batch-sizes", "4",
        "--compile",
    )  # fmt: skip
    eager, compiled = report["results"]
    assert (eager["variant"], compiled["variant"]) == ("fp32", "fp32-compiled")
    assert compiled["decode"].endswith(", compiled") and compiled["same_as_eager"] == "10/10"
    assert compiled["warmup_s"] > 0 and "same_as_eager" not in eager
    speedup = round(eager["median_s"] / compiled["median_s"], 3)
    assert report["headline"]["fp32-compiled_speedup"] == speedup


def test_bench_translate_refuses_an_unknown_precision(train_small, demo_dir):
    done = subprocess.run(
        [
            sys.executable, str(ROOT / "scripts" / "bench_translate.py"), str(train_small("gru")),
            "--src", str(demo_dir / "test.de"), "--precisions", "fp32,int4",
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "'int4' is not one of" in done.stderr


def test_bench_ctranslate2_pairs_nmt_and_ctranslate2_at_fp32_and_int8(train_small, demo_dir):
    pytest.importorskip("ctranslate2")
    report = run_script(
        "bench_ctranslate2.py", str(train_small("transformer")), "--data-dir", str(demo_dir),
        "--limit", "16", "--repeats", "1", "--batch-size", "8", "--threads", "1",
        "--compute-type", "int8", "--compile", "--ct2-threads", "2",
    )  # fmt: skip
    # CTranslate2 in a process of its own (its OpenMP runtime slows torch's), with its threads
    assert report["ctranslate2_process"] == "its own"
    assert report["threads"] == {"torch": 1, "ctranslate2_intra": 2}
    greedy, beam = report["results"]
    for entry in (greedy, beam):
        names = ("nmt fp32", "ctranslate2 float32", "nmt int8", "ctranslate2 int8")
        for name in (*names, "nmt fp32 compiled", "nmt int8 compiled"):
            assert entry[name]["sentences_per_s"] > 0
        # in float32 the two search the same model the same way (docs/export.md), compiled too
        assert entry["fp32_identical_lines"] == entry["fp32_compiled_identical_lines"] == "16/16"
    headline = report["headline"]
    assert headline["strategy"] == beam["strategy"] == "beam 5, length penalty none"
    assert headline["fp32_vs_ct2"] == beam["fp32_vs_ct2"] > 0
    assert headline["int8_vs_ct2"] == beam["int8_vs_ct2"] > 0
    delta = beam["nmt int8"]["bleu"] - beam["nmt fp32"]["bleu"]
    assert headline["int8_bleu_delta"] == round(delta, 2)
    assert headline["greedy"]["int8_vs_ct2"] == greedy["int8_vs_ct2"]
    assert headline["fp32_compiled_vs_ct2"] == beam["fp32_compiled_vs_ct2"] > 0
    assert headline["int8_compiled_vs_ct2"] == beam["int8_compiled_vs_ct2"] > 0
    delta = beam["nmt int8 compiled"]["bleu"] - beam["nmt fp32"]["bleu"]
    assert headline["int8_compiled_bleu_delta"] == round(delta, 2)


def test_bench_ctranslate2_times_any_checkpoint_on_given_files(train_small, demo_dir):
    """--src/--ref: no data config is read (an imported model has none to read)."""
    pytest.importorskip("ctranslate2")
    report = run_script(
        "bench_ctranslate2.py", str(train_small("transformer")), "--src",
        str(demo_dir / "test.de"), "--ref", str(demo_dir / "test.en"), "--data-dir", "/nowhere",
        "--limit", "8", "--repeats", "1", "--batch-size", "8", "--threads", "1",
    )  # fmt: skip
    greedy, beam = report["results"]
    assert beam["nmt fp32"]["sentences_per_s"] > 0 and beam["fp32_identical_lines"] == "8/8"
