// Helpers the page scripts share (an ES module, imported, never loaded by a <script> tag
// of its own): what the page holds, fetching a text, writing to the clipboard, a button's
// brief confirmation, the page's one status region. No side effects on import.

// The conversation's message column (absent on the list), and the messages it holds.
export function box() { return document.getElementById("messages"); }

export function held() {
  const messages = box();
  return messages ? Array.prototype.slice.call(messages.querySelectorAll(":scope > .message")) : [];
}

export function seqOf(element) { return parseInt(element.getAttribute("data-seq"), 10); }

// A number the server printed on `element` (a data- attribute computed in Python).
export function numberFrom(element, attribute) {
  return element ? parseInt(element.getAttribute(attribute), 10) : NaN;
}

// A same-origin GET answered as text; rejects on any status but 2xx.
export function fetchText(url) {
  return fetch(url, { credentials: "same-origin" }).then(function (response) {
    if (!response.ok) { throw new Error("HTTP " + response.status); }
    return response.text();
  });
}

export function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text);
  }
  // Plain-HTTP fallback: a hidden textarea and execCommand.
  return new Promise(function (resolve, reject) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (ok) { resolve(); } else { reject(new Error("copy refused")); }
  });
}

// Says `text` on `button` for a moment; its own label (kept in data-text, so that a second
// click during the first flash does not make "Copied" the label) comes back.
export function flash(button, text) {
  announce(text, "flash");
  const original = button.getAttribute("data-text") || button.textContent;
  button.setAttribute("data-text", original);
  button.textContent = text;
  setTimeout(function () { button.textContent = original; }, 1500);
}

// The page's one polite live region (#announce in base.html, role="status"): short
// summaries for screen readers, written as text, at most once a second, never moving focus.
// Counts add up until the next write ("3 new messages"); a text replaces the earlier
// one of its `key` ("find", "flash"), so a burst of changes is said once, summarised.
const SAY_EVERY = 1000;  // ms between two writes
const counted = new Map();  // the singular phrase → {many, n}
const said = new Map();  // key → the latest text of that kind
let timer = 0;
let lastSaid = -Infinity;

export function announce(text, key) {
  const name = key || text;
  said.delete(name);  // re-inserted: said after the texts before it
  said.set(name, String(text));
  soon();
}

// `n` more of something: "1 new message", "3 new messages".
export function tally(one, many, n) {
  if (!(n > 0)) { return; }
  const count = counted.get(one);
  counted.set(one, { many: many, n: (count ? count.n : 0) + n });
  soon();
}

function soon() {
  if (timer) { return; }
  timer = setTimeout(say, Math.max(0, lastSaid + SAY_EVERY - Date.now()));
}

function say() {
  timer = 0;
  const parts = [];
  counted.forEach(function (count, one) { parts.push(count.n + " " + (count.n === 1 ? one : count.many)); });
  said.forEach(function (text) { if (text) { parts.push(text); } });
  counted.clear();
  said.clear();
  const region = document.getElementById("announce");
  if (!region || !parts.length) { return; }
  lastSaid = Date.now();
  let text = parts.join(". ");
  // The same words again (a second "Copied") are a change too: a screen reader says them.
  if (region.textContent === text) { text += "\u00a0"; }
  region.textContent = text;
}
