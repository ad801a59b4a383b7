"""fp32 against bf16 matrix products on this machine, at the shapes nmt's models multiply, as JSON.

    python scripts/bench_matmul.py --repeats 7
    python scripts/bench_matmul.py --peak --device cuda    # the peak: TFLOP/s of one big product

`--peak` times one N x N x N product (N = 8192 on a GPU, 2048 on a CPU) in fp32 and bf16 on the
device and reports the TFLOP/s it reached (2 N³ per product): the measured peak that
`scripts/bench_gpu.py` divides model FLOPs by for its MFU column. On a GPU fp32 products use
TF32 when `torch.backends.cuda.matmul.allow_tf32` is on (nmt leaves PyTorch's default: off).

Whether `train.precision=bf16` or `decode.precision=bf16` pays on a CPU depends on the CPU: with
bf16 dot-product instructions (AVX512-BF16, AMX) oneDNN runs bf16 products faster than fp32;
without them it converts. This times one product per shape in both dtypes (the median of
--repeats timings of 10 products each, after a warm-up) and prints the ratio. Run nothing else
meanwhile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from nmt.device import describe

# (rows, inner, columns): what the recurrent and Transformer models multiply at batches of 2,048
# target tokens (training) and 320 rows (a beam of 5 over 64 sentences)
SHAPES = {
    "output layer, training batch": (2048, 256, 3853),
    "output layer, beam step": (320, 256, 3853),
    "GRU gates of one step, training batch": (64, 512, 768),
    "Transformer feed-forward, training batch": (2048, 256, 1024),
}


def median_ms(a: torch.Tensor, b: torch.Tensor, repeats: int) -> float:
    sync = torch.cuda.synchronize if a.is_cuda else (lambda: None)
    for _ in range(3):
        a @ b
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        sync()
        times.append((time.perf_counter() - start) / 10)
    return statistics.median(times) * 1e3


def peak(device: torch.device, size: int, repeats: int) -> dict:
    """TFLOP/s of one size³ product in fp32 and bf16 on `device`."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device)
    b = torch.randn(size, size, generator=generator).to(device)
    flops = 2 * size**3
    tflops = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        ms = median_ms(a.to(dtype), b.to(dtype), repeats)
        tflops[name] = round(flops / (ms / 1e3) / 1e12, 3)
    return {"benchmark": "matmul_peak", "size": size, "peak_tflops": tflops, **describe(device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--peak", action="store_true", help="one big product: the peak TFLOP/s")
    parser.add_argument("--device", default="cpu", help="with --peak: cpu, cuda or cuda:N")
    parser.add_argument("--size", type=int, help="with --peak: N (default 8192 GPU, 2048 CPU)")
    args = parser.parse_args()
    if args.peak:
        device = torch.device(args.device)
        size = args.size or (8192 if device.type == "cuda" else 2048)
        print(json.dumps(peak(device, size, args.repeats), indent=2))
        return
    generator = torch.Generator().manual_seed(0)
    results = []
    for name, (m, k, n) in SHAPES.items():
        a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
        fp32 = median_ms(a, b, args.repeats)
        bf16 = median_ms(a.bfloat16(), b.bfloat16(), args.repeats)
        results.append(
            {
                "product": name,
                "shape": [m, k, n],
                "fp32_ms": round(fp32, 3),
                "bf16_ms": round(bf16, 3),
                "speedup": round(fp32 / bf16, 2),
            }
        )
    report = {
        "benchmark": "matmul_precision",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the ATen kernels' ISA
        "results": results,
        **describe(torch.device("cpu")),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
