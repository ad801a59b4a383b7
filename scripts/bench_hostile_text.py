"""What a request of hostile or long text costs nmt-serve, and the others meanwhile, as JSON.

    python scripts/bench_hostile_text.py runs/demo/checkpoints/best [--poll 0.2] [--chars 100000]

Starts `nmt-serve ckpt=CKPT port=0` (its default settings: beam 5, max_chars 100000,
max_queue 512) and, for each text below, sends it alone as one /translate request while a second
connection polls GET /health every `--poll` seconds: the request's status and seconds, and the
slowest and the median /health answer while it ran. The texts, about `--chars` characters each:
markup that never closes (`<a `, `<a href="`, `<!--`), markup that does (`<b>1</b> `: two tags
and a number, three codes, per 9 characters), and 600 short sentences (more than max_queue
alone: an idle server must take them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import threading
import time

import httpx

SERVE = "from nmt.cli.main import main_serve; main_serve()"


def texts(chars: int) -> dict[str, tuple[str, str]]:
    """name -> (text, format)."""
    return {
        "unclosed_tags": ("<a " * (chars // 3), "html"),
        "unclosed_attributes": ('<a href="' * (chars // 9), "html"),
        "unended_comments": ("<!--" * (chars // 4), "html"),
        "tags_and_numbers": ("<b>1</b> " * (chars // 9), "html"),
        "600_sentences": ("Ich sehe Äpfel. " * 600, "text"),
    }


def start(ckpt: str) -> tuple[subprocess.Popen, str]:
    args = [f"ckpt={ckpt}", "port=0"]
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    ready, _, _ = select.select([process.stdout], [], [], 300)
    line = process.stdout.readline() if ready else ""
    found = re.search(r"http://\S+/", line)
    if not found:
        process.kill()
        raise SystemExit(f"nmt-serve did not start: {line!r}")
    return process, found.group(0)


def measure(url: str, text: str, fmt: str, poll: float) -> dict:
    """One request of `text` while /health is polled from another thread."""
    waits: list[float] = []
    done = threading.Event()

    def health() -> None:
        with httpx.Client(base_url=url, timeout=600) as client:
            while not done.is_set():
                began = time.perf_counter()
                client.get("/health").raise_for_status()
                waits.append(time.perf_counter() - began)
                done.wait(poll)

    poller = threading.Thread(target=health)
    with httpx.Client(base_url=url, timeout=600) as client:
        poller.start()
        began = time.perf_counter()
        answer = client.post("/translate", json={"text": text, "format": fmt})
        took = time.perf_counter() - began
    done.set()
    poller.join()
    body = answer.json()
    return {
        "chars": len(text),
        "status": answer.status_code,
        "request_s": round(took, 3),
        "health_polls": len(waits),
        "health_max_s": round(max(waits), 4) if waits else None,
        "health_median_s": round(statistics.median(waits), 4) if waits else None,
        "error": body.get("error"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt")
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between /health calls")
    parser.add_argument("--chars", type=int, default=100_000, help="characters of each text")
    args = parser.parse_args()
    process, url = start(args.ckpt)
    try:
        report = {"ckpt": args.ckpt, "cpus": os.cpu_count(), "poll_s": args.poll}
        for name, (text, fmt) in texts(args.chars).items():
            report[name] = measure(url, text, fmt, args.poll)
    finally:
        process.kill()
        process.wait()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
