// The nmt-serve page's document box: a text of paragraphs (blank lines between them), HTML or
// Markdown, translated as a document (POST /translate with "texts": its paragraphs, "format",
// "alignments": true). The server splits each paragraph into sentences, keeps its markup and
// protected spans, and answers each paragraph's translation with its word alignment ("i-j" over
// the whitespace words of the paragraph's text and of its translation, markup left out). The box
// shows the translation rendered (HTML and Markdown's inline markup as elements, of a few safe
// kinds: no script, no attribute but a link's target) and, per paragraph, source and translation
// word by word: hovering or focusing a word lights the words it is aligned to, each translated
// word coloured by its probability and the paragraph's confidence before them.
"use strict";

(() => {
  const byId = (id) => document.getElementById(id);
  const box = {
    form: byId("document-form"), text: byId("document-text"), format: byId("document-format"),
    file: byId("document-file"), error: byId("document-error"),
    rendered: byId("document-rendered"), result: byId("document-result"),
    tgtLang: byId("tgt-lang"), srcLang: byId("src-lang"),
  };
  // the inline elements a rendered translation keeps; any other tag keeps only its text
  const KEPT = new Set(["A", "B", "STRONG", "I", "EM", "U", "S", "SUB", "SUP", "CODE", "BR",
    "SPAN", "SMALL", "MARK"]);
  let sent = 0; // id of the newest request

  const BANDS = [[0.1, "p-very-low"], [0.3, "p-low"], [0.5, "p-mid"], [0.8, "p-high"],
    [Infinity, "p-very-high"]];
  const band = (p) => BANDS.find(([upper]) => p < upper)[1];

  const paragraphs = (text) => text.split(/\n\s*\n/).map((p) => p.trim()).filter(Boolean);

  async function translate() {
    const texts = paragraphs(box.text.value);
    const id = ++sent;
    if (!texts.length) {
      showError("Paste or type a text first.");
      return;
    }
    const request = { texts, format: box.format.value, alignments: true, confidence: true };
    if (box.tgtLang.value) request.tgt_lang = box.tgtLang.value;
    if (box.srcLang.value) request.src_lang = box.srcLang.value;
    box.form.setAttribute("aria-busy", "true");
    let answer, body;
    try {
      answer = await fetch("/translate", {
        method: "POST", headers: apiHeaders(), // app.js: JSON, and the key when needed
        body: JSON.stringify(request),
      });
      body = await answer.json();
    } catch (err) {
      body = { error: `the server cannot be reached (${err.message})` };
    } finally {
      if (id === sent) box.form.removeAttribute("aria-busy");
    }
    if (id !== sent) return; // a newer request is under way
    if (!answer || !answer.ok) {
      showError(body.error || `HTTP ${answer.status}`);
      return;
    }
    box.error.hidden = true;
    show(body.translations, request.format);
  }

  function showError(message) {
    box.error.textContent = message;
    box.error.hidden = false;
  }

  // --- the translation, rendered ---------------------------------------------------------------

  function show(translations, format) {
    box.rendered.replaceChildren(...translations.map((t) => rendered(t.text, format)));
    box.result.replaceChildren(...translations.map(aligned));
  }

  function rendered(text, format) {
    const paragraph = document.createElement("p");
    if (format === "html") {
      safeCopy(new DOMParser().parseFromString(text, "text/html").body, paragraph);
    } else if (format === "markdown") {
      safeCopy(new DOMParser().parseFromString(markdownInline(text), "text/html").body, paragraph);
    } else {
      paragraph.textContent = text;
    }
    return paragraph;
  }

  // the parsed nodes into `into`: text as text, kept elements as fresh ones (a link keeps an
  // http(s) target and opens apart), every other element as its children
  function safeCopy(from, into) {
    for (const node of from.childNodes) {
      if (node.nodeType === Node.TEXT_NODE) {
        into.append(node.textContent);
      } else if (node.nodeType === Node.ELEMENT_NODE) {
        if (!KEPT.has(node.tagName)) {
          safeCopy(node, into);
          continue;
        }
        const copy = document.createElement(node.tagName);
        const href = node.getAttribute("href");
        if (node.tagName === "A" && href && /^https?:\/\//.test(href)) {
          copy.href = href;
          copy.rel = "noopener noreferrer";
          copy.target = "_blank";
        }
        safeCopy(node, copy);
        into.append(copy);
      }
    }
  }

  // Markdown's inline syntax as HTML to render (escaped first: the text's own "<" stays text)
  function markdownInline(text) {
    const escaped = text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    return escaped
      .replace(/`([^`]+)`/g, "<code>$1</code>")
      .replace(/\*\*([^*]+)\*\*|__([^_]+)__/g, (_, a, b) => `<b>${a || b}</b>`)
      .replace(/\*([^*]+)\*|\b_([^_]+)_\b/g, (_, a, b) => `<i>${a || b}</i>`)
      .replace(/\[([^\]]+)\]\(([^)\s]+)[^)]*\)/g, '<a href="$2">$1</a>');
  }

  // --- word alignments -------------------------------------------------------------------------

  // a paragraph as two lines of words (its source's and its translation's, markup left out: the
  // words the alignment counts), each word a focusable chip that lights its aligned words
  function aligned(t) {
    const item = document.createElement("li");
    const sourceWords = t.sentences.flatMap((s) => s.source.split(/\s+/).filter(Boolean));
    const targetWords = t.sentences.flatMap((s) => s.text.split(/\s+/).filter(Boolean));
    const links = (t.alignment || "").split(" ").filter(Boolean).map((p) => p.split("-").map(Number));
    const source = words(sourceWords, "src");
    const target = words(targetWords, "tgt");
    // each translated word coloured by its probability, the paragraph's confidence before it
    const confidence = t.confidence;
    if (confidence) {
      target.chips.forEach((chip, k) => chip.classList.add(band(confidence.words[k] ?? 1)));
      const head = document.createElement("span");
      head.className = "confidence-head";
      const flags = confidence.flags.length ? `, flagged: ${confidence.flags.join(", ")}` : "";
      head.textContent = `${Math.round(confidence.sentence * 100)}%${flags}`;
      head.title = "the probability that the translation is good (sentence chrF >= 50)";
      target.line.prepend(head, " ");
    }
    for (const [side, own, other, index] of [["src", source, target, 0], ["tgt", target, source, 1]]) {
      own.chips.forEach((chip, k) => {
        const linked = links.filter((l) => l[index] === k).map((l) => l[1 - index]);
        chip.dataset.links = linked.join(" ");
        const light = (on) => {
          chip.classList.toggle("linked", on);
          for (const j of linked) other.chips[j]?.classList.toggle("linked", on);
        };
        for (const [event, on] of [["mouseenter", true], ["mouseleave", false], ["focus", true],
          ["blur", false]]) chip.addEventListener(event, () => light(on));
        chip.setAttribute("aria-label", `${chip.textContent}, ${side === "src" ? "source" : "target"} word ${k + 1}`);
      });
    }
    item.append(source.line, target.line);
    return item;
  }

  function words(list, side) {
    const line = document.createElement("p");
    line.className = `aligned-${side}`;
    const chips = list.map((word) => {
      const chip = document.createElement("span");
      chip.className = "word";
      chip.tabIndex = 0;
      chip.textContent = word;
      return chip;
    });
    chips.forEach((chip, k) => line.append(...(k ? [" ", chip] : [chip])));
    return { line, chips };
  }

  // --- events -----------------------------------------------------------------------------------

  box.form.addEventListener("submit", (event) => {
    event.preventDefault();
    translate();
  });
  box.file.addEventListener("change", async () => {
    const file = box.file.files[0];
    if (!file) return;
    box.text.value = await file.text();
    const name = file.name.toLowerCase();
    if (/\.html?$/.test(name)) box.format.value = "html";
    else if (/\.(md|markdown)$/.test(name)) box.format.value = "markdown";
    else box.format.value = "text";
  });
})();
