"""Memory of a long-lived nmt-serve: its resident memory over 10,000 requests, as JSON.

    python scripts/bench_serve_memory.py runs/demo/checkpoints/best --src data/demo/test.de \\
        --requests 10000 --clients 8

Starts `nmt-serve port=0` on the checkpoint and sends `--requests` requests from `--clients`
concurrent clients: a mix of one and several texts, greedy and beam search with n-best lists,
with and without attention, and one bad request in ten (invalid JSON, unknown keys, a beam of 0,
an empty text: answered 4xx). The server's VmRSS is sampled every `--every` requests. Memory that
stays flat after the first thousand requests is the aim; `growth_mb` is RSS at the end minus RSS
after the first 1,000 (the warm-up: allocator pools, torch and tokenizer caches). Linux only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

import httpx
from bench_serve import Server, read_sentences

WARM_UP = 1000
BAD = [
    b'{"text": "Ich sehe',
    b'{"text": "a", "beam": 5}',
    b'{"text": "a", "decode": {"beam_size": 0}}',
    b'{"text": ""}',
    b'{"texts": ["a", 1]}',
]


def request(n: int, sentences: list[str]) -> bytes:
    """The n-th request of the mix."""
    if n % 10 == 9:
        return BAD[(n // 10) % len(BAD)]
    texts = [sentences[(n * 7 + k) % len(sentences)] for k in range(1 + n % 3)]
    body: dict = {"texts": texts} if len(texts) > 1 else {"text": texts[0]}
    if n % 4 == 0:
        body["decode"] = {"strategy": "beam", "beam_size": 5, "n_best": 3}
    else:
        body["decode"] = {"strategy": "greedy"}
    body["attention"] = n % 3 == 0
    return json.dumps(body).encode()


async def send(server: Server, sentences: list[str], args: argparse.Namespace) -> dict:
    rss = {0: server.rss_mb()}
    statuses: dict[int, int] = {}
    counter = iter(range(args.requests))
    done = 0
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:

        async def client() -> None:
            nonlocal done
            for n in counter:
                answer = await http.post("/translate", content=request(n, sentences))
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                done += 1
                if done % args.every == 0:
                    rss[done] = server.rss_mb()
                    print(json.dumps({"requests": done, "rss_mb": rss[done]}), flush=True)

        await asyncio.gather(*(client() for _ in range(args.clients)))
    rss[done] = server.rss_mb()
    return {"rss": rss, "statuses": statuses, "done": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", default="data/demo/test.de", help="one sentence per line")
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--every", type=int, default=1000, help="sample RSS every N requests")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    sentences = read_sentences(Path(args.src))
    began = time.perf_counter()
    with Server(args.ckpt, [f"device={args.device}"]) as server:
        result = asyncio.run(send(server, sentences, args))
        alive = httpx.get(server.url + "health", timeout=30).json() == {"status": "ok"}
        batching = httpx.get(server.url + "info", timeout=30).json()["batching"]
    rss = result["rss"]
    base = rss.get(WARM_UP, rss[0])
    print(
        json.dumps(
            {
                "benchmark": "serve_memory",
                "checkpoint": str(Path(args.ckpt).resolve()),
                "requests": result["done"],
                "clients": args.clients,
                "statuses": {str(k): v for k, v in sorted(result["statuses"].items())},
                "batching": batching,
                "seconds": round(time.perf_counter() - began, 1),
                "rss_mb_by_requests": rss,
                "rss_mb_after_1k": rss.get(WARM_UP),
                "rss_mb_after_all": rss[result["done"]],
                "growth_mb": round(rss[result["done"]] - base, 1),
                "healthy_after": alive,
                "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
