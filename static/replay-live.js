// Live updates over htmx's WebSocket extension (static/vendor), made gap-free:
// - every close the page did not ask for is retried (the extension alone gives up on 1000/1001);
// - on every (re)connect the page reports what it holds, and the server sends the rest;
// - each fragment carries its position (message seq, block count), so nothing is applied twice
//   and nothing goes backwards; new messages are inserted in seq order at once.
// An ES module, run after htmx and its ws extension (classic deferred scripts placed before
// it in base.html), and before htmx processes the page at DOMContentLoaded: every handler
// below is registered before the first socket opens.
import {
  announce, box as messagesBox, fetchText, held as heldMessages, seqOf, tally,
} from "./replay-shared.js";
import { trim } from "./replay-windows.js";

const htmx = window.htmx;

// The one place that leans on the ws extension's internals (htmx-ext-ws 2.0.4, see
// static/vendor): the extension reconnects (with full-jitter backoff) only when its
// `socket.onclose` handler sees 1006/1011/1012/1013, and offers no setting for that list.
// daphne closes timed-out sockets with 1000 and a restarting server says 1001: through the
// extension's documented socket factory (`htmx.createWebSocket`), the handler the
// extension assigns is intercepted and every close is reported as abnormal so the
// extension retries, except the server's final answers (4400-4499: bad toggles, signed
// out, no permission, deleted, too many sockets), passed on as they are, so the extension
// stops and the page says why. An htmx upgrade that changes this fails
// tests/browser/live/test_live.py (every close code reconnects), test_live_closes.py and
// test_share.py (final closes stop) and the source check in tests/site/test_assets.py.
function retryingSocket(url) {
  const socket = new WebSocket(url, []);
  socket.binaryType = htmx.config.wsBinaryType || "blob";
  let onclose = null;
  Object.defineProperty(socket, "onclose", {
    configurable: true,
    get: function () { return onclose; },
    set: function (handler) { onclose = handler; }
  });
  socket.addEventListener("close", function (event) {
    if (onclose) {
      onclose.call(socket, {
        type: "close", code: isFinal(event.code) ? event.code : 1006,
        originalCode: event.code, reason: event.reason, wasClean: event.wasClean
      });
    }
  });
  return socket;
}

htmx.createWebSocket = retryingSocket;

function isFinal(code) { return code >= 4400 && code <= 4499; }

// Why the server stopped this page's live updates; [sentence, offers the sign-in page].
var FINAL = {
  4400: ["Live updates stopped: this page's options are not valid. Reload it without them.", false],
  4401: ["Live updates stopped: you are signed out.", true],
  4403: ["Live updates stopped: this account may not view conversations.", true],
  4404: ["This conversation was deleted (or never existed); live updates stopped.", false],
  4410: ["This share link was revoked or has expired; live updates stopped.", false],
  4429: ["Live updates stopped: this account has too many live pages open. " +
    "Close some, then reload this one.", false]
};

function explain(code) {
  var notice = document.getElementById("live-notice");
  var known = FINAL[code] || ["Live updates stopped (code " + code + ").", false];
  setStatus("stopped");
  if (!notice) { return; }
  notice.textContent = known[0];
  notice.setAttribute("data-code", String(code));
  if (known[1]) {
    var link = document.createElement("a");
    var next = window.location.pathname + window.location.search + window.location.hash;
    link.href = notice.getAttribute("data-login-url") + "?next=" + encodeURIComponent(next);
    link.textContent = "Sign in";
    link.className = "sign-in";
    notice.appendChild(document.createTextNode(" "));
    notice.appendChild(link);
  }
  notice.hidden = false;
  announce(known[0], "live");
  if (code === 4404 || code === 4410) { disableGone(); }
}

// What no longer works once the conversation is deleted or the link revoked: the payload
// and its copies, the exports, the compaction and diff pages, sharing, loading more.
var GONE = "#copy-payload, #download-payload, #export-markdown, #context-link, #diff-link, " +
  "#shares button, #shares input, #shares select, #earlier a, #later a, .copy-projection, " +
  ".copy-record, .load-rest, .load-blocks";

function disableGone() {
  document.querySelectorAll(GONE).forEach(function (element) {
    if (element.tagName === "A") {
      element.removeAttribute("href");
      element.removeAttribute("hx-get");
      element.setAttribute("aria-disabled", "true");
    } else {
      element.disabled = true;
    }
    element.classList.add("gone");
  });
}

var opened = new WeakSet();  // socket elements that have been live at least once
var unseen = 0;  // new messages while scrolled up
var unseenBlocks = 0;  // new blocks of messages already shown, while scrolled up
var firstUnseen = null;  // the first message (seq) those are in: the pill focuses it
var socket = null;  // the conversation socket's wrapper, to report positions on
var reloading = false;

function setStatus(state) {
  var status = document.getElementById("live-status");
  if (status) {
    status.setAttribute("data-state", state);
    status.textContent = state;
  }
}

function position() {
  var held = heldMessages();
  var earlier = document.getElementById("earlier");
  var first = held.length ? seqOf(held[0]) : 0;
  if (!held.length && earlier) { first = 0; }
  var counts = [];
  held.forEach(function (m) {
    var seq = seqOf(m);
    while (first + counts.length < seq) { counts.push(-1); }  // a hole: ask for it
    counts.push(parseInt(m.getAttribute("data-blocks"), 10));
  });
  // A window away from the end ("Load later" shown) wants no later messages.
  return { type: "resume", from: first, counts: counts, tail: !document.getElementById("later") };
}

function report() {
  if (socket && messagesBox()) { socket.send(JSON.stringify(position())); }
}

function nearBottom() {
  var doc = document.documentElement;
  return window.innerHeight + window.scrollY >= doc.scrollHeight - 120;
}

function showPill() {
  var pill = document.getElementById("new-messages");
  if (!pill) { return; }
  var said = [];
  if (unseen) { said.push(unseen + (unseen === 1 ? " new message" : " new messages")); }
  if (unseenBlocks) { said.push(unseenBlocks + (unseenBlocks === 1 ? " new block" : " new blocks")); }
  pill.textContent = said.join(" · ");
  pill.hidden = said.length === 0;
  if (said.length) { announce(pill.textContent + " below", "pill"); }
}

function followTail() {
  unseen = 0;
  unseenBlocks = 0;
  firstUnseen = null;
  showPill();
  // Following a live tail: the far end goes beyond DOCUMENT messages (the server keeps
  // the same span live for this socket).
  trim("end");
  window.scrollTo(0, document.documentElement.scrollHeight);
}

function reloadWindow(url) {
  // More went by than frames carry: fetch the tail window over HTTP, then report it.
  if (reloading || !messagesBox()) { return; }
  reloading = true;
  var follow = nearBottom();
  htmx.ajax("GET", url, { target: "#messages", swap: "innerHTML" }).then(function () {
    reloading = false;
    if (follow) { followTail(); }
  }, function () { reloading = false; });
}

// The fragment's markup for htmx to parse again. Parsing drops the newline that opens a
// <pre> and serialising does not put it back, so without one added here a text that
// starts with a newline would show one fewer live than after a reload.
function markup(node) {
  node.querySelectorAll("pre").forEach(function (pre) {
    pre.insertBefore(document.createTextNode("\n"), pre.firstChild);
  });
  return node.outerHTML;
}

function shownBlocks(message) {
  return message.querySelectorAll(".record > section.block").length;
}

function numberOr(element, attribute) {
  return parseInt(element.getAttribute(attribute), 10) || 0;
}

// A message the reader had unfolded past its first blocks ("Load more blocks") comes back
// folded in a live frame: its blocks are loaded again, a page at a time, up to as many as the
// reader had, each once and in order. A frame that replaces it meanwhile carries the count on.
function unfoldTo(seq, wanted) {
  var message = document.getElementById("m-" + seq);
  if (!message || shownBlocks(message) >= wanted) { return; }
  var button = message.querySelector(".record > .block-fold .load-blocks");
  if (!button) { return; }
  message.setAttribute("data-unfolded", String(wanted));
  var fold = button.closest(".block-fold");
  fetchText(button.getAttribute("data-url"))
    .then(function (html) {
      if (!fold.isConnected) { return; }  // a later frame replaced the message: it goes on
      var fragment = document.createElement("template");
      fragment.innerHTML = html;  // the page's own partial, escaped by the server
      fold.replaceWith(fragment.content);
      unfoldTo(seq, wanted);
    })
    .catch(function () { /* the fold stays, with its button */ });
}

// Applies one message fragment: "added" (a new message), a count of new blocks of a
// message already shown, or 0 (nothing new).
function applyMessage(node) {
  var seq = seqOf(node);
  var blocks = parseInt(node.getAttribute("data-blocks"), 10);
  var existing = document.getElementById("m-" + seq);
  if (existing) {
    var had = parseInt(existing.getAttribute("data-blocks"), 10);
    if (had >= blocks) { return 0; }
    var wasCurrent = existing.classList.contains("current");
    var focused = existing.contains(document.activeElement) ? document.activeElement : null;
    var notes = existing.querySelector(".notes");
    var unfolded = Math.max(shownBlocks(existing), numberOr(existing, "data-unfolded"));
    htmx.swap(existing, markup(node), { swapStyle: "outerHTML" });
    keepNoteForms(notes, document.getElementById("m-" + seq));
    if (wasCurrent) { document.getElementById("m-" + seq).classList.add("current"); }
    keepFocus(focused, document.getElementById("m-" + seq));
    unfoldTo(seq, unfolded);
    return blocks - had;
  }
  var held = heldMessages();
  if (held.length && seq < seqOf(held[0])) {
    return 0;  // before the loaded window: "Load earlier" will bring it
  }
  if (held.length && document.getElementById("later") &&
      seq > seqOf(held[held.length - 1])) {
    return 0;  // after a window away from the end: "Load later" will bring it
  }
  var next = null;
  for (var i = 0; i < held.length; i++) {
    if (seqOf(held[i]) > seq) { next = held[i]; break; }
  }
  if (next) {
    htmx.swap(next, markup(node), { swapStyle: "beforebegin" });
  } else {
    htmx.swap(messagesBox(), markup(node), { swapStyle: "beforeend" });
  }
  return "added";
}

// A share link was revoked or expired (docs/contract.md §8): the page says so; its socket is closed.
function applyShareNotice(node) {
  var existing = document.getElementById("share-notice");
  if (existing) { existing.replaceWith(node); }
  if (node.getAttribute("data-state") !== "active") {
    setStatus("stopped");
    announce(node.textContent, "share");
  }
}

// A message's notes changed (docs/contract.md §10): its list is replaced, except a note
// being edited in this page, which keeps its form (and what was typed); the add form
// below the list is left as it is.
function applyNotes(node) {
  var existing = document.getElementById(node.id);
  var list = existing && existing.querySelector(".note-list");
  var fresh = node.querySelector(".note-list");
  if (!list || !fresh) { return; }
  var editing = Array.prototype.slice.call(list.querySelectorAll(".note.editing"));
  var focused = list.contains(document.activeElement) ? document.activeElement : null;
  htmx.swap(list, markup(fresh), { swapStyle: "outerHTML" });
  var swapped = existing.querySelector(".note-list");
  editing.forEach(function (item) {
    var same = swapped && swapped.querySelector("#" + item.id);
    if (same) { same.replaceWith(item); htmx.process(item); }  // the swap cleaned it up
  });
  keepFocus(focused, existing);
}

// A live change replaced what held the focus (a message that grew, a note list): the focus
// goes back to the element that had it if it was kept (a note being written), else to the
// replacement; never to <body>, and the page does not move.
function keepFocus(focused, replacement) {
  var active = document.activeElement;
  if (!focused || (active && active !== document.body && active.isConnected)) { return; }
  var target = focused.isConnected ? focused : replacement;
  if (!target) { return; }
  if (target === replacement && !target.hasAttribute("tabindex")) { target.setAttribute("tabindex", "-1"); }
  target.focus({ preventScroll: true });
}

// A message that grew is replaced whole: a note being written or edited in it keeps its
// form, and what was typed there, in the new one.
function keepNoteForms(old, article) {
  var fresh = article && article.querySelector(".notes");
  if (!old || !fresh) { return; }
  var adding = old.querySelector(".note-add");
  var blank = fresh.querySelector(".note-add");
  // Kept only while in use (open, or with something typed); its block choices are the
  // fresh form's, since the message may have grown a block.
  var inUse = adding && (adding.open || Array.prototype.some.call(
    adding.querySelectorAll("textarea, input[type=text]"), function (f) { return f.value; }));
  if (inUse && blank) {
    var choice = adding.querySelector("select");
    var offered = blank.querySelector("select");
    if (choice && offered) {
      var chosen = choice.value;
      choice.replaceChildren.apply(choice, Array.prototype.map.call(
        offered.options, function (o) { return o.cloneNode(true); }));
      choice.value = chosen;
    }
    blank.replaceWith(adding);
    htmx.process(adding);
  }
  old.querySelectorAll(".note.editing").forEach(function (item) {
    var same = fresh.querySelector("#" + item.id);
    if (same) { same.replaceWith(item); htmx.process(item); }
  });
}

function applyAlerts(node) {
  // The header's open alerts (docs/contract.md §11), replaced whole; an open list stays open.
  var existing = document.getElementById("alerts");
  if (!existing) { return; }
  var wasOpen = existing.querySelector("details[open]");
  var panel = node.querySelector("details");
  if (wasOpen && panel) { panel.setAttribute("open", ""); }
  htmx.swap(existing, markup(node), { swapStyle: "outerHTML" });
}

function applyTotals(node) {
  // #totals, #pressure and #next-summary: swapped in only when they count more than the page shows.
  var totals = document.getElementById(node.id);
  if (!totals) { return; }
  var newer = parseInt(node.getAttribute("data-messages"), 10) >
    parseInt(totals.getAttribute("data-messages"), 10) ||
    parseInt(node.getAttribute("data-blocks"), 10) >
    parseInt(totals.getAttribute("data-blocks"), 10);
  if (newer) { htmx.swap(totals, markup(node), { swapStyle: "outerHTML" }); }
}

function applyRow(node) {
  var body = document.querySelector("#results tbody");
  if (!body) { return; }
  var existing = document.getElementById(node.id);
  if (node.hasAttribute("data-removed")) {  // the conversation was deleted
    if (existing) { existing.remove(); tally("conversation deleted", "conversations deleted", 1); }
    return;
  }
  if (existing) {
    if (existing.getAttribute("data-updated") > node.getAttribute("data-updated")) { return; }
    existing.remove();
    tally("conversation updated", "conversations updated", 1);
  } else {
    tally("new conversation", "new conversations", 1);
  }
  var empty = document.querySelector("#results > p.empty");
  if (empty) { empty.remove(); }
  htmx.swap(body, markup(node), { swapStyle: "afterbegin" });
}

document.addEventListener("htmx:wsConnecting", function (event) {
  setStatus(opened.has(event.target) ? "reconnecting" : "connecting");
});
document.addEventListener("htmx:afterSwap", function (event) {
  // A toggle swaps the whole conversation in: its pill starts from nothing.
  if (event.target instanceof Element && event.target.id === "conversation") {
    unseen = 0;
    unseenBlocks = 0;
    firstUnseen = null;
  }
});
document.addEventListener("htmx:wsOpen", function (event) {
  var reconnected = opened.has(event.target);
  opened.add(event.target);
  setStatus("live");
  if (messagesBox()) {
    socket = event.detail.socketWrapper;
    reloading = false;
    report();
  } else if (reconnected && event.target.id === "results") {
    // The list has no positions to report: after a gap, fetch it again (the fresh
    // section brings its own socket).
    htmx.ajax("GET", window.location.pathname + window.location.search,
      { target: "#results", swap: "outerHTML" });
  }
});
document.addEventListener("htmx:wsClose", function (event) {
  var close = event.detail && event.detail.event;
  var code = close ? (close.originalCode || close.code) : 0;
  if (isFinal(code)) {
    explain(code);
    return;
  }
  setStatus(navigator.onLine === false ? "offline" : "reconnecting");
});
window.addEventListener("offline", function () { setStatus("offline"); });

document.addEventListener("htmx:wsBeforeMessage", function (event) {
  event.preventDefault();  // applied here, in order and at most once
  var template = document.createElement("template");
  template.innerHTML = event.detail.message;
  var follow = nearBottom();
  var added = 0;
  var grown = 0;
  var first = null;  // the first message added or grown
  Array.prototype.slice.call(template.content.children).forEach(function (node) {
    if (node.classList.contains("message")) {
      var applied = applyMessage(node);
      if (applied === "added") { added += 1; } else { grown += applied; }
      if (applied && (first === null || seqOf(node) < first)) { first = seqOf(node); }
    } else if (node.classList.contains("notes")) {
      applyNotes(node);
    } else if (node.id === "totals" || node.id === "pressure" || node.id === "next-summary") {
      applyTotals(node);
    } else if (node.classList.contains("row")) {
      applyRow(node);
    } else if (node.id === "reload-window") {
      reloadWindow(node.getAttribute("data-url"));
    } else if (node.id === "share-notice") {
      applyShareNotice(node);
    } else if (node.id === "alerts") {
      applyAlerts(node);
    }
  });
  if (!added && !grown) { return; }
  // At the bottom the page follows every change, new blocks included.
  if (follow) {
    followTail();
    tally("new message", "new messages", added);
    tally("new block", "new blocks", grown);
  } else {
    unseen += added;
    unseenBlocks += grown;
    if (firstUnseen === null || first < firstUnseen) { firstUnseen = first; }
    showPill();
  }
});
// The page loaded, trimmed or reloaded a window: the socket keeps exactly that live.
document.addEventListener("replay:window", report);

document.addEventListener("click", function (event) {
  if (event.target instanceof Element && event.target.closest("#new-messages")) {
    // Focus goes with the reader (the pill hides): to the first new message.
    var first = firstUnseen !== null && document.getElementById("m-" + firstUnseen);
    followTail();
    if (first) { first.focus(); }
  }
});
window.addEventListener("scroll", function () {
  if ((unseen || unseenBlocks) && nearBottom()) { unseen = 0; unseenBlocks = 0; firstUnseen = null; showPill(); }
}, { passive: true });
