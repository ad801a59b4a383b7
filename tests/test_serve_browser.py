"""The nmt-serve page in headless Chromium: type German, get English, read the attention map.

Runs `nmt-serve port=0` as a subprocess on the session's tiny checkpoint and drives the page with
Playwright under the page's own Content-Security-Policy. Skipped when Playwright or Debian's
chromium is missing (`make test-browser` installs chromium). The screenshot goes to the test's
tmp dir; to redraw docs/serve.png from the demo model:

    NMT_SERVE_CKPT=runs/demo/checkpoints/best NMT_SERVE_SCREENSHOT=docs/serve.png \\
        pytest tests/test_serve_browser.py -m browser -k attention

and docs/serve-tree.png (a GRU) and docs/serve-model-view.png (a Transformer), with the models
and the sentence of docs/attention.md:

    NMT_SERVE_CKPT=runs/fast/checkpoints/best NMT_SERVE_SCREENSHOTS=docs NMT_SERVE_SENTENCE=... \\
        pytest tests/test_serve_browser.py -m browser -k "tree and gru"
    NMT_SERVE_CKPT=runs/tf12/checkpoints/best NMT_SERVE_SCREENSHOTS=docs NMT_SERVE_SENTENCE=... \\
        pytest tests/test_serve_browser.py -m browser -k "tree and transformer"
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import select
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
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


@contextlib.contextmanager
def serving(ckpt: Path, log: Path, *extra: str) -> Iterator[str]:
    """nmt-serve on a free port while the block runs; yields the URL it printed."""
    command = [sys.executable, "-c", "from nmt.cli.main import main_serve; main_serve()"]
    args = [f"ckpt={ckpt}", "port=0", "device=cpu", *extra, "decode.n_best=3"]
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
    try:
        yield found.group(0)
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


@contextlib.contextmanager
def browser_page(url: str, height: int) -> Iterator[tuple[object, list[str]]]:
    """A headless Chromium page at `url` (1200 px wide) and the list its script errors go to."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda err: errors.append(str(err)))
            page.goto(url)
            yield page, errors
        finally:
            browser.close()


def api(url: str, body: dict) -> dict:
    request = urllib.request.Request(url + "translate", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)["translations"][0]


@pytest.fixture
def server_url(tmp_path_factory, demo_dir, tmp_path):
    given = os.environ.get("NMT_SERVE_CKPT")
    ckpt = Path(given) if given else tiny_checkpoint(tmp_path_factory, demo_dir)
    with serving(ckpt, tmp_path / "server.log") as url:
        yield url


def test_type_german_read_english_and_its_attention(server_url, tmp_path):
    from playwright.sync_api import expect

    began = time.monotonic()
    want = api(server_url, {"text": SENTENCE, "attention": True})  # the page's default settings
    src = want["attention"]["src_pieces"]
    hyps = want["attention"]["hypotheses"]
    with browser_page(server_url, 860) as (page, errors):
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
        expect(page.locator("#status")).to_contain_text(f"target “{tgt[0]}” ← source “{src[0]}”")
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowDown")
        expect(page.locator("#status")).to_contain_text(f"target “{tgt[1]}” ← source “{src[1]}”")
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
    assert time.monotonic() - began < 30


@pytest.fixture(params=["gru", "transformer"])
def family_server(request, train_small, tmp_path):
    """nmt-serve on a small trained model of each family (or NMT_SERVE_CKPT for both)."""
    given = os.environ.get("NMT_SERVE_CKPT")
    ckpt = Path(given) if given else train_small(request.param)
    with serving(ckpt, tmp_path / "server.log", "decode=beam") as url:  # beam 5
        yield request.param, url


def info(url: str) -> dict:
    with urllib.request.urlopen(url + "info", timeout=30) as answer:
        return json.load(answer)


def test_the_tree_a_what_if_and_every_layer_and_head(family_server, tmp_path):
    """Open the search tree, click a node: the translation starts with that node's words, and
    the attention shown is the new hypothesis's; edit the translation: the model writes the rest
    of it; the model view draws one map per layer x head, and a click enlarges it."""
    from playwright.sync_api import expect

    family, url = family_server
    sentence = os.environ.get("NMT_SERVE_SENTENCE", SENTENCE)
    want = api(url, {"text": sentence, "beam_tree": True})
    nodes = want["beam_tree"]["nodes"]
    best_path = want["text"]
    # a node of the second step whose words are not how the translation starts
    other = next(
        n for n in nodes if n["step"] == 2 and not best_path.startswith(n["text"]) and n["text"]
    )
    forced = api(url, {"text": sentence, "prefix": other["text"], "attention": True})
    typed = " ".join(forced["text"].split()[:3])  # words the model can write
    maps = info(url)["attention_maps"]
    shots = os.environ.get("NMT_SERVE_SCREENSHOTS")  # a folder: docs/ redraws the docs' pictures
    with browser_page(url, 1100) as (page, errors):
        expect(page.locator("#model")).to_contain_text("de → en")
        page.locator("#source").fill(sentence)
        expect(page.locator("#target")).to_have_text(want["text"], timeout=20_000)

        # the tree: one button per node, the same as the API's
        page.locator("#tree-toggle").click()
        expect(page.locator("#tree .node")).to_have_count(len(nodes), timeout=20_000)
        finished = page.locator("#tree .node.finished .rank")
        expect(finished.first).to_be_visible()
        if shots and family == "gru":
            page.locator(".tree-panel").screenshot(path=str(Path(shots) / "serve-tree.png"))

        # keyboard: focus the node and press Enter, as a click would
        node = page.locator(f"#tree .node[data-id='{other['id']}']")
        node.focus()
        page.keyboard.press("Enter")
        expect(page.locator("#target")).to_have_text(forced["text"], timeout=20_000)
        assert forced["text"].startswith(other["text"])
        expect(page.locator("#prefix-note")).to_contain_text(f"Starts with “{other['text']}”")
        rows = page.locator("#heatmap tbody tr")
        expect(rows).to_have_count(len(forced["attention"]["hypotheses"][0]["tgt_pieces"]))
        # the tree now follows the forced start: one node a step until it ends
        expect(page.locator("#tree .node")).not_to_have_count(len(nodes))

        # "what if": edit the translation; the model keeps what is before the cursor
        edited = api(url, {"text": sentence, "prefix": typed})
        target = page.locator("#target")
        target.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(typed, delay=10)
        expect(target).to_have_text(edited["text"], timeout=20_000)
        expect(page.locator("#prefix-note")).to_contain_text(f"Starts with “{typed}”")
        page.locator("#clear-prefix").click()
        expect(target).to_have_text(want["text"], timeout=20_000)
        expect(page.locator("#prefix-note")).to_be_hidden()

        # the model view: layers x heads small maps; a click shows that one above
        cells = page.locator("#model-view .head-map")
        expect(cells).to_have_count(maps["layers"] * maps["heads"])
        last = cells.nth(maps["layers"] * maps["heads"] - 1)
        last.click()
        expect(last).to_have_attribute("aria-pressed", "true")
        layer, head = maps["layers"] - 1, maps["heads"] - 1
        assert page.locator("#layer").input_value() == str(layer)
        if maps["heads"] > 1:
            assert page.locator("#head").input_value() == str(head)
        full = api(url, {"text": sentence, "attention": True})["attention"]
        weights = full["hypotheses"][0]["weights"][layer][head]
        rows.nth(1).locator("td").nth(2).hover()
        status = page.locator("#status").text_content()
        assert float(status.rsplit(": ", 1)[1]) == pytest.approx(weights[1][2], abs=1.1e-3)
        if shots and family == "transformer":
            panel = page.locator(".model-view-panel")
            panel.screenshot(path=str(Path(shots) / "serve-model-view.png"))
        assert not errors


def score_api(url: str, body: dict) -> tuple[int, dict]:
    """POST /score: its status and JSON, an error's too."""
    request = urllib.request.Request(url + "score", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


# a chip's title: “piece”: probability P (log-probability L)
CHIP_TITLE = re.compile(r"probability ([0-9.e+-]+) \(log-probability (-?[0-9.]+)\)")
BANDS = [(0.1, "p-very-low"), (0.3, "p-low"), (0.5, "p-mid"), (0.8, "p-high")]


def test_score_a_translation_as_a_strip_of_pieces(server_url):
    """The score box starts as the page's translation; edit it, press Ctrl+Enter: the totals and
    one chip per piece, coloured by its band, as POST /score says; the model's translation comes
    back with one click; a request the server refuses shows the server's message."""
    from playwright.sync_api import expect

    want = api(server_url, {"text": SENTENCE})
    typed = "I see twenty-one red apples."
    status, scored = score_api(server_url, {"text": SENTENCE, "translation": typed})
    assert status == 200
    [scored] = scored["scores"]
    with browser_page(server_url, 1100) as (page, errors):
        expect(page.locator("#model")).to_contain_text("de → en")
        page.locator("#source").fill(SENTENCE)
        expect(page.locator("#target")).to_have_text(want["text"], timeout=20_000)
        expect(page.locator("#attention-source")).to_be_hidden()  # one model: its own maps
        box = page.locator("#score-text")
        expect(box).to_have_value(want["text"])  # prefilled: editing it is one step
        expect(page.locator("#score-reset")).to_be_disabled()

        box.fill(typed)
        box.press("Control+Enter")
        chips = page.locator("#score-strip .chip")
        expect(chips).to_have_count(len(scored["pieces"]), timeout=20_000)
        # the pieces read as the text: ▁ is the space that starts a word
        assert chips.all_text_contents() == [p.replace("▁", " ") for p in scored["pieces"]]
        for i, (piece, logprob) in enumerate(zip(scored["pieces"], scored["piece_scores"])):
            chip = chips.nth(i)
            shown_p, shown_logprob = CHIP_TITLE.search(chip.get_attribute("title")).groups()
            assert float(shown_logprob) == pytest.approx(logprob, abs=6e-4), piece
            p = math.exp(logprob)
            assert float(shown_p) == pytest.approx(p, abs=6e-4, rel=0.06), piece
            band = next((name for upper, name in BANDS if p < upper), "p-very-high")
            assert band in chip.get_attribute("class").split(), (piece, p)
        expect(page.locator("#score-total")).to_have_text(f"{scored['score']:.3f}")
        expect(page.locator("#score-normalized")).to_have_text(f"{scored['normalized']:.3f}")
        expect(page.locator("#score-legend .chip")).to_have_count(5)

        # hover a chip: the line below names it; ← → move the focus along the strip
        chips.nth(1).hover()
        expect(page.locator("#score-detail")).to_have_text(chips.nth(1).get_attribute("title"))
        chips.nth(0).focus()
        page.keyboard.press("ArrowRight")
        assert page.evaluate("document.activeElement.dataset.index") == "1"

        # an edit marks the score as out of date; one click brings the model's translation back
        box.press("End")
        box.press_sequentially("!")
        expect(page.locator("#score-stale")).to_be_visible()
        page.locator("#score-reset").click()
        expect(box).to_have_value(want["text"])
        page.locator("#score-button").click()
        status, own = score_api(server_url, {"text": SENTENCE, "translation": want["text"]})
        expect(chips).to_have_count(len(own["scores"][0]["pieces"]), timeout=20_000)
        expect(page.locator("#score-stale")).to_be_hidden()

        # a translation over the server's max_chars: its 413 message, in the box
        long = "red apples " * 10_000
        status, refused = score_api(server_url, {"text": SENTENCE, "translation": long})
        assert status == 413 and "at most" in refused["error"]
        box.fill(long)
        box.press("Control+Enter")
        expect(page.locator("#score-error")).to_have_text(refused["error"], timeout=20_000)
        expect(page.locator("#score-result")).to_be_hidden()
        assert not errors


CAPTIONS = [("1", "attention: member 2 of 2"), ("mean", "attention: mean over 2 members")]


@pytest.mark.parametrize("shown, caption", CAPTIONS)
def test_an_ensemble_says_whose_attention_the_map_shows(
    tmp_path_factory, demo_dir, tmp_path, shown, caption
):
    """nmt-serve ckpt=[a,a] ensemble_attention=...: the caption above the map names the member
    shown or the mean (a single model's page has none: the test above)."""
    from playwright.sync_api import expect

    ckpt = tiny_checkpoint(tmp_path_factory, demo_dir)
    pair = f"[{ckpt},{ckpt}]"
    with serving(pair, tmp_path / "server.log", f"ensemble_attention={shown}") as url:
        want = api(url, {"text": SENTENCE, "attention": True})
        with browser_page(url, 860) as (page, errors):
            expect(page.locator("#model")).to_contain_text("ensemble of 2")
            page.locator("#source").fill(SENTENCE)
            expect(page.locator("#target")).to_have_text(want["text"], timeout=20_000)
            expect(page.locator("#attention-source")).to_have_text(caption)
            rows = page.locator("#heatmap tbody tr")
            expect(rows).to_have_count(len(want["attention"]["hypotheses"][0]["tgt_pieces"]))
            assert not errors


def translate_api(url: str, body: dict) -> tuple[int, dict]:
    """POST /translate: its status and JSON, an error's too."""
    request = urllib.request.Request(url + "translate", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


def sends(page, action) -> dict:
    """Do `action` (on the page) and return the body of the /translate request it makes."""
    with page.expect_request(lambda r: r.url.endswith("/translate"), timeout=20_000) as request:
        action()
    return request.value.post_data_json


def test_must_include_and_must_avoid_phrases(server_url):
    """A must-include phrase the model does not write by itself and a must-avoid phrase it then
    writes: the page switches greedy to beam, and shows what POST /translate gives for the body it
    sent, the phrase in a <mark>; the tree's nodes show their progress; greedy again, or a phrase
    the model cannot write, shows the server's message; clearing the boxes frees the search."""
    from playwright.sync_api import expect

    include, avoid, bad = "birds", "sixty", "<b>birds</b>"
    greedy = api(server_url, {"text": SENTENCE, "decode": {"strategy": "greedy"}})
    free = api(server_url, {"text": SENTENCE})  # the server's beam 5
    bound = api(server_url, {"text": SENTENCE, "constraints": [include]})
    # the premises: the model does not write `include` freely, and with it writes `avoid`
    assert include not in free["text"] and include not in greedy["text"], free["text"]
    assert avoid in bound["text"], bound["text"]
    with browser_page(server_url, 1100) as (page, errors):
        sent: list[dict] = []
        page.on(
            "request",
            lambda r: sent.append(r.post_data_json) if r.url.endswith("/translate") else None,
        )
        expect(page.locator("#model")).to_contain_text("de → en")
        page.select_option("#strategy", "greedy")
        page.locator("#source").fill(SENTENCE)
        target = page.locator("#target")
        expect(target).to_have_text(greedy["text"], timeout=20_000)

        # a must-include phrase: the search becomes beam, and the page says so
        body = sends(page, lambda: page.locator("#must-include").fill(include))
        assert body["constraints"] == [include] and body["decode"]["strategy"] == "beam", body
        expect(page.locator("#strategy")).to_have_value("beam")
        expect(page.locator("#terms-note")).to_have_text(
            "Search switched from greedy to beam: must-include phrases need it."
        )
        body = sends(page, lambda: page.locator("#must-avoid").fill(avoid))
        assert body["constraints"] == [include] and body["banned"] == [avoid], body
        want = api(server_url, body)  # the page shows what the API gives for the body it sent
        assert include in want["text"] and avoid not in want["text"], want["text"]
        expect(target).to_have_text(want["text"], timeout=20_000)
        marks = page.locator("#target mark.term")
        [met] = want["constraints"]
        expect(marks).to_have_count(1)
        expect(marks).to_have_text(include)  # the mark covers the phrase, exactly
        # the mark starts where the API's "chars" says
        before = marks.evaluate("m => m.previousSibling ? m.previousSibling.textContent : ''")
        assert len(before) == met["chars"][0], (before, met)
        expect(page.locator("#terms-met")).to_have_text(f"Includes “{include}” (highlighted)")

        # "what if" on the marked text: type before the full stop; the caret stays after the
        # typed words when the answer, marks and all, replaces the text
        target.click()
        page.keyboard.press("End")
        page.keyboard.press("ArrowLeft")
        start = want["text"][:-1] + " x"
        body = sends(page, lambda: page.keyboard.type(" x", delay=10))
        assert body["prefix"] == start and body["constraints"] == [include], body
        edited = api(server_url, body)
        expect(target).to_have_text(edited["text"], timeout=20_000)
        expect(page.locator("#prefix-note")).to_contain_text(f"Starts with “{start}”")
        caret = page.evaluate(
            "() => { const r = document.createRange(); const s = getSelection();"
            " r.setStart(document.getElementById('target'), 0);"
            " r.setEnd(s.focusNode, s.focusOffset); return r.toString().length; }"
        )
        assert caret == len(start), (caret, edited["text"])
        page.locator("#clear-prefix").click()
        expect(target).to_have_text(want["text"], timeout=20_000)

        # the tree: each node's badge is its constraint pieces held / pieces in all
        body = sends(page, lambda: page.locator("#tree-toggle").click())
        assert body["beam_tree"] is True and body["constraints"] == [include], body
        tree = api(server_url, body)["beam_tree"]
        total = tree["constraint_pieces"]
        expect(page.locator("#tree .node")).to_have_count(len(tree["nodes"]), timeout=20_000)
        shown = page.evaluate(
            "() => Array.from(document.querySelectorAll('#tree .node'), n => "
            "[Number(n.dataset.id), n.querySelector('.met')?.textContent ?? null])"
        )
        assert dict(shown) == {n["id"]: f"{n['met']}/{total}" for n in tree["nodes"]}
        assert page.locator("#tree .node.finished .met.all").count() > 0

        # greedy again: the server's refusal, and the page says why
        body = sends(page, lambda: page.select_option("#strategy", "greedy"))
        status, refused = translate_api(server_url, body)
        assert status == 422 and "constraints need decode=beam" in refused["error"]
        expect(page.locator("#error")).to_have_text(refused["error"], timeout=20_000)
        expect(page.locator("#terms-note")).to_contain_text("need beam search, not greedy")
        page.select_option("#strategy", "beam")
        expect(page.locator("#error")).to_be_hidden(timeout=20_000)
        expect(page.locator("#terms-note")).to_be_hidden()

        # a phrase the model cannot write: the server's message, naming the text, shown as text
        body = sends(page, lambda: page.locator("#must-include").fill(f"{include}; {bad}"))
        assert body["constraints"] == [include, bad], body
        status, refused = translate_api(server_url, body)
        assert status == 422 and "text 1" in refused["error"] and bad in refused["error"]
        expect(page.locator("#error")).to_have_text(refused["error"], timeout=20_000)

        # cleared: the free beam search again, with no marks, note or badges
        page.locator("#must-include").fill("")
        page.locator("#must-avoid").fill("")
        free_tree = api(server_url, {"text": SENTENCE, "beam_tree": True})
        expect(target).to_have_text(free["text"], timeout=20_000)
        expect(page.locator("#tree .node")).to_have_count(len(free_tree["beam_tree"]["nodes"]))
        assert "constraints" not in sent[-1] and "banned" not in sent[-1]
        expect(marks).to_have_count(0)
        expect(page.locator("#terms-met")).to_be_hidden()
        expect(page.locator("#tree .node .met")).to_have_count(0)
        assert not errors


def test_document_mode_translates_paragraphs_renders_markup_and_links_aligned_words(server_url):
    """Paste two HTML paragraphs (one of two sentences, one with a tag): the page shows each
    paragraph's translation as POST /translate gives it, the markup rendered as elements (no
    script), and hovering a target word lights the source words its alignment names."""
    from playwright.sync_api import expect

    first = "Ich sehe rote Äpfel. Wir kaufen zwölf kleine Bücher."
    second = "Er sieht <b>grüne</b> Vögel.<script>alert(1)</script>"
    want = [api(server_url, {"text": t, "format": "html", "alignments": True})
            for t in (first, second)]  # fmt: skip
    with browser_page(server_url, 1400) as (page, errors):
        expect(page.locator("#model")).to_contain_text("de → en")
        page.locator("#document-text").fill(f"{first}\n\n{second}")
        page.select_option("#document-format", "html")
        page.locator("#document-button").click()
        rendered = page.locator("#document-rendered p")
        expect(rendered).to_have_count(2, timeout=20_000)
        expect(rendered.nth(0)).to_have_text(want[0]["text"])
        assert page.locator("#document-rendered script").count() == 0
        bold = page.locator("#document-rendered p >> nth=1 >> b")
        expect(bold).to_have_count(1)
        assert "<b>" in want[1]["text"] and bold.inner_text() in want[1]["text"]
        items = page.locator("#document-result li")
        expect(items).to_have_count(2)
        links = [p.split("-") for p in want[0]["alignment"].split()]
        source_word, target_word = (int(x) for x in links[0])
        target = items.nth(0).locator(".aligned-tgt .word").nth(target_word)
        target.hover()
        lit = items.nth(0).locator(".aligned-src .word.linked")
        expected = sorted({int(s) for s, t in links if int(t) == target_word})
        expect(lit).to_have_count(len(expected))
        assert source_word in expected
        # each translated word coloured by its probability, the paragraph's confidence first
        first_word = items.nth(0).locator(".aligned-tgt .word").first
        assert re.search(
            r"\bp-(very-low|low|mid|high|very-high)\b", first_word.get_attribute("class")
        )
        expect(items.nth(0).locator(".confidence-head")).to_contain_text("%")
        # and under the sentence box's translation
        page.locator("#source").fill(SENTENCE)
        expect(page.locator("#confidence")).to_contain_text("Confidence", timeout=20_000)
        assert not errors, errors


def test_a_model_with_language_codes_has_a_from_menu(tmp_path, demo_dir):
    """An NLLB-shaped import (tests/test_m2m100_import.py's, built by transformers): the page
    offers its codes in a "From" menu beside "Into", and each choice translates as a request
    with that "src_lang" does; a model without codes shows no menu (the other tests' pages)."""
    from playwright.sync_api import expect
    from test_m2m100_import import write_m2m100

    from nmt.pretrained.importer import import_model

    ours = import_model(str(write_m2m100(tmp_path / "hf", demo_dir)), tmp_path / "nmt")
    lines = (demo_dir / "test.de").read_text("utf-8").splitlines()[:40]
    with serving(ours, tmp_path / "server.log", "decode=beam") as url:
        codes = info(url)["source_codes"]
        assert "fra_Latn" in codes
        # a sentence the code changes (the briefly trained model reads it on most, not all)
        text = next(t for t in lines if len({api(url, {"text": t, "src_lang": c})["text"]
                                             for c in ("deu_Latn", "fra_Latn")}) == 2)  # fmt: skip
        with browser_page(url, 700) as (page, errors):
            expect(page.locator("#src-lang-control")).to_be_visible(timeout=20_000)
            options = page.locator("#src-lang option")
            assert [options.nth(k).get_attribute("value") for k in range(options.count())] == codes
            page.locator("#source").fill(text)
            shown = []
            for code in ("deu_Latn", "fra_Latn"):
                page.select_option("#src-lang", code)
                want = api(url, {"text": text, "src_lang": code, "attention": True})["text"]
                expect(page.locator("#target")).to_have_text(want, timeout=20_000)
                shown.append(want)
            assert shown[0] != shown[1]  # the code is read
            assert not errors


def test_a_server_of_two_models_and_keys_has_a_pair_picker_and_a_key_field(
    tmp_path_factory, tmp_path, demo_dir
):
    """models=[...] with api_keys: "From" lists every source, "Into" the targets the chosen one
    reaches, and the key typed in the key field goes with every request (without it: 403)."""
    from playwright.sync_api import expect
    from test_serve_apis import reversed_checkpoint

    de_en = tiny_checkpoint(tmp_path_factory, demo_dir)
    en_de = reversed_checkpoint(tmp_path_factory, demo_dir)
    keys = tmp_path / "keys.txt"
    keys.write_text("page-key\n")
    with serving(de_en, tmp_path / "server.log", f"models=[{en_de}]", f"api_keys={keys}") as url:

        def translation(text: str, src: str, tgt: str) -> str:
            body = json.dumps({"text": text, "src_lang": src, "tgt_lang": tgt, "attention": True})
            request = urllib.request.Request(
                url + "translate", data=body.encode(), headers={"Authorization": "Bearer page-key"}
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.load(answer)["translations"][0]["text"]

        with browser_page(url, 700) as (page, errors):
            expect(page.locator("#api-key-control")).to_be_visible(timeout=20_000)
            sources = page.locator("#src-lang option")
            assert [sources.nth(k).get_attribute("value") for k in range(2)] == ["de", "en"]
            page.locator("#source").fill(SENTENCE)
            expect(page.locator("#error")).to_contain_text("API key", timeout=20_000)
            page.locator("#api-key").fill("page-key")
            page.select_option("#src-lang", "de")  # translates again, with the key
            want = translation(SENTENCE, "de", "en")
            expect(page.locator("#target")).to_have_text(want, timeout=20_000)
            page.select_option("#src-lang", "en")
            assert page.locator("#tgt-lang").input_value() == "de"
            english = "I see twenty red apples."
            page.locator("#source").fill(english)
            want = translation(english, "en", "de")
            expect(page.locator("#target")).to_have_text(want, timeout=20_000)
            assert not errors
