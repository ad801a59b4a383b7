// The nmt-serve page: translate as you type, list the n-best hypotheses, draw the attention of the
// chosen one as a table (rows = target pieces, columns = source pieces) and every layer and head
// as small maps; edit the translation or click a node of the search tree to force its start (the
// API's "prefix") and let the model write the rest. Plain JS, no libraries. The "score a
// translation" box is score.js: this script tells it of /info and of each translation shown by
// the events "nmt:info" and "nmt:translation" (detail: the /info answer, the translation or null).
// The "must include / must avoid" field is terms.js: each request is dispatched as "nmt:request"
// before it is sent (detail: the body, which a listener may add keys to), and "nmt:settings"
// from it translates again after a pause. This script highlights the phrases each translation
// met (its "constraints") and draws the tree's constraint progress. A model with several target
// languages (/info's "target_languages") gets the "Into" menu: every request carries its
// "tgt_lang" (score.js reads the same menu for /score).
"use strict";

const DEBOUNCE_MS = 250;
const EDIT_DEBOUNCE_MS = 400;  // a translation being edited waits for a longer pause
const LANGUAGES = { de: "German", en: "English", fr: "French", cs: "Czech", es: "Spanish" };

const $ = (id) => document.getElementById(id);
const ui = {
  model: $("model"), source: $("source"), sourceLabel: $("source-label"),
  target: $("target"), targetLabel: $("target-label"), error: $("error"),
  strategy: $("strategy"), beamSize: $("beam-size"), nBest: $("n-best"), timing: $("timing"),
  nbest: $("nbest"), mapControls: $("map-controls"), layer: $("layer"), head: $("head"),
  heatmap: $("heatmap"), status: $("status"), prefixNote: $("prefix-note"),
  prefixText: $("prefix-text"), clearPrefix: $("clear-prefix"), tree: $("tree"),
  treeToggle: $("tree-toggle"), modelView: $("model-view"), attentionSource: $("attention-source"),
  tgtLang: $("tgt-lang"), tgtLangControl: $("tgt-lang-control"),
  srcLang: $("src-lang"), srcLangControl: $("src-lang-control"),
  apiKey: $("api-key"), apiKeyControl: $("api-key-control"),
};

const state = {
  sent: 0,        // id of the newest request sent
  shown: 0,       // id of the request whose answer is on screen (older answers are dropped)
  timer: null,
  result: null,   // the translation on screen (one item of the API's "translations")
  chosen: 0,      // index of the hypothesis whose attention is drawn
  matrix: null,   // the weights drawn: [T][S]
  cell: [0, 0],   // the heatmap cell that takes focus (row, column)
  prefix: "",     // the start the translation is forced to ("" = none)
  showTree: false,
};

// --- talking to the server -------------------------------------------------------------------

function decodeSettings() {
  const strategy = ui.strategy.value;
  if (strategy === "greedy") return { strategy };
  const beam = clampInput(ui.beamSize, 1, Number(ui.beamSize.max));
  const nBest = clampInput(ui.nBest, 1, strategy === "beam" ? beam : Number(ui.nBest.max));
  return strategy === "beam" ? { strategy, beam_size: beam, n_best: nBest } : { strategy, n_best: nBest };
}

function clampInput(input, low, high) {
  const value = Math.min(high, Math.max(low, Math.round(Number(input.value) || low)));
  if (String(value) !== input.value) input.value = String(value);
  return value;
}

async function translate() {
  clearTimeout(state.timer);
  const text = ui.source.value;
  const id = ++state.sent;
  if (!text.trim()) {
    state.shown = id;
    show(null);
    return;
  }
  const began = performance.now();
  let answer, body;
  try {
    answer = await fetch("/translate", {
      method: "POST",
      headers: apiHeaders(),
      body: JSON.stringify(request(text)),
    });
    body = await answer.json();
  } catch (err) {
    body = { error: `the server cannot be reached (${err.message})` };
  }
  if (id <= state.shown) return; // a newer request has already been answered
  state.shown = id;
  if (!answer || !answer.ok) {
    showError(body.error || `HTTP ${answer.status}`);
    return;
  }
  ui.timing.textContent = `${Math.round(performance.now() - began)} ms`;
  show(body.translations[0]);
}

function request(text) {
  // the box is one sentence to explore, its attention and tree its own: not split into sentences,
  // nothing lifted out (the document box below translates text as documents)
  const body = {
    text, attention: true, decode: decodeSettings(), split_sentences: false, protect: [],
    confidence: true,
  };
  if (ui.tgtLang.value) body.tgt_lang = ui.tgtLang.value; // "" while the menu has no languages
  if (ui.srcLang.value) body.src_lang = ui.srcLang.value; // a model with language codes only
  if (state.prefix) body.prefix = state.prefix;
  if (state.showTree) body.beam_tree = true;
  // listeners run before dispatchEvent returns: what they add goes with this request
  document.dispatchEvent(new CustomEvent("nmt:request", { detail: body }));
  return body;
}

function later(wait = DEBOUNCE_MS) {
  clearTimeout(state.timer);
  state.timer = setTimeout(translate, wait);
}

function setPrefix(prefix) {
  state.prefix = prefix.trim();
  translate();
}

// --- showing a translation -------------------------------------------------------------------

function showError(message) {
  ui.error.textContent = message;
  ui.error.hidden = false;
}

function show(result) {
  ui.error.hidden = true;
  state.result = result;
  document.dispatchEvent(new CustomEvent("nmt:translation", { detail: result }));
  state.chosen = 0;
  showTarget(result ? result.text : "", result ? result.constraints : null);
  showConfidence(result ? result.confidence : null, result ? result.text : "");
  showPrefix(result);
  drawTree(result);
  ui.nbest.replaceChildren();
  for (const [rank, hyp] of (result ? result.nbest : []).entries()) {
    const item = document.createElement("li");
    item.id = `hyp-${rank}`;
    item.setAttribute("role", "option");
    const text = document.createElement("span");
    text.className = "hyp-text";
    text.textContent = hyp.text || "(empty)";
    const score = document.createElement("span");
    score.className = "hyp-score";
    score.textContent = hyp.score === null ? "–" : hyp.score.toFixed(3);
    score.title = "score: log-probability, length-normalised as decode.length_penalty says";
    item.append(text, score);
    item.addEventListener("click", () => choose(rank));
    ui.nbest.append(item);
  }
  setupSelectors();
  choose(0);
}

// the probability bands a word is coloured by (style.css: .p-very-low ... .p-very-high)
const CONFIDENCE_BANDS = [[0.1, "p-very-low"], [0.3, "p-low"], [0.5, "p-mid"], [0.8, "p-high"],
  [Infinity, "p-very-high"]];
const band = (p) => CONFIDENCE_BANDS.find(([upper]) => p < upper)[1];

// under the translation: how likely it is good (sentence chrF >= 50, docs/confidence.md), its
// flags, and its words coloured by their probability
function showConfidence(confidence, text) {
  const line = $("confidence");
  if (!confidence || !text) {
    line.hidden = true;
    return;
  }
  const head = document.createElement("span");
  head.className = "confidence-head";
  const flags = confidence.flags.length ? ` · flagged: ${confidence.flags.join(", ")}` : "";
  head.textContent = `Confidence ${Math.round(confidence.sentence * 100)}%${flags}`;
  head.title = "the probability that the translation is good (a sentence chrF of 50 or more), " +
    "calibrated on the validation split";
  const words = text.split(/\s+/).filter(Boolean).map((word, k) => {
    const chip = document.createElement("span");
    const p = confidence.words[k] ?? 1;
    chip.className = `word ${band(p)}`;
    chip.textContent = word;
    chip.title = `${word}: ${p.toFixed(2)}`;
    return chip;
  });
  line.replaceChildren(head, ...words.flatMap((w) => [" ", w]));
  line.hidden = false;
}

function choose(rank) {
  const items = ui.nbest.children;
  if (!items.length) {
    ui.nbest.removeAttribute("aria-activedescendant");
    drawHeatmap();
    return;
  }
  state.chosen = Math.max(0, Math.min(items.length - 1, rank));
  for (const [i, item] of Array.from(items).entries()) {
    item.setAttribute("aria-selected", String(i === state.chosen));
  }
  ui.nbest.setAttribute("aria-activedescendant", items[state.chosen].id);
  items[state.chosen].scrollIntoView({ block: "nearest" });
  drawHeatmap();
}

ui.nbest.addEventListener("keydown", (event) => {
  const step = { ArrowDown: 1, ArrowUp: -1 }[event.key];
  if (step !== undefined) choose(state.chosen + step);
  else if (event.key === "Home") choose(0);
  else if (event.key === "End") choose(ui.nbest.children.length - 1);
  else return;
  event.preventDefault();
});

// --- the translation as a "what if" editor -------------------------------------------------

// While the reader edits the translation, the text before the cursor is the prefix; the new
// translation replaces the text, and the cursor stays where it was.
function showTarget(text, met) {
  const editing = document.activeElement === ui.target;
  const at = editing ? caretOffset() : 0;
  ui.target.replaceChildren(...highlighted(text, met));
  if (editing) placeCaret(Math.min(at, text.length));
}

// the text as strings and <mark>s: one mark over the characters ("chars", [start, end)) where
// each must-include phrase is met. A phrase whose pieces do not map onto the text (chars null)
// gets no mark: terms.js lists it under the box. Strings become text nodes, never markup.
function highlighted(text, met) {
  const spans = (met || [])
    .filter((c) => Array.isArray(c.chars))
    .map((c) => ({ phrase: c.phrase, start: c.chars[0], end: c.chars[1] }))
    .sort((a, b) => a.start - b.start);
  const parts = [];
  let at = 0;
  for (const { phrase, start, end } of spans) {
    if (start < at || start >= end || end > text.length) continue; // overlapping: one mark
    if (start > at) parts.push(text.slice(at, start));
    const mark = document.createElement("mark");
    mark.className = "term";
    mark.textContent = text.slice(start, end);
    mark.title = `must include: “${phrase}”`;
    parts.push(mark);
    at = end;
  }
  if (at < text.length) parts.push(text.slice(at));
  return parts;
}

function caretOffset() {
  const selection = window.getSelection();
  if (!selection.rangeCount || !ui.target.contains(selection.focusNode)) {
    return ui.target.textContent.length;
  }
  const before = document.createRange();
  before.selectNodeContents(ui.target);
  before.setEnd(selection.focusNode, selection.focusOffset);
  return before.toString().length;
}

// the caret `offset` characters into the box, whose text may be split by marks
function placeCaret(offset) {
  const texts = document.createTreeWalker(ui.target, NodeFilter.SHOW_TEXT);
  let node = texts.nextNode();
  if (!node) return;
  for (let next; offset > node.length && (next = texts.nextNode()); node = next) {
    offset -= node.length;
  }
  offset = Math.min(offset, node.length);
  const range = document.createRange();
  range.setStart(node, offset);
  range.collapse(true);
  const selection = window.getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
}

function showPrefix(result) {
  const forced = result && result.prefix;
  ui.prefixNote.hidden = !state.prefix;
  if (!state.prefix) return;
  const score = forced && forced.score !== null ? ` · log-probability ${forced.score.toFixed(3)}` : "";
  const pieces = forced ? ` over ${forced.pieces} pieces` : "";
  ui.prefixText.textContent = `Starts with “${state.prefix}”${score}${score ? pieces : ""}`;
}

ui.target.addEventListener("input", () => {
  state.prefix = ui.target.textContent.slice(0, caretOffset()).trim();
  later(EDIT_DEBOUNCE_MS);
});

ui.target.addEventListener("keydown", (event) => {
  if (event.key !== "Enter") return;
  event.preventDefault(); // one line: Enter re-decodes now
  state.prefix = ui.target.textContent.slice(0, caretOffset()).trim();
  translate();
});

ui.clearPrefix.addEventListener("click", () => setPrefix(""));

// --- the search tree -------------------------------------------------------------------------

function drawTree(result) {
  ui.tree.replaceChildren();
  const nodes = result && result.beam_tree ? result.beam_tree.nodes : null;
  if (!state.showTree) return;
  if (!nodes) {
    const note = document.createElement("p");
    note.className = "hint";
    note.textContent = result && result.beam_tree_omitted
      ? `The tree is too large to show: ${result.beam_tree_omitted}.` : "";
    ui.tree.append(note);
    return;
  }
  const children = new Map();
  for (const node of nodes) {
    if (node.parent === null) continue;
    if (!children.has(node.parent)) children.set(node.parent, []);
    children.get(node.parent).push(node);
  }
  // with must-include phrases: their pieces in all, each node saying how many it holds ("met")
  const total = result.beam_tree.constraint_pieces;
  ui.tree.append(treeBranch(nodes[0], children, typeof total === "number" ? total : null));
}

// a node and, to its right, the column of its children (drawn as Seq2Seq-Vis does, left to right)
function treeBranch(node, children, total) {
  const branch = document.createElement("div");
  branch.className = "branch";
  const label = document.createElement("button");
  label.type = "button";
  label.className = `node ${node.state}`;
  label.dataset.id = node.id;
  const piece = node.parent === null ? "start" : node.piece;
  const score = document.createElement("small");
  score.textContent = node.score === null ? "–" : node.score.toFixed(2);
  label.append(piece, " ", score);
  if (node.rank !== null) {
    const rank = document.createElement("span");
    rank.className = "rank";
    rank.textContent = `#${node.rank + 1}`;
    label.append(" ", rank);
  }
  let progress = "";
  if (total !== null && typeof node.met === "number") {
    const met = document.createElement("span");
    met.className = node.met === total ? "met all" : "met";
    met.textContent = `${node.met}/${total}`;
    label.append(" ", met);
    progress = ` · ${node.met} of ${total} must-include pieces`;
  }
  const words = node.text ? `“${node.text}”` : "the empty start";
  label.title = `${words} · log-probability ${score.textContent} · ${node.state}${progress}`;
  label.setAttribute("aria-label", `${piece}: ${label.title}. Translate from here.`);
  label.addEventListener("click", () => setPrefix(node.text));
  branch.append(label);
  const kids = children.get(node.id) || [];
  if (kids.length) {
    const column = document.createElement("div");
    column.className = "children";
    for (const kid of kids) column.append(treeBranch(kid, children, total));
    branch.append(column);
  }
  return branch;
}

ui.treeToggle.addEventListener("click", () => {
  state.showTree = !state.showTree;
  ui.treeToggle.setAttribute("aria-expanded", String(state.showTree));
  ui.treeToggle.textContent = state.showTree ? "Hide" : "Show";
  ui.tree.hidden = !state.showTree;
  if (ui.source.value.trim()) translate();
});

// --- the attention map -----------------------------------------------------------------------

function hypothesis() {
  const attention = state.result && state.result.attention;
  return attention ? attention.hypotheses[state.chosen] : null;
}

function setupSelectors() {
  const hyp = hypothesis();
  if (!hyp) return; // nothing drawn: keep the reader's choice for the next translation
  const layers = hyp.weights.length;
  const heads = hyp.weights[0].length;
  fillSelect(ui.layer, layers, "layer", layers - 1); // the top layer by default
  fillSelect(ui.head, heads, "head", "mean");
  ui.mapControls.hidden = layers <= 1 && heads <= 1;
}

function fillSelect(select, count, name, preferred) {
  if (select.options.length === count + 1) return; // same model: keep the reader's choice
  const options = [["mean", `mean of ${name}s`]];
  for (let i = 0; i < count; i++) options.push([String(i), `${name} ${i + 1}`]);
  select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
  select.value = String(preferred);
}

// weights [L][h][T][S] -> [T][S]: one layer and head, or the mean over either
function matrix(weights) {
  const pick = (items, choice) => (choice === "mean" ? items : [items[Number(choice)]]);
  const chosen = pick(weights, ui.layer.value).flatMap((heads) => pick(heads, ui.head.value));
  return chosen[0].map((row, t) =>
    row.map((_, s) => chosen.reduce((sum, m) => sum + m[t][s], 0) / chosen.length));
}

function drawHeatmap() {
  const hyp = hypothesis();
  ui.heatmap.replaceChildren();
  drawModelView(hyp);
  if (!hyp) {
    ui.status.textContent = state.result ? "This model has no attention to show." : "\u00a0";
    return;
  }
  const src = state.result.attention.src_pieces;
  const rows = (state.matrix = matrix(hyp.weights));
  const head = ui.heatmap.createTHead().insertRow();
  head.append(document.createElement("td"));
  for (const piece of src) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = piece;
    head.append(th);
  }
  const body = ui.heatmap.createTBody();
  for (const [t, piece] of hyp.tgt_pieces.entries()) {
    const tr = body.insertRow();
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = piece;
    tr.append(th);
    for (const [s, weight] of rows[t].entries()) {
      const td = tr.insertCell();
      td.tabIndex = -1;
      td.dataset.row = t;
      td.dataset.col = s;
      td.style.backgroundColor = colour(weight);
      td.setAttribute("aria-label", `${piece} to ${src[s]}: ${weight.toFixed(3)}`);
    }
  }
  const [r, c] = state.cell;
  state.cell = [Math.max(0, Math.min(r, rows.length - 1)), Math.max(0, Math.min(c, src.length - 1))];
  if (rows.length && src.length) cellAt(...state.cell).tabIndex = 0;
  ui.status.textContent = "\u00a0";
}

// every layer x head of the hypothesis as a small map: a canvas of T x S pixels, scaled up
function drawModelView(hyp) {
  ui.modelView.replaceChildren();
  if (!hyp) return;
  for (const [l, heads] of hyp.weights.entries()) {
    const row = document.createElement("div");
    row.className = "model-row";
    const name = document.createElement("span");
    name.className = "model-row-name";
    name.textContent = `layer ${l + 1}`;
    row.append(name);
    for (const [h, weights] of heads.entries()) {
      const cell = document.createElement("button");
      cell.type = "button";
      cell.className = "head-map";
      cell.dataset.layer = l;
      cell.dataset.head = h;
      const chosen = ui.layer.value === String(l) && ui.head.value === String(h);
      cell.setAttribute("aria-pressed", String(chosen));
      cell.setAttribute("aria-label", `layer ${l + 1}, head ${h + 1}: enlarge`);
      cell.title = `layer ${l + 1}, head ${h + 1}`;
      cell.append(smallMap(weights));
      cell.addEventListener("click", () => {
        ui.layer.value = String(l);
        ui.head.value = String(h);
        drawHeatmap();
        ui.modelView.querySelector(`[data-layer="${l}"][data-head="${h}"]`).focus();
      });
      row.append(cell);
    }
    ui.modelView.append(row);
  }
}

function smallMap(weights) {
  const canvas = document.createElement("canvas");
  canvas.width = weights[0] ? weights[0].length : 1;
  canvas.height = Math.max(1, weights.length);
  const paint = canvas.getContext("2d");
  for (const [t, row] of weights.entries()) {
    for (const [s, weight] of row.entries()) {
      paint.fillStyle = colour(weight);
      paint.fillRect(s, t, 1, 1);
    }
  }
  return canvas;
}

function cellAt(row, col) {
  return ui.heatmap.tBodies[0].rows[row].cells[col + 1];
}

function describeCell(td) {
  const t = Number(td.dataset.row), s = Number(td.dataset.col);
  const hyp = hypothesis();
  const weight = state.matrix[t][s];
  ui.status.textContent =
    `target “${hyp.tgt_pieces[t]}” ← source “${state.result.attention.src_pieces[s]}”: ${weight.toFixed(3)}`;
  for (const th of ui.heatmap.querySelectorAll(".lit")) th.classList.remove("lit");
  ui.heatmap.tHead.rows[0].cells[s + 1].classList.add("lit");
  td.parentElement.cells[0].classList.add("lit");
}

ui.heatmap.addEventListener("mouseover", (event) => {
  const td = event.target.closest("td[data-row]");
  if (td) describeCell(td);
});

ui.heatmap.addEventListener("focusin", (event) => {
  const td = event.target.closest("td[data-row]");
  if (!td) return;
  cellAt(...state.cell).tabIndex = -1;
  state.cell = [Number(td.dataset.row), Number(td.dataset.col)];
  td.tabIndex = 0;
  describeCell(td);
});

ui.heatmap.addEventListener("keydown", (event) => {
  const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
  const body = ui.heatmap.tBodies[0];
  if (!body || !body.rows.length) return;
  let [r, c] = state.cell;
  const last = [body.rows.length - 1, body.rows[0].cells.length - 2];
  if (moves[event.key]) {
    r += moves[event.key][0];
    c += moves[event.key][1];
  } else if (event.key === "Home") c = 0;
  else if (event.key === "End") c = last[1];
  else return;
  event.preventDefault();
  cellAt(Math.max(0, Math.min(last[0], r)), Math.max(0, Math.min(last[1], c))).focus();
});

// viridis, sampled at 0, 0.25, 0.5, 0.75, 1 and interpolated linearly
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

function colour(weight) {
  const x = Math.max(0, Math.min(1, weight)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const rgb = RAMP[i].map((v, k) => Math.round(v + f * (RAMP[i + 1][k] - v)));
  return `rgb(${rgb.join(",")})`;
}

// --- the model and the controls --------------------------------------------------------------

const capital = (word) => word.charAt(0).toUpperCase() + word.slice(1);
const languageName = (code) => LANGUAGES[code] || code;

function describeModel(info) {
  // a many-to-one model reads several languages, none of which needs saying
  const sources = info.source_languages && info.source_languages.length
    ? info.source_languages : [info.languages.source];
  ui.sourceLabel.textContent = sources.map(languageName).join(", ");
  const targets = setupLanguages(info);
  const arch = info.family === "transformer"
    ? `Transformer ${info.encoder_layers}+${info.decoder_layers} layers, ${info.heads} heads`
    : `${info.cell.toUpperCase()}, ${capital(info.decoder)} decoder, ${info.scorer} attention`;
  const parts = [`${sources.join(", ")} → ${targets.join(", ")}`, arch, `step ${info.step}`];
  if (info.ensemble) parts.splice(1, 1, `ensemble of ${info.ensemble.length}`, `first member: ${arch}`);
  if (info.validation.bleu !== null) {
    parts.push(`valid BLEU ${info.validation.bleu.toFixed(1)} (${info.validation.decode})`);
  }
  ui.model.textContent = parts.join(" · ");
  describeAttentionSource(info);
  const limit = String(info.limits.max_beam);
  ui.beamSize.max = ui.nBest.max = limit;
  ui.strategy.value = info.decode.strategy;
  ui.beamSize.value = String(info.decode.beam_size);
  ui.nBest.value = String(info.decode.n_best);
  syncControls();
}

// the "Into" menu: shown for a model with several target languages (trained with target tags),
// whose requests must say which; a model with one needs no "tgt_lang", and its menu stays empty
// and hidden (its value "" sends none). Returns the target languages to name in the model line.
function setupLanguages(info) {
  ui.apiKeyControl.hidden = !info.keys_required;
  if (info.models && info.models.length > 1) return setupPairs(info);
  const targets = info.target_languages && info.target_languages.length
    ? info.target_languages : [info.languages.target];
  const several = targets.length > 1;
  const kept = ui.tgtLang.value; // a reload keeps the reader's choice where the model has it
  ui.tgtLang.replaceChildren(...(several ? targets : []).map((code) => {
    const name = languageName(code);
    return new Option(name === code ? code : `${name} (${code})`, code);
  }));
  if (several) {
    const start = [kept, info.languages.target].find((code) => targets.includes(code));
    ui.tgtLang.value = start || targets[0];
  }
  ui.tgtLangControl.hidden = !several;
  showTargetLanguage(several ? ui.tgtLang.value : targets[0]);
  setupSourceLanguages(info);
  return targets;
}

// the "From" menu: shown for a model that reads a language code before its sources (an NLLB-200,
// M2M-100 or mBART-50 import), whose requests may say which ("src_lang"); the others take none,
// and their menu stays empty and hidden
function setupSourceLanguages(info) {
  const codes = info.source_codes || [];
  const kept = ui.srcLang.value;
  ui.srcLang.replaceChildren(...codes.map((code) => {
    const name = languageName(code);
    return new Option(name === code ? code : `${name} (${code})`, code);
  }));
  if (codes.length) {
    const start = [kept, info.languages.source].find((code) => codes.includes(code));
    ui.srcLang.value = start || codes[0];
  }
  ui.srcLangControl.hidden = !codes.length;
}

// a server of several models: "From" lists every source language it reads, "Into" the languages
// the chosen one reaches (/info's "pairs", a pivot through a shared language included)
function setupPairs(info) {
  const fill = (menu, codes) => {
    const kept = menu.value;
    menu.replaceChildren(...codes.map((code) => {
      const name = languageName(code);
      return new Option(name === code ? code : `${name} (${code})`, code);
    }));
    menu.value = codes.includes(kept) ? kept : codes[0];
  };
  fill(ui.srcLang, Object.keys(info.pairs));
  const fillTargets = () => {
    fill(ui.tgtLang, info.pairs[ui.srcLang.value] || []);
    showTargetLanguage(ui.tgtLang.value);
  };
  fillTargets();
  ui.srcLang.addEventListener("change", fillTargets);
  ui.srcLangControl.hidden = ui.tgtLangControl.hidden = false;
  return Object.values(info.pairs).flat().filter((code, i, all) => all.indexOf(code) === i);
}

// the headers of every API call the page makes: JSON, and the key when the server needs one
function apiHeaders() {
  const headers = { "Content-Type": "application/json" };
  const key = ui.apiKey.value.trim();
  if (key) headers.Authorization = `Bearer ${key}`;
  return headers;
}

function showTargetLanguage(code) {
  ui.targetLabel.textContent = languageName(code);
}

// an ensemble's answers carry one member's attention or the mean over its members (nmt-serve's
// ensemble_attention): say which, beside the map
function describeAttentionSource(info) {
  const shown = info.ensemble_attention;
  ui.attentionSource.hidden = !shown;
  if (!shown) return;
  if (shown.shown === "mean") {
    const of = shown.averaged < shown.members ? ` of ${shown.members} (the others have none)` : "";
    ui.attentionSource.textContent = `attention: mean over ${shown.averaged} members${of}`;
    ui.attentionSource.title = "each member's layers and heads averaged, then the members, " +
      "with the ensemble's weights";
  } else {
    ui.attentionSource.textContent = `attention: member ${shown.shown + 1} of ${shown.members}`;
    ui.attentionSource.title = info.ensemble[shown.shown];
  }
}

function syncControls() {
  const strategy = ui.strategy.value;
  ui.beamSize.disabled = strategy !== "beam";
  ui.nBest.disabled = strategy === "greedy";
}

ui.source.addEventListener("input", () => {
  state.prefix = ""; // a new source: the model writes the whole translation again
  later();
});
ui.strategy.addEventListener("change", () => { syncControls(); translate(); });
ui.srcLang.addEventListener("change", () => {
  state.prefix = "";
  translate();
});
ui.tgtLang.addEventListener("change", () => {
  showTargetLanguage(ui.tgtLang.value);
  state.prefix = ""; // a forced start in the old language: the model writes the whole one again
  translate();
});
document.addEventListener("nmt:settings", () => later());
ui.beamSize.addEventListener("change", translate);
ui.nBest.addEventListener("change", translate);
ui.layer.addEventListener("change", drawHeatmap);
ui.head.addEventListener("change", drawHeatmap);
$("decode").addEventListener("submit", (event) => { event.preventDefault(); translate(); });

fetch("/info")
  .then((answer) => answer.json())
  .then((info) => {
    describeModel(info);
    document.dispatchEvent(new CustomEvent("nmt:info", { detail: info }));
    if (ui.source.value.trim()) translate();
  })
  .catch((err) => showError(`cannot read /info: ${err.message}`));
