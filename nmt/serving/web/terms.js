// The nmt-serve page's "must include / must avoid" field: phrases, separated by ";", that every
// translation contains (the API's "constraints", beam search only) or never contains ("banned").
// While a box holds a phrase, each request app.js sends carries it: app.js dispatches the body as
// "nmt:request" before sending it, and this script adds the two keys. An edit asks for a new
// translation by "nmt:settings". A must-include phrase switches a greedy or sampling search to
// beam (once, saying so); a reader who then picks greedy again is told why the server refuses.
// Under the translation, a line names the phrases it met; app.js marks them in the text and draws
// each tree node's progress.
"use strict";

(() => {
  const byId = (id) => document.getElementById(id);
  const field = {
    include: byId("must-include"), avoid: byId("must-avoid"), note: byId("terms-note"),
    met: byId("terms-met"), strategy: byId("strategy"),
  };
  let switchedFrom = null; // the strategy this script replaced by beam, until the reader picks one
  let switching = false; // true while this script's own "change" of the strategy is dispatched

  // "red apples; two birds" -> ["red apples", "two birds"]; blank phrases are dropped
  const phrases = (input) => input.value.split(";").map((p) => p.trim()).filter(Boolean);

  document.addEventListener("nmt:request", (event) => {
    const body = event.detail;
    const include = phrases(field.include);
    const avoid = phrases(field.avoid);
    if (include.length) body.constraints = include;
    if (avoid.length) body.banned = avoid;
  });

  // --- the search they need --------------------------------------------------------------------

  function showNote() {
    const needed = phrases(field.include).length > 0;
    const strategy = field.strategy.value;
    let text = "";
    if (needed && strategy !== "beam") {
      text = `Must-include phrases need beam search, not ${strategy}: choose beam under Search, ` +
        "or clear them.";
    } else if (needed && switchedFrom) {
      text = `Search switched from ${switchedFrom} to beam: must-include phrases need it.`;
    }
    field.note.textContent = text;
    field.note.hidden = !text;
  }

  // a must-include phrase while the search is greedy or sampling: choose beam, as the reader would
  // (app.js's own "change" listener translates again); true when it did
  function switchToBeam() {
    const strategy = field.strategy.value;
    if (!phrases(field.include).length || strategy === "beam") return false;
    switchedFrom = strategy;
    field.strategy.value = "beam";
    switching = true;
    try {
      field.strategy.dispatchEvent(new Event("change"));
    } finally {
      switching = false;
    }
    return true;
  }

  field.include.addEventListener("input", () => {
    if (!phrases(field.include).length) switchedFrom = null;
    if (!switchToBeam()) document.dispatchEvent(new CustomEvent("nmt:settings"));
    showNote();
  });
  field.avoid.addEventListener("input", () => {
    document.dispatchEvent(new CustomEvent("nmt:settings"));
  });
  field.strategy.addEventListener("change", () => {
    if (!switching) switchedFrom = null; // the reader's own choice stands
    showNote();
  });
  // /info sets the server's default search: a phrase kept in the box (a reload) still needs beam
  document.addEventListener("nmt:info", () => {
    switchToBeam();
    showNote();
  });

  // --- what the translation met ----------------------------------------------------------------

  // met: the translation's "constraints", [{phrase, pieces, chars}], each met by construction
  document.addEventListener("nmt:translation", (event) => {
    const met = event.detail && event.detail.constraints;
    field.met.hidden = !met || !met.length;
    if (field.met.hidden) return;
    const marked = met.filter((c) => Array.isArray(c.chars)).map((c) => `“${c.phrase}”`);
    const unmarked = met.filter((c) => !Array.isArray(c.chars)).map((c) => `“${c.phrase}”`);
    const parts = [];
    if (marked.length) parts.push(`Includes ${marked.join(", ")} (highlighted)`);
    if (unmarked.length) {
      parts.push(`Includes ${unmarked.join(", ")} (not highlighted: its pieces do not map ` +
        "onto the text)");
    }
    field.met.textContent = parts.join(" · ");
  });
})();
