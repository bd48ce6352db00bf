// Windows and deep links (an ES module, imported by replay.js, replay-live.js and
// replay-finding.js; evaluated once). docs/contract.md §4 Bounds: the document holds at
// most DOCUMENT messages (page_windows.DOCUMENT, printed on #messages as data-document). A
// deep link to a message outside it loads the window around it; "earlier" and "later" load
// the windows beside, trimming the far end; each change tells the live socket (the
// "replay:window" event) what the page now holds.
import { box, held, numberFrom, seqOf } from "./replay-shared.js";

// htmx is a classic deferred script placed before every module in base.html: it has run.
const htmx = window.htmx;

function control(kind, seq) {
  // The same control the server renders for a window ("earlier" before SEQ, "later" after).
  const div = document.createElement("div");
  div.id = kind;
  div.className = kind === "later" ? "earlier later" : "earlier";
  const button = document.createElement("button");
  button.type = "button";
  button.setAttribute("hx-get", box().getAttribute("data-windows") + "&" +
    (kind === "earlier" ? "before=" : "after=") + seq);
  button.setAttribute("hx-target", "#" + kind);
  button.setAttribute("hx-swap", "outerHTML");
  button.textContent = kind === "earlier" ? "Load earlier messages (before #" + seq + ")"
    : "Load later messages (after #" + seq + ")";
  div.appendChild(button);
  return div;
}

// Drop messages beyond DOCUMENT from the start (keep: "end") or from the end (keep:
// "start"), leaving the control that loads them again. Returns how many were dropped.
export function trim(keep) {
  const messages = held();
  const extra = messages.length - numberFrom(box(), "data-document");
  if (!(extra > 0)) { return 0; }
  const dropped = keep === "end" ? messages.slice(0, extra) : messages.slice(messages.length - extra);
  dropped.forEach(function (m) { m.remove(); });
  const kind = keep === "end" ? "earlier" : "later";
  const old = document.getElementById(kind);
  if (old) { old.remove(); }
  const fresh = control(kind, keep === "end" ? seqOf(messages[extra]) : seqOf(messages[messages.length - extra - 1]));
  if (keep === "end") { box().insertBefore(fresh, box().firstChild); } else { box().appendChild(fresh); }
  if (htmx) { htmx.process(fresh); }
  return extra;
}

function changed() { document.dispatchEvent(new CustomEvent("replay:window")); }

// Deep links: #m-SEQ scrolls to that message, loading the window around it if needed.
let pendingSeq = null;

function wantedSeq() {
  const match = /^#m-(\d+)$/.exec(window.location.hash);
  return match ? parseInt(match[1], 10) : null;
}

// Shows the message the hash names; true if the hash names one (shown, or being loaded).
export function reveal() {
  const seq = wantedSeq();
  if (seq === null) { return false; }
  const element = document.getElementById("m-" + seq);
  if (element) {
    pendingSeq = null;
    element.scrollIntoView({ block: "start" });
    const current = document.querySelector(".message.current");
    if (current && current !== element) { current.classList.remove("current"); }
    element.classList.add("current");
    return true;
  }
  const messages = box();
  if (!messages || pendingSeq === seq || !htmx) { return true; }
  pendingSeq = seq;
  htmx.ajax("GET", messages.getAttribute("data-windows") + "&around=" + seq,
    { target: "#messages", swap: "innerHTML" });
  return true;
}

function atTail() {
  // A conversation opens at its tail: the latest message in view.
  if (!reveal() && box()) { window.scrollTo(0, document.documentElement.scrollHeight); }
}

document.addEventListener("DOMContentLoaded", function () {
  // Mark the first entry as htmx's, so that Back to it is restored like the pushed ones.
  if (history.state === null && box()) { history.replaceState({ htmx: true }, "", window.location.href); }
  atTail();
});
window.addEventListener("hashchange", reveal);
// Back/Forward: htmx fetches the page again (no history cache), at its tail; the entry's
// #m-SEQ is brought back as on a first load.
document.addEventListener("htmx:historyRestore", function () { pendingSeq = null; atTail(); });
// A toggle swaps the conversation in and pushes its URL without the fragment: keep the
// message the operator was on (loading its window again if the new page lacks it).
let keptHash = "";

// Trimmed as soon as a window is swapped in, not at settle (20 ms later): the document
// never holds more than DOCUMENT messages for anyone to see.
const trimmed = new WeakSet();
document.addEventListener("htmx:afterSwap", function (event) {
  const xhr = event.detail && event.detail.xhr;
  const target = event.detail && event.detail.target;
  if (!xhr || trimmed.has(xhr) || !target) { return; }
  trimmed.add(xhr);
  if (target.id === "earlier") { trim("start"); }
  if (target.id === "later") { trim("end"); }
});

const settled = new WeakSet();  // htmx fires afterSettle on every swapped element: act once
document.addEventListener("htmx:beforeRequest", function () { keptHash = window.location.hash; });
document.addEventListener("htmx:afterSettle", function (event) {
  const xhr = event.detail && event.detail.xhr;
  if (xhr) {
    if (settled.has(xhr)) { return; }
    settled.add(xhr);
  }
  const target = event.detail && event.detail.target;
  const id = target && target.id;
  if (id === "conversation" && keptHash && !window.location.hash) {
    history.replaceState(history.state, "", window.location.pathname + window.location.search + keptHash);
    reveal();
    return;
  }
  if (id === "earlier" || id === "later" || id === "messages") { changed(); }
  if (pendingSeq !== null) { reveal(); }
});
