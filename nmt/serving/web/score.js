// The nmt-serve page's "score a translation" box: what the model thinks of a translation of the
// source, given by the reader (POST /score). The box starts as the model's own translation and
// follows it until the reader edits it; Score (or Ctrl+Enter) shows the total log-probability,
// the length-normalized score and one chip per piece, coloured by the probability the model gives
// the piece there. app.js tells this script of /info and of each translation by two events,
// "nmt:info" and "nmt:translation"; the two scripts share nothing else but the "Into" menu
// (#tgt-lang), whose language a score request carries as "tgt_lang" (none while it is empty).
"use strict";

(() => {
  const byId = (id) => document.getElementById(id);
  const box = {
    source: byId("source"), form: byId("score-form"), text: byId("score-text"),
    reset: byId("score-reset"), error: byId("score-error"), result: byId("score-result"),
    total: byId("score-total"), normalized: byId("score-normalized"),
    normalizedLabel: byId("score-normalized-label"), count: byId("score-count"),
    stale: byId("score-stale"), strip: byId("score-strip"), detail: byId("score-detail"),
    legend: byId("score-legend"), tgtLang: byId("tgt-lang"),
  };

  const scoring = {
    sent: 0,          // id of the newest /score request sent
    translation: "",  // the model's translation on the page
    prefilled: "",    // what this script last put in the box: until it is edited, the box follows
    scored: null,     // {source, translation, tgtLang} of the score on screen
    chip: 0,          // the chip that takes focus
  };

  // the probability bands a chip is coloured by (upper bound, class, legend); style.css colours them
  const BANDS = [
    [0.1, "p-very-low", "< 0.1"],
    [0.3, "p-low", "0.1–0.3"],
    [0.5, "p-mid", "0.3–0.5"],
    [0.8, "p-high", "0.5–0.8"],
    [Infinity, "p-very-high", "≥ 0.8"],
  ];
  const EOS = "</s>";
  const UNK = "<unk>";

  // --- asking the server -----------------------------------------------------------------------

  async function score() {
    const source = box.source.value;
    const translation = box.text.value;
    const tgtLang = box.tgtLang.value;
    const id = ++scoring.sent;
    if (!source.trim()) {
      showError("Type a sentence in the source box first: a translation is scored given its source.");
      return;
    }
    if (!translation.trim()) {
      showError("Type or paste a translation to score.");
      return;
    }
    box.form.setAttribute("aria-busy", "true");
    const request = { text: source, translation };
    if (tgtLang) request.tgt_lang = tgtLang;
    let answer, body;
    try {
      answer = await fetch("/score", {
        method: "POST",
        headers: apiHeaders(), // app.js: JSON, and the key when the server needs one
        body: JSON.stringify(request),
      });
      body = await answer.json().catch(() => ({})); // a proxy's page is not JSON
    } catch (err) {
      body = { error: `the server cannot be reached (${err.message})` };
    }
    if (id !== scoring.sent) return; // a newer request is on its way: its answer counts
    const scored = answer && answer.ok && body.scores ? body.scores[0] : null;
    if (!scored) {
      const status = answer ? `HTTP ${answer.status} ${answer.statusText}`.trim() : "no answer";
      showError(body.error || `the server gave no score (${status})`);
      return;
    }
    showScore({ source, translation, tgtLang }, scored);
  }

  // --- showing a score -------------------------------------------------------------------------

  function showError(message) {
    box.form.removeAttribute("aria-busy");
    box.error.textContent = message;
    box.error.hidden = false;
    box.result.hidden = true;
    scoring.scored = null;
  }

  // scored: one item of the API's "scores" ({score, normalized, pieces, piece_scores}; a score of
  // null is -infinity, a piece outside the shortlist)
  function showScore(what, scored) {
    box.form.removeAttribute("aria-busy");
    box.error.hidden = true;
    scoring.scored = what;
    box.total.textContent = number(scored.score);
    box.normalized.textContent = number(scored.normalized);
    box.count.textContent = String(scored.pieces.length);
    const chips = scored.pieces.map((piece, i) => chip(piece, scored.piece_scores[i], i));
    box.strip.replaceChildren(...chips);
    scoring.chip = 0;
    if (chips.length) chips[0].tabIndex = 0;
    box.detail.textContent = leastLikely(scored);
    box.result.hidden = false;
    markStale();
  }

  function chip(piece, logprob, index) {
    const item = document.createElement("span");
    item.className = `chip ${band(probability(logprob))}${piece === EOS ? " eos" : ""}`;
    item.setAttribute("role", "listitem");
    item.tabIndex = -1;
    item.dataset.index = index;
    item.textContent = pieceText(piece);
    item.title = describePiece(piece, logprob);
    item.setAttribute("aria-label", item.title);
    return item;
  }

  const probability = (logprob) => (logprob === null ? 0 : Math.exp(logprob));
  const band = (p) => BANDS.find(([upper]) => p < upper)[1];
  // sentencepiece marks a word's start with ▁: shown as the space it stands for
  const pieceText = (piece) => piece.replaceAll("▁", " ");
  const number = (x) => (x === null ? "−∞" : x.toFixed(3));

  function formatProbability(p) {
    return p === 0 || p >= 0.001 ? p.toFixed(3) : p.toExponential(1);
  }

  function describePiece(piece, logprob) {
    const name = piece === EOS ? "end of sentence" : `“${pieceText(piece)}”`;
    if (logprob === null) return `${name}: probability 0 (outside the shortlist)`;
    const p = formatProbability(probability(logprob));
    const unknown = piece === UNK ? " · a character the target vocabulary lacks" : "";
    return `${name}: probability ${p} (log-probability ${logprob.toFixed(3)})${unknown}`;
  }

  function leastLikely(scored) {
    const scores = scored.piece_scores.map((x) => (x === null ? -Infinity : x));
    const i = scores.indexOf(Math.min(...scores));
    return i < 0 ? "\u00a0" : `least likely: ${describePiece(scored.pieces[i], scored.piece_scores[i])}`;
  }

  // the score on screen is of what was in the boxes (and the menu) when Score was pressed: say
  // when that changed
  function markStale() {
    const what = scoring.scored;
    const changed = what !== null && (what.source !== box.source.value ||
      what.translation !== box.text.value || what.tgtLang !== box.tgtLang.value);
    box.result.classList.toggle("stale", changed);
    box.stale.hidden = !changed;
  }

  function drawLegend() {
    const label = document.createElement("span");
    label.textContent = "piece probability:";
    const swatches = BANDS.map(([, name, text]) => {
      const swatch = document.createElement("span");
      swatch.className = `chip ${name}`;
      swatch.textContent = text;
      return swatch;
    });
    box.legend.replaceChildren(label, ...swatches);
  }

  // --- the strip: hover or focus a chip to read it; ← → move the focus -------------------------

  function describeChip(item) {
    box.detail.textContent = item.title;
  }

  box.strip.addEventListener("mouseover", (event) => {
    const item = event.target.closest(".chip");
    if (item) describeChip(item);
  });

  box.strip.addEventListener("focusin", (event) => {
    const item = event.target.closest(".chip");
    if (!item) return;
    box.strip.children[scoring.chip].tabIndex = -1;
    scoring.chip = Number(item.dataset.index);
    item.tabIndex = 0;
    describeChip(item);
  });

  box.strip.addEventListener("keydown", (event) => {
    const last = box.strip.children.length - 1;
    const moves = { ArrowLeft: scoring.chip - 1, ArrowRight: scoring.chip + 1, Home: 0, End: last };
    if (!(event.key in moves) || last < 0) return;
    event.preventDefault();
    box.strip.children[Math.max(0, Math.min(last, moves[event.key]))].focus();
  });

  // --- following the page ----------------------------------------------------------------------

  function useTranslation() {
    box.text.value = scoring.prefilled = scoring.translation;
    syncReset();
    markStale();
  }

  function syncReset() {
    box.reset.disabled = box.text.value === scoring.translation;
  }

  document.addEventListener("nmt:translation", (event) => {
    scoring.translation = event.detail ? event.detail.text : "";
    if (box.text.value === scoring.prefilled) useTranslation(); // not edited: follow the model
    syncReset();
    markStale();
  });

  document.addEventListener("nmt:info", (event) => {
    const decode = event.detail.decode;
    const rule = decode.length_penalty === "none"
      ? "length_penalty none: the total itself"
      : decode.length_penalty === "gnmt"
        ? `length_penalty gnmt, α ${decode.alpha}`
        : `length_penalty ${decode.length_penalty}`;
    box.normalizedLabel.textContent = `length-normalized (${rule})`;
  });

  box.form.addEventListener("submit", (event) => {
    event.preventDefault();
    score();
  });

  box.text.addEventListener("keydown", (event) => {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    event.preventDefault();
    score();
  });

  box.text.addEventListener("input", () => { syncReset(); markStale(); });
  box.source.addEventListener("input", markStale);
  box.tgtLang.addEventListener("change", markStale);
  box.reset.addEventListener("click", () => { useTranslation(); box.text.focus(); });

  drawLegend();
})();
