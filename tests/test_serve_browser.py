"""The nmt-serve page in headless Chromium: type German, get English, read the attention map.

Runs `nmt-serve port=0` as a subprocess on the session's tiny checkpoint and drives the page with
Playwright under the page's own Content-Security-Policy. Skipped when Playwright or Debian's
chromium is missing (`make test-browser` installs chromium). The screenshot goes to the test's
tmp dir; to redraw docs/serve.png from the demo model:

    NMT_SERVE_CKPT=runs/demo/checkpoints/best NMT_SERVE_SCREENSHOT=docs/serve.png \\
        pytest tests/test_serve_browser.py -m browser
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_serve import tiny_checkpoint

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SENTENCE = "Ich sehe einundzwanzig rote Äpfel."

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="playwright is not installed (pip install -e '.[browser]')",
    ),
    pytest.mark.skipif(
        not Path(CHROMIUM).is_file(), reason=f"no {CHROMIUM} (apt-get install chromium)"
    ),
]


def start_server(ckpt: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """nmt-serve on a free port; returns the process and the URL it printed."""
    command = [sys.executable, "-c", "from nmt.cli.main import main_serve; main_serve()"]
    args = [f"ckpt={ckpt}", "port=0", "device=cpu", "decode.n_best=3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as err:
        server = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=err, text=True, env=env
        )
    ready, _, _ = select.select([server.stdout], [], [], 60)
    line = server.stdout.readline() if ready else ""
    found = re.search(r"http://\S+/", line)
    if not found:
        server.kill()
        server.wait()
        pytest.fail(f"nmt-serve printed no URL: {line!r}\n{log.read_text()}")
    return server, found.group(0)


def api(url: str, body: dict) -> dict:
    request = urllib.request.Request(url + "translate", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)["translations"][0]


@pytest.fixture
def server_url(tmp_path_factory, demo_dir, tmp_path):
    given = os.environ.get("NMT_SERVE_CKPT")
    ckpt = Path(given) if given else tiny_checkpoint(tmp_path_factory, demo_dir)
    server, url = start_server(ckpt, tmp_path / "server.log")
    try:
        yield url
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_type_german_read_english_and_its_attention(server_url, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    began = time.monotonic()
    want = api(server_url, {"text": SENTENCE, "attention": True})  # the page's default settings
    src = want["attention"]["src_pieces"]
    hyps = want["attention"]["hypotheses"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 860})
            errors = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(server_url)
            expect(page.locator("#model")).to_contain_text("de → en")
            page.locator("#source").press_sequentially(SENTENCE, delay=15)  # as a person types
            expect(page.locator("#target")).to_have_text(want["text"], timeout=20_000)

            # the map: rows = target pieces, columns = source pieces, labelled
            rows = page.locator("#heatmap tbody tr")
            expect(rows).to_have_count(len(hyps[0]["tgt_pieces"]))
            assert page.locator("#heatmap thead th").all_text_contents() == src
            assert page.locator("#heatmap tbody th").all_text_contents() == hyps[0]["tgt_pieces"]
            assert rows.nth(0).locator("td").count() == len(src)

            # hovering a cell names both pieces and the weight (the top layer, heads averaged)
            t, s = 1, 2
            rows.nth(t).locator("td").nth(s).hover()
            status = page.locator("#status").text_content()
            tgt_piece = hyps[0]["tgt_pieces"][t]
            assert f"target “{tgt_piece}” ← source “{src[s]}”: " in status
            layer = hyps[0]["weights"][-1]
            weight = sum(head[t][s] for head in layer) / len(layer)
            assert float(status.rsplit(": ", 1)[1]) == pytest.approx(weight, abs=1.1e-3)

            # keyboard: the arrow keys move the focused cell and the status line follows
            tgt = hyps[0]["tgt_pieces"]
            page.locator("#heatmap td[tabindex='0']").focus()  # the first cell, until one moves
            expect(page.locator("#status")).to_contain_text(
                f"target “{tgt[0]}” ← source “{src[0]}”"
            )
            page.keyboard.press("ArrowRight")
            page.keyboard.press("ArrowDown")
            expect(page.locator("#status")).to_contain_text(
                f"target “{tgt[1]}” ← source “{src[1]}”"
            )
            assert page.evaluate("document.activeElement.dataset.row") == "1"

            # the n-best list: ↓ shows the second hypothesis's attention
            items = page.locator("#nbest li")
            expect(items).to_have_count(len(hyps))
            if len(hyps) > 1:
                page.locator("#nbest").focus()
                page.keyboard.press("ArrowDown")
                expect(items.nth(1)).to_have_attribute("aria-selected", "true")
                expect(rows).to_have_count(len(hyps[1]["tgt_pieces"]))
                page.keyboard.press("ArrowUp")
            # for the screenshot: hover the strongest cell of the fourth row
            t = min(3, len(tgt) - 1)
            row = [sum(head[t][j] for head in layer) for j in range(len(src))]
            rows.nth(t).locator("td").nth(row.index(max(row))).hover()

            shot = tmp_path / "serve.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("NMT_SERVE_SCREENSHOT"):
                shutil.copyfile(shot, os.environ["NMT_SERVE_SCREENSHOT"])
            assert not errors
        finally:
            browser.close()
    assert time.monotonic() - began < 30
