// Reading a conversation (docs/guide/dashboard.md): compact mode, tool output collapsed or expanded as a
// whole, fold labels kept true after "Load the rest", local times with UTC on hover, and
// per-message copies of the projection and of the record, fetched from the server on click.
// The server's HTML stays deterministic (live frames equal a reload); everything that
// depends on this browser (its zone, its clock, its choices) is applied here, to what the
// page holds and to whatever arrives later (live frames, windows, toggle swaps).
// An ES module (deferred: it runs before DOMContentLoaded, after the document is parsed).
import { copyText, fetchText, flash } from "./replay-shared.js";

var root = document.documentElement;

// --- Compact mode: a class on <html>, remembered in this browser, no server round trip.
var COMPACT_KEY = "replay.compact";

function stored(key) {
  try { return window.localStorage.getItem(key); } catch (e) { return null; }
}

function store(key, value) {
  try {
    if (value === null) { window.localStorage.removeItem(key); } else { window.localStorage.setItem(key, value); }
  } catch (e) { /* storage refused (private mode): the choice lasts for this page */ }
}

// At once, before the first layout of the messages: the page opens at its tail.
if (stored(COMPACT_KEY) === "1") { root.classList.add("compact"); }

// --- Tool output: "" (as served), "collapsed" (every tool result down to its header) or
// "expanded" (every fold open); kept while the page lives, applied to what arrives.
var mode = "";

function setFold(button, open) {
  var pre = button.previousElementSibling;
  if (!pre || !pre.classList.contains("fold")) { return; }
  if (!button.hasAttribute("data-label")) { button.setAttribute("data-label", button.textContent); }
  pre.classList.toggle("folded", !open);
  button.textContent = open ? "show less" : button.getAttribute("data-label");
}

function setCollapsed(section, collapsed) {
  section.classList.toggle("collapsed", collapsed);
  var toggle = section.querySelector(".output-toggle");
  if (toggle) { toggle.setAttribute("aria-expanded", collapsed ? "false" : "true"); }
}

function each(scope, selector, action) {
  var found = scope.matches && scope.matches(selector) ? [scope] : [];
  Array.prototype.push.apply(found, scope.querySelectorAll(selector));
  found.forEach(action);
}

function apply(scope, wanted) {
  if (wanted === "collapsed") {
    each(scope, ".record .block-tool_result", function (s) { setCollapsed(s, true); });
    // The projection of a message of tool results folds too (its prose holds them).
    each(scope, ".message", function (m) {
      if (!m.querySelector(".record .block-tool_result")) { return; }
      m.classList.add("output-collapsed");  // its projection folds to a few lines
      m.querySelectorAll(".projection .show-all").forEach(function (b) { setFold(b, false); });
    });
  } else if (wanted === "expanded") {
    each(scope, ".message.output-collapsed", function (m) { m.classList.remove("output-collapsed"); });
    each(scope, ".block-tool_result.collapsed", function (s) { setCollapsed(s, false); });
    each(scope, ".show-all", function (b) { setFold(b, true); });
    each(scope, ".block-reasoning details", function (d) { d.open = true; });
  } else {  // back to the page as served
    each(scope, ".message.output-collapsed", function (m) { m.classList.remove("output-collapsed"); });
    each(scope, ".block-tool_result.collapsed", function (s) { setCollapsed(s, false); });
    each(scope, ".show-all", function (b) { setFold(b, false); });
    each(scope, ".block-reasoning details", function (d) { d.open = false; });
  }
}

function syncButtons() {
  var compact = document.getElementById("compact-toggle");
  if (compact) { compact.setAttribute("aria-pressed", root.classList.contains("compact") ? "true" : "false"); }
  var collapse = document.getElementById("collapse-tools");
  if (collapse) { collapse.setAttribute("aria-pressed", mode === "collapsed" ? "true" : "false"); }
  var expand = document.getElementById("expand-all");
  if (expand) { expand.setAttribute("aria-pressed", mode === "expanded" ? "true" : "false"); }
}

function setMode(wanted) {
  var messages = document.getElementById("messages");
  mode = wanted;
  if (messages) {
    apply(messages, "");  // from the page as served, whatever was open or collapsed
    if (wanted) { apply(messages, wanted); }
  }
  syncButtons();
}

// --- Fold labels: after "Load the rest" the block holds its whole text; say so. Only the
// browser has that text, so its size is formatted here: the one JS copy of
// conversations/core/preview.py::human_size (keep the two alike).
function humanSize(n) {
  if (n >= 1000000) { return (n / 1000000).toFixed(1) + " MB"; }
  if (n >= 1000) { return (n / 1000).toFixed(1) + " kB"; }
  return n.toLocaleString("en-US") + " bytes";
}

function sizeNote(text) {
  var lines = text ? text.split("\n").length - (text.charAt(text.length - 1) === "\n" ? 1 : 0) : 0;
  var size = humanSize(new TextEncoder().encode(text).length);
  return lines > 1 ? lines.toLocaleString("en-US") + " lines, " + size : size;
}

function relabel(container) {
  // `container` lost its "Truncated" note: its <pre> now holds the whole text.
  var pre = container.querySelector("pre");
  if (!pre) { return; }
  var note = sizeNote(pre.textContent);
  var button = container.querySelector(".show-all");
  if (button) {
    button.setAttribute("data-label", "show all " + note);
    if (pre.classList.contains("folded")) { button.textContent = "show all " + note; }
  }
  var toggle = container.querySelector(".output-toggle");
  if (toggle) { toggle.textContent = note; }
  var summary = container.querySelector("summary .size-note");
  if (summary) { summary.textContent = "(" + note + ")"; }
}

// --- Times: the server writes UTC; the page shows the viewer's zone, UTC on hover, and
// "just now" / "N min ago" for the last hour (kept current by a timer).
var ZONE = (function () {
  try { return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time"; } catch (e) { return "local time"; }
})();

function two(n) { return (n < 10 ? "0" : "") + n; }

function local(d) {
  return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " +
    two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
}

function utc(d) {
  return d.getUTCFullYear() + "-" + two(d.getUTCMonth() + 1) + "-" + two(d.getUTCDate()) + " " +
    two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + ":" + two(d.getUTCSeconds()) + " UTC";
}

function relative(d, now) {
  var seconds = (now - d.getTime()) / 1000;
  if (seconds < -60 || seconds >= 3600) { return ""; }  // a clock ahead of ours, or older
  if (seconds < 60) { return "just now"; }
  return Math.floor(seconds / 60) + " min ago";
}

// The list's "last activity": always relative, in the largest unit, as the server says it.
var UNITS = [[86400 * 365, "year"], [86400 * 30, "month"], [86400 * 7, "week"], [86400, "day"],
  [3600, "hour"], [60, "minute"]];

function ago(d, now) {
  var seconds = (now - d.getTime()) / 1000;
  if (seconds < 60) { return "just now"; }
  for (var i = 0; i < UNITS.length; i++) {
    var n = Math.floor(seconds / UNITS[i][0]);
    if (n >= 1) { return n + "\u00a0" + UNITS[i][1] + (n === 1 ? "" : "s") + " ago"; }
  }
  return "just now";
}

function localise(time, now) {
  var d = new Date(time.getAttribute("datetime"));
  if (isNaN(d.getTime())) { return; }
  var exact = local(d);
  var always = time.classList.contains("ago");
  var recent = always ? ago(d, now) : relative(d, now);
  var text = recent || exact;
  var title = exact + " (" + ZONE + ") · " + utc(d);
  var stored = time.getAttribute("data-stored");  // a source's own time, stored later
  if (stored) {
    var at = new Date(stored);
    title = "source time " + title + (isNaN(at.getTime()) ? "" : " · stored " + utc(at));
  }
  if (time.textContent !== text) { time.textContent = text; }
  if (time.getAttribute("title") !== title) { time.setAttribute("title", title); }
  time.setAttribute("data-local", recent ? "relative" : "exact");
}

function localiseAll(scope) {
  var now = Date.now();
  each(scope, "time.local[datetime]", function (t) { localise(t, now); });
}

setInterval(function () {
  var now = Date.now();
  document.querySelectorAll('time.local[data-local="relative"]').forEach(function (t) { localise(t, now); });
}, 20000);

// --- What arrives later: live frames, windows, a toggle's swap of #conversation.
function arrived(node) {
  if (node.nodeType !== 1) { return; }
  localiseAll(node);
  if (mode && (node.matches(".message, #messages, #conversation") || node.querySelector(".message"))) {
    apply(node, mode);
  }
  if (node.id === "conversation" || node.querySelector("#compact-toggle")) { syncButtons(); }
}

new MutationObserver(function (records) {
  records.forEach(function (record) {
    record.addedNodes.forEach(arrived);
    record.removedNodes.forEach(function (node) {
      if (node.nodeType === 1 && node.classList.contains("truncated") && record.target.isConnected) {
        relabel(record.target);
      }
    });
  });
}).observe(root, { childList: true, subtree: true });

// --- Copies: fetched on click (a message may be megabytes), written as text.
function copyFrom(url) {
  var text = fetchText(url);
  if (window.ClipboardItem && navigator.clipboard && navigator.clipboard.write && window.isSecureContext) {
    // A promised item keeps the click's permission while the body downloads.
    var item = new window.ClipboardItem({
      "text/plain": text.then(function (t) { return new Blob([t], { type: "text/plain" }); })
    });
    return navigator.clipboard.write([item]);
  }
  return text.then(copyText);  // the clipboard, or plain HTTP's fallback
}

document.addEventListener("click", function (event) {
  var target = event.target;
  if (!(target instanceof Element)) { return; }
  var copy = target.closest(".copy-record, .copy-projection");
  if (copy) {
    copyFrom(copy.getAttribute("data-url")).then(
      function () { flash(copy, "Copied"); },
      function () { flash(copy, "Copy failed"); }
    );
    return;
  }
  var toggle = target.closest(".output-toggle");
  if (toggle) {
    var section = toggle.closest(".block");
    setCollapsed(section, !section.classList.contains("collapsed"));
    return;
  }
  if (target.closest("#compact-toggle")) {
    var on = root.classList.toggle("compact");
    store(COMPACT_KEY, on ? "1" : null);
    syncButtons();
    return;
  }
  if (target.closest("#collapse-tools")) { setMode(mode === "collapsed" ? "" : "collapsed"); return; }
  if (target.closest("#expand-all")) { setMode(mode === "expanded" ? "" : "expanded"); }
});

function start() {
  localiseAll(document.body);
  syncButtons();
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", start);
} else {
  start();
}
