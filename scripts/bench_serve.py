"""Load test of nmt-serve on loopback, with and without request batching, as one JSON object.

    python scripts/bench_serve.py runs/demo/checkpoints/best --src data/demo/test.de \\
        --clients 20 --seconds 30

For each mode it starts `nmt-serve port=0` on the checkpoint (`batched`: batch_wait_ms as given,
5 ms by default; `unbatched`: batch_wait_ms=0), warms it up, then runs `--clients` clients that each
send one sentence at a time (POST /translate {"text": ...}, the next line of --src) for `--seconds`,
and reports requests/s, latency percentiles, errors and the server's resident memory (VmRSS)
before and after the load. The sentences are the non-blank lines of --src, each client starting at
a different line. The server decodes with its defaults (configs/serve.yaml: beam 5) unless
--decode greedy. The clients share the machine with the server: on a small machine they take part
of its CPU. Linux only (reads /proc/PID/status).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx

SERVE = "from nmt.cli.main import main_serve; main_serve()"


def read_sentences(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise SystemExit(f"{path} has no text")
    return lines


def rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS in /proc/PID/status (this benchmark needs Linux)")


class Server:
    """`nmt-serve ckpt=... port=0 EXTRA...` as a subprocess; stopped on leaving the `with`."""

    def __init__(self, ckpt: str, overrides: list[str]) -> None:
        args = [f"ckpt={ckpt}", "port=0", *overrides]
        self.log = open(os.devnull, "w")  # noqa: SIM115 - closed in __exit__
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVE, *args], stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        ready, _, _ = select.select([self.process.stdout], [], [], 120)
        line = self.process.stdout.readline() if ready else ""
        found = re.search(r"http://\S+/", line)
        if not found:
            self.__exit__()
            raise SystemExit(f"nmt-serve did not start ({' '.join(args)}): {line!r}")
        self.url = found.group(0)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()
        self.log.close()

    def rss_mb(self) -> float:
        return rss_mb(self.process.pid)


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def load(url: str, sentences: list[str], clients: int, seconds: float, decode: dict) -> dict:
    """`clients` concurrent clients, one request at a time each, for `seconds`."""
    latencies: list[float] = []
    errors: dict[str, int] = {}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as http:

        async def client(k: int, deadline: float) -> None:
            i = k * len(sentences) // clients
            while time.perf_counter() < deadline:
                body = {"text": sentences[i % len(sentences)], **decode}
                i += 1
                began = time.perf_counter()
                try:
                    answer = await http.post("/translate", json=body)
                    ok = answer.status_code == 200
                    kind = str(answer.status_code)
                except httpx.HTTPError as err:
                    ok, kind = False, type(err).__name__
                if ok:
                    latencies.append(time.perf_counter() - began)
                else:
                    errors[kind] = errors.get(kind, 0) + 1

        began = time.perf_counter()
        deadline = began + seconds
        await asyncio.gather(*(client(k, deadline) for k in range(clients)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "latency_ms": {
            "p50": round(1000 * percentile(latencies, 0.50), 1),
            "p90": round(1000 * percentile(latencies, 0.90), 1),
            "p99": round(1000 * percentile(latencies, 0.99), 1),
            "max": round(1000 * latencies[-1], 1) if latencies else None,
        },
    }


def run_mode(args: argparse.Namespace, sentences: list[str], wait_ms: float) -> dict:
    overrides = [f"batch_wait_ms={wait_ms}", f"device={args.device}"]
    decode = {"decode": {"strategy": "greedy"}} if args.decode == "greedy" else {}
    with Server(args.ckpt, overrides) as server:
        rss_start = server.rss_mb()
        info = httpx.get(server.url + "info", timeout=30).json()
        asyncio.run(load(server.url, sentences, min(4, args.clients), args.warmup, decode))
        rss_warm = server.rss_mb()
        before = httpx.get(server.url + "info", timeout=30).json()["batching"]
        result = asyncio.run(load(server.url, sentences, args.clients, args.seconds, decode))
        after = httpx.get(server.url + "info", timeout=30).json()["batching"]
        decodes = after["decodes"] - before["decodes"]
        result["decodes"] = decodes
        result["sentences_per_decode"] = round((after["items"] - before["items"]) / decodes, 2)
        used = info["decode"] if not decode else {**info["decode"], **decode["decode"]}
        return {
            "batch_wait_ms": wait_ms,
            "decode": {k: used[k] for k in ("strategy", "beam_size", "length_penalty", "alpha")},
            **result,
            "server_rss_mb": {
                "started": rss_start,
                "after_warmup": rss_warm,
                "after_load": server.rss_mb(),
            },
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", default="data/demo/test.de", help="one sentence per line")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0, help="load per mode")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up per mode")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="the batched mode's")
    parser.add_argument("--modes", default="batched,unbatched")
    parser.add_argument("--decode", choices=["server", "greedy"], default="server")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    sentences = read_sentences(Path(args.src))
    waits = {"batched": args.batch_wait_ms, "unbatched": 0.0}
    modes = {}
    for mode in args.modes.split(","):
        modes[mode] = run_mode(args, sentences, waits[mode])
    report = {
        "benchmark": "serve",
        "checkpoint": str(Path(args.ckpt).resolve()),
        "source": args.src,
        "sentences": len(sentences),
        "clients": args.clients,
        "device": args.device,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(),
        "modes": modes,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
