"""Load test of nmt-serve on loopback, with and without request batching, as one JSON object.

    python scripts/bench_serve.py runs/demo/checkpoints/best --src data/demo/test.de \\
        --clients 20 --seconds 30
    python scripts/bench_serve.py runs/demo/checkpoints/best --modes heavy
    python scripts/bench_serve.py runs/demo/checkpoints/best --modes batched --rounds 3 \\
        --shapes native,libretranslate,deepl       # the same load in each API shape

For each mode it starts `nmt-serve port=0` on the checkpoint (`batched`: batch_wait_ms as given,
5 ms by default; `unbatched`: batch_wait_ms=0), warms it up, then runs `--clients` clients that each
send one request at a time (POST /translate {"texts": [...]}: the next `--texts` lines of --src, 1
by default) for `--seconds`, and reports requests and sentences per second, latency percentiles,
errors, the sentences per decode (the server's /info counts), the CPU seconds the clients
themselves used, and the server's resident memory (VmRSS) before and after the load. The
sentences are the non-blank lines of --src, each client starting at a different line. The server
decodes with its defaults (configs/serve.yaml: beam 5) unless --decode greedy.

`heavy` measures fairness: the latency of a one-sentence request alone, then while the heaviest
request the server allows is decoded: `max_texts` texts of --src, beam and n-best `max_beam`, the
search tree, `min_len_b` 1,000,000 (every hypothesis runs to the length limit) and the largest
`max_len_b` that keeps the request within `max_request_cost` (computed with the checkpoint's
tokenizer; a server without that limit gets the default max_len_b). Once the heavy request's
first decode has started, one client sends the light request again and again until the heavy
one is answered.

`phrases` measures what a request's phrases cost the server and whether they hold its event
loop: the largest banned list the limits allow (64 phrases of running text filling `max_chars`
beside a text of about 1,500 characters), 64 one-word phrases, the largest constraint lists (16
phrases filling `max_chars`; 16 words), and odd phrases (marks and whitespace inside, a run of
one letter, characters the vocabulary lacks, a phrase too long for any translation), each sent
alone while /health is polled every 10 ms: each request's status, error and time, and /health's
median and longest answer meanwhile. The phrases are words of `--phrases` (target-language
lines; default: --src).

The clients share the machine with the server: on a small machine they take part of its CPU.
Linux only (reads /proc/PID/status).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import select
import statistics
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import httpx

from nmt.checkpoint import load_checkpoint
from nmt.config import DecodeConfig, Strategy
from nmt.metrics import percentiles
from nmt.serving.admission import text_cost
from nmt.translation.inputs import read_sources

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


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON: a few lines over asyncio streams.
    The load's clients use it rather than httpx, which spends several milliseconds of CPU per
    request: on a 2-core machine 64 httpx clients took most of a core, and the server, sent
    fewer requests than it could take, decoded small batches (docs/serve.md)."""

    def __init__(self, url: str) -> None:
        where = urllib.parse.urlsplit(url)
        self.host, self.port = where.hostname, where.port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """The status and body of the answer; an OSError or IncompleteReadError if the
        connection fails (the next post opens a new one)."""
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        try:
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json"
                f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            fields = dict(line.lower().split(":", 1) for line in head[1:] if ":" in line)
            answer = await reader.readexactly(int(fields.get("content-length", "0")))
            return int(head[0].split()[1]), answer
        except (OSError, asyncio.IncompleteReadError):
            self.close()
            raise

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


def shape_request(shape: str, chosen: list[str], decode: dict, pair: tuple[str, str]):
    """(path, body) of one request of `chosen` texts in an API shape: nmt's own, LibreTranslate's
    or DeepL's (which take the server's decode settings: `decode` is for nmt's own alone)."""
    if shape == "native":
        return "/translate", {"texts": chosen, **decode}
    if shape == "libretranslate":
        return "/libretranslate/translate", {"q": chosen, "source": pair[0], "target": pair[1]}
    return "/v2/translate", {"text": chosen, "source_lang": pair[0].upper(),
                             "target_lang": pair[1].upper()}  # fmt: skip


async def load(
    url: str, sentences: list[str], clients: int, seconds: float, decode: dict, texts: int = 1,
    shape: str = "native", pair: tuple[str, str] = ("de", "en"),
) -> dict:  # fmt: skip
    """`clients` concurrent clients, one request at a time each (of `texts` sentences, in the
    API `shape`), for `seconds`."""
    latencies: list[float] = []
    errors: dict[str, int] = {}

    async def client(k: int, deadline: float) -> None:
        connection = Connection(url)
        i = k * len(sentences) // clients
        while time.perf_counter() < deadline:
            chosen = [sentences[(i + j) % len(sentences)] for j in range(texts)]
            path, body = shape_request(shape, chosen, decode, pair)
            body = json.dumps(body).encode()
            i += texts
            began = time.perf_counter()
            try:
                status, _ = await asyncio.wait_for(connection.post(path, body), 60)
                ok, kind = status == 200, str(status)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as err:
                connection.close()
                ok, kind = False, type(err).__name__
            if ok:
                latencies.append(time.perf_counter() - began)
            else:
                errors[kind] = errors.get(kind, 0) + 1
        connection.close()

    began = time.perf_counter()
    cpu = _cpu_s()
    deadline = began + seconds
    await asyncio.gather(*(client(k, deadline) for k in range(clients)))
    elapsed = time.perf_counter() - began
    cpu = _cpu_s() - cpu
    latencies.sort()
    return {
        "requests": len(latencies),
        "client_cpu_s": round(cpu, 1),
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "latency_ms": {
            **percentiles(latencies, scale=1000),
            "max": round(1000 * latencies[-1], 1) if latencies else None,
        },
    }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_mode(args: argparse.Namespace, sentences: list[str], wait_ms: float) -> dict:
    overrides = [f"batch_wait_ms={wait_ms}", f"device={args.device}"]
    decode = {"decode": {"strategy": "greedy"}} if args.decode == "greedy" else {}
    with Server(args.ckpt, overrides) as server:
        rss_start = server.rss_mb()
        info = httpx.get(server.url + "info", timeout=30).json()
        asyncio.run(load(server.url, sentences, min(4, args.clients), args.warmup, decode))
        rss_warm = server.rss_mb()
        pair = (info["languages"]["source"], info["languages"]["target"])
        shapes = args.shapes.split(",")
        rounds: dict[str, list[dict]] = {shape: [] for shape in shapes}
        for _ in range(args.rounds):  # the shapes alternate, round after round
            for shape in shapes:
                rounds[shape].append(measure(server, args, sentences, decode, shape, pair))
        if len(shapes) == 1 and args.rounds == 1:
            result = rounds[shapes[0]][0]
        else:
            result = {
                shape: {
                    "requests_per_s": [r["requests_per_s"] for r in runs],
                    "median_requests_per_s": statistics.median(r["requests_per_s"] for r in runs),
                    "median_latency_ms_p50": statistics.median(
                        r["latency_ms"]["p50"] for r in runs
                    ),
                    "errors": [r["errors"] for r in runs],
                }
                for shape, runs in rounds.items()
            }
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


def measure(
    server: Server, args: argparse.Namespace, sentences: list[str], decode: dict, shape: str,
    pair: tuple[str, str],
) -> dict:  # fmt: skip
    """One load of `args.seconds` in one API shape, with the decodes the server counted."""
    before = httpx.get(server.url + "info", timeout=30).json()["batching"]
    result = asyncio.run(load(server.url, sentences, args.clients, args.seconds, decode,
                              args.texts, shape, pair))  # fmt: skip
    after = httpx.get(server.url + "info", timeout=30).json()["batching"]
    decodes = after["decodes"] - before["decodes"]
    result["decodes"] = decodes
    result["sentences_per_decode"] = round((after["items"] - before["items"]) / max(decodes, 1), 2)
    result["sentences_per_s"] = round((after["items"] - before["items"]) / result["seconds"], 1)
    return result


def heavy_request(ckpt: str, info: dict, sentences: list[str]) -> tuple[dict, int]:
    """The heaviest request the server allows (see the module's notes) and its cost."""
    limits = info["limits"]
    beam = limits["max_beam"]
    texts = [sentences[i % len(sentences)] for i in range(limits["max_texts"])]
    changes = {"strategy": "beam", "beam_size": beam, "n_best": beam, "min_len_b": 1_000_000}
    defaults = DecodeConfig(**{k: info["decode"][k] for k in ("max_len_a", "max_len_b")})
    cap = info["decode"]["max_len_cap"]
    vocabs = load_checkpoint(ckpt).vocabs
    pieces = read_sources(vocabs.src, texts, info["decode"]["max_src_pieces"], warn=False)
    lengths = [len(ids) for ids in pieces.ids]

    def cost(max_len_b: int) -> int:
        decode = DecodeConfig(
            strategy=Strategy.beam,
            beam_size=beam,
            max_len_a=defaults.max_len_a,
            max_len_b=max_len_b,
            max_len_cap=cap,
        )
        return sum(text_cost(decode, n, True) for n in lengths)

    bound = limits.get("max_request_cost")
    max_len_b = defaults.max_len_b
    if bound is not None:  # the largest max_len_b within the bound (cost grows with it)
        low, high = -1_000_000, 1_000_000
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if cost(middle) <= bound else (low, middle - 1)
        max_len_b = low
        changes["max_len_b"] = max_len_b
    body = {"texts": texts, "decode": changes, "beam_tree": True}
    return body, cost(max_len_b)


async def heavy_and_light(url: str, heavy: dict, light: dict, alone: int) -> dict:
    """Light requests one after another, alone, then from the moment the heavy request's first
    decode starts until its answer is in (every light request sent meanwhile counts, also one
    answered after the heavy request)."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:

        async def timed(body: dict) -> tuple[float, int]:
            began = time.perf_counter()
            answer = await http.post("/translate", json=body)
            if answer.status_code != 200:
                raise SystemExit(f"{answer.status_code}: {answer.text[:300]}")
            return time.perf_counter() - began, len(answer.content)

        async def decodes() -> int:
            return (await http.get("/info")).json()["batching"]["decodes"]

        solo = [(await timed(light))[0] for _ in range(alone)]
        before = await decodes()
        began = time.perf_counter()
        heavy_task = asyncio.ensure_future(timed(heavy))
        while await decodes() == before and not heavy_task.done():
            await asyncio.sleep(0.005)  # the heavy request is read and checked, not decoded yet
        during = []
        while not heavy_task.done():
            during.append((await timed(light))[0])
            await asyncio.sleep(0.05)
        heavy_s, heavy_bytes = await heavy_task
        ended = time.perf_counter() - began
    ms = [round(1000 * s, 1) for s in sorted(during)]
    return {
        "light_alone_ms_median": round(1000 * statistics.median(solo), 1),
        "heavy_s": round(heavy_s, 2),
        "heavy_response_mb": round(heavy_bytes / 2**20, 1),
        "light_during_heavy": len(ms),
        "light_during_heavy_ms_median": statistics.median(ms) if ms else None,
        "light_during_heavy_ms_max": ms[-1] if ms else None,
        "heavy_wall_s": round(ended, 2),
    }


def run_heavy(args: argparse.Namespace, sentences: list[str]) -> dict:
    overrides = [f"batch_wait_ms={args.batch_wait_ms}", f"device={args.device}"]
    with Server(args.ckpt, overrides) as server:
        info = httpx.get(server.url + "info", timeout=30).json()
        heavy, cost = heavy_request(args.ckpt, info, sentences)
        light = {"text": sentences[0]}
        result = asyncio.run(heavy_and_light(server.url, heavy, light, 5))
        batching = httpx.get(server.url + "info", timeout=30).json()["batching"]
        return {
            "heavy": {"texts": len(heavy["texts"]), "decode": heavy["decode"], "beam_tree": True},
            "heavy_cost": cost,
            "limits": info["limits"],
            **result,
            "batching": batching,
        }


def phrase_requests(info: dict, sentences: list[str], phrases: list[str]) -> dict[str, dict]:
    """The largest banned and constraint lists the server's limits allow, and odd phrases (see
    the module's notes), each with the longest text that leaves the phrases room; the phrases
    are drawn from `phrases` (target-language lines)."""
    limits = info["limits"]
    text = ""
    for sentence in sentences:  # about 1,500 characters: a length limit near max_len_cap
        if len(text) + len(sentence) > min(1500, limits["max_chars"] // 10):
            break
        text = f"{text} {sentence}".strip()
    words = " ".join(phrases).split()
    room = limits["max_chars"] - len(text)

    def filled(count: int) -> list[str]:
        """`count` phrases of running text, their characters together filling the room."""
        each = room // count
        stream = " ".join(words[i % len(words)] for i in range(each * count // 3 + count))
        return [stream[k * each : (k + 1) * each].strip() or "x" for k in range(count)]

    return {
        "banned 64 filling max_chars": {"text": text, "banned": filled(64)},
        "banned 64 words": {"text": text, "banned": words[:64]},
        "constraints 16 filling max_chars": {
            "text": text, "constraints": filled(16),
            "decode": {"strategy": "beam", "max_len_b": 1_000_000},
        },
        "constraints 16 at the length limit": {
            "text": text, "constraints": [" ".join(words[k * 6 : k * 6 + 6]) for k in range(16)],
            "decode": {"strategy": "beam", "max_len_b": 1_000_000},
        },
        "constraints 16 words": {"text": text, "constraints": words[:16]},
        "marks and spaces": {
            "text": text,
            "banned": ["-", "…", ",,,,", " \t x \u00a0 y ", "' s"],
            "constraints": ["-based", "'s", ")"],
            "decode": {"strategy": "beam", "max_len_b": 1_000_000},
        },
        "a run of one letter": {"text": text, "banned": ["a" * 500]},
        "characters the vocabulary lacks": {"text": text, "banned": ["日本語 🙂 ÿ"] * 8},
        "a run too long for any translation": {"text": text, "banned": ["a" * 20_000]},
    }  # fmt: skip


async def while_polled(url: str, requests: dict[str, dict]) -> dict:
    """Each request in turn while /health is polled every 10 ms: its status, time and error, and
    how long /health took to answer meanwhile."""
    out = {}
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        for name, body in requests.items():
            health: list[float] = []
            began = time.perf_counter()
            task = asyncio.ensure_future(http.post("/translate", json=body))
            while not task.done():
                start = time.perf_counter()
                assert (await http.get("/health")).status_code == 200
                health.append(time.perf_counter() - start)
                await asyncio.sleep(0.01)
            answer = await task
            ms = sorted(round(1000 * h, 1) for h in health)
            out[name] = {
                "status": answer.status_code,
                "error": answer.json().get("error", "")[:160] if answer.status_code != 200 else "",
                "seconds": round(time.perf_counter() - began, 2),
                "chars": sum(len(p) for k in ("banned", "constraints") for p in body.get(k, [])),
                "health_polls": len(ms),
                "health_ms_median": statistics.median(ms) if ms else None,
                "health_ms_max": ms[-1] if ms else None,
            }
            print(name, out[name], file=sys.stderr, flush=True)
    return out


def run_phrases(args: argparse.Namespace, sentences: list[str]) -> dict:
    phrases = read_sentences(Path(args.phrases)) if args.phrases else sentences
    with Server(args.ckpt, [f"device={args.device}"]) as server:
        info = httpx.get(server.url + "info", timeout=30).json()
        requests = phrase_requests(info, sentences, phrases)
        result = asyncio.run(while_polled(server.url, requests))
        return {"limits": info["limits"], "requests": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--src", default="data/demo/test.de", help="one sentence per line")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--texts", type=int, default=1, help="sentences per request")
    parser.add_argument("--seconds", type=float, default=30.0, help="load per mode")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up per mode")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="the batched mode's")
    parser.add_argument("--modes", default="batched,unbatched", help="and/or heavy, phrases")
    parser.add_argument("--decode", choices=["server", "greedy"], default="server")
    parser.add_argument("--phrases", help="phrases mode: target-language lines (default: --src)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--shapes", default="native",
        help="API shapes the load speaks, alternating: native,libretranslate,deepl",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="loads per shape (medians)")
    args = parser.parse_args()

    sentences = read_sentences(Path(args.src))
    waits = {"batched": args.batch_wait_ms, "unbatched": 0.0}
    modes = {}
    for mode in args.modes.split(","):
        if mode == "heavy":
            modes[mode] = run_heavy(args, sentences)
        elif mode == "phrases":
            modes[mode] = run_phrases(args, sentences)
        else:
            modes[mode] = run_mode(args, sentences, waits[mode])
    report = {
        "benchmark": "serve",
        "checkpoint": str(Path(args.ckpt).resolve()),
        "source": args.src,
        "sentences": len(sentences),
        "clients": args.clients,
        "texts_per_request": args.texts,
        "device": args.device,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpus": os.cpu_count(),
        "modes": modes,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
