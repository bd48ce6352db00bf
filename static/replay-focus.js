// Keyboard and screen-reader users (docs/contract.md §4, "Keyboard and screen readers"):
// when htmx replaces the part of the page that holds the focus, focus moves to where the
// reader now is instead of falling to <body>; what a swap changed is said in the page's
// status region (replay-shared.js `announce`). The pill, the live frames and the search
// box are replay-live.js and replay-finding.js.
// An ES module (deferred, after htmx): it only listens to htmx's events.
import { announce, held, seqOf } from "./replay-shared.js";

// Pointer or keys: a click already shows where the reader is, so focus moves without
// scrolling; after a key the focused element is scrolled into view.
let pointer = false;
document.addEventListener("pointerdown", function () { pointer = true; }, true);
document.addEventListener("keydown", function () { pointer = false; }, true);

// True if it took the focus (a field in a closed <details> does not).
function focusOn(element) {
  if (!element) { return false; }
  if (element.tabIndex < 0 && !element.hasAttribute("tabindex")) { element.setAttribute("tabindex", "-1"); }
  element.focus({ preventScroll: pointer });
  return document.activeElement === element;
}

function lost() {
  return !document.activeElement || document.activeElement === document.body;
}

// What the reader was on when a swap began, per request.
const before = new WeakMap();

document.addEventListener("htmx:beforeSwap", function (event) {
  const xhr = event.detail.xhr;
  const target = event.detail.target;  // the element swapped (the event's own elt)
  const active = document.activeElement;
  if (!xhr || !(target instanceof Element)) { return; }
  const was = { target: target.id, inside: active instanceof Element && target.contains(active),
    held: new Set(held().map(seqOf)),
    elt: (event.detail.requestConfig || {}).elt || null };  // what asked: a form, a button, a link
  const toggle = active instanceof Element && active.closest(".toggle-group a");
  if (toggle) {
    const group = toggle.closest(".toggle-group");
    was.group = group.getAttribute("data-group");
    was.index = Array.prototype.indexOf.call(group.querySelectorAll("a"), toggle);
  }
  const row = was.elt instanceof Element && was.elt.closest("#shares tbody tr");
  if (row) { was.row = row.id; }
  before.set(xhr, was);
});

const settled = new WeakSet();  // htmx fires afterSettle on every swapped element: act once
document.addEventListener("htmx:afterSettle", function (event) {
  const xhr = event.detail.xhr;
  const was = xhr && before.get(xhr);
  if (!was || settled.has(xhr)) { return; }
  settled.add(xhr);
  const ok = Math.floor(xhr.status / 100) === 2;
  say(was, ok);
  if (was.inside && lost()) { restore(was); }
});

// Where focus goes after each kind of swap that took it away.
function restore(was) {
  switch (was.target) {
    case "earlier":
    case "later": {
      // "Load earlier": its button again, above what it brought (else the first message it
      // brought); "Load later": the first message it brought.
      const fresh = held().filter(function (m) { return !was.held.has(seqOf(m)); });
      const again = was.target === "earlier" && document.querySelector("#earlier button");
      focusOn(again || fresh[0] || document.querySelector("#" + was.target + " button"));
      return;
    }
    case "conversation": {
      // A toggle: the same toggle in the new page (now the current one).
      const group = was.group && document.querySelector('.toggle-group[data-group="' + was.group + '"]');
      const links = group ? group.querySelectorAll("a") : [];
      if (links[was.index]) { focusOn(links[was.index]); return; }
      focusOn(document.querySelector("#conversation h1"));
      return;
    }
    case "shares":
      restoreShares(was);
      return;
    case "results":
      focusOn(document.getElementById("list-q"));
      return;
    default: {
      // A note opened for editing: its text; anything else: what replaced the target.
      const replaced = was.target && document.getElementById(was.target);
      const field = replaced && replaced.querySelector("textarea");
      if (!(focusOn(field) || focusOn(replaced)) && was.elt instanceof Element && was.elt.isConnected) {
        focusOn(was.elt);
      }
    }
  }
}

function restoreShares(was) {
  const link = document.getElementById("new-share-url");
  if (link) {  // a link was made: its field, selected for copying
    focusOn(link);
    link.select();
    return;
  }
  if (was.row) {  // a link was revoked: the next row's Revoke, else the one before, else Share
    const rows = Array.prototype.slice.call(document.querySelectorAll("#shares tbody tr"));
    const at = rows.findIndex(function (r) { return r.id === was.row; });
    const revoke = function (r) { return r.querySelector("button[type=submit]"); };
    const after = rows.slice(at + 1).find(revoke);
    const earlier = rows.slice(0, Math.max(at, 0)).reverse().find(revoke);
    const next = after || earlier;
    if (next) { focusOn(revoke(next)); return; }
  }
  focusOn(document.querySelector("#shares .share-form button[type=submit]"));
}

// What a swap says in the status region (its own words, set as text).
function say(was, ok) {
  if (was.target === "shares" && ok) {
    if (document.getElementById("new-share-url")) {
      announce("Share link created: it is shown once, in the field now focused; copy it now", "share");
    } else if (was.row) {
      announce("Share link revoked", "share");
    }
    return;
  }
  const elt = was.elt instanceof Element ? was.elt : null;
  if (was.target === "results" && elt && elt.closest(".list-search")) {
    const results = document.getElementById("results");
    if (results && results.getAttribute("data-summary")) { announce(results.getAttribute("data-summary"), "results"); }
    return;
  }
  if (ok && elt && elt.closest(".notes") && elt.matches("form, .note-delete")) {
    announce(elt.matches(".note-delete") ? "Note deleted"
      : elt.closest(".note") ? "Note saved" : "Note added", "note");
  }
}
