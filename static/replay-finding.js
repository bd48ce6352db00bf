// Replay's finder (docs/guide/dashboard.md): block filters, search within a conversation (/, Enter,
// Shift+Enter), the next or previous problem (n / N), the shortcuts help (?) and tool
// rounds (a call's id links to its result and back; a call with no result says so).
//
// Filters work on what the page holds (CSS in replay.css hides what does not match, so
// live-arriving messages are filtered too). Everything across the whole conversation asks
// the server's find endpoint (#finder data-find), one bounded step or page at a time, and
// lands through the deep-link path of replay-windows.js: #m-SEQ, loading the window around it.
// Server text (snippets, errors) is only ever set as text, never parsed as markup.
// An ES module, loaded by the conversation page only.
import { announce, box, held, seqOf } from "./replay-shared.js";
import { reveal } from "./replay-windows.js";

function finder() { return document.getElementById("finder"); }

// "Before the end", as the find endpoint takes it: page_windows.LAST, printed on #finder.
function last() { return finder().getAttribute("data-last"); }

function messageOf(element) { return element.closest(".message"); }

// Text only, and only when it changes (the page's observer sees every change).
function setText(element, text) {
  if (element && element.textContent !== text) { element.textContent = text; }
}

// Shown under the search box and said in the page's status region (the latest only).
function say(text) {
  setText(document.getElementById("find-status"), text);
  if (text) { announce(text, "find"); }
}

// --- the find endpoint ---------------------------------------------------------------

function ask(params) {
  var root = finder();
  if (!root) { return Promise.reject(new Error("no finder on this page")); }
  var url = root.getAttribute("data-find") + "?" + new URLSearchParams(params).toString();
  return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (response) {
      var json = (response.headers.get("Content-Type") || "").indexOf("application/json") === 0;
      if (!json) { throw new Error("the server answered " + response.status); }
      return response.json().then(function (body) {
        if (!response.ok) { throw new Error(body.error || "the server answered " + response.status); }
        return body;
      });
    });
}

// One direction, step by bounded step, until a block is found or nothing is left.
function seek(kind, direction, cursor, progress) {
  var params = { kind: kind };
  if (cursor !== null) { params[direction > 0 ? "after" : "before"] = cursor; }
  return ask(params).then(function (body) {
    if (body.found) { return body.found; }
    if (body.resume === null) { return null; }
    if (progress) { progress(body.resume); }
    return seek(kind, direction, body.resume, progress);
  });
}

// --- landing on a block, in the page or through the window around it ----------------

var pending = null;  // {seq, block, callId, type, focus}: where to land once it is held

function goTo(target) {
  pending = target;
  if (document.getElementById("m-" + target.seq)) {
    land();
    return;
  }
  // The deep-link path (replay-windows.js): the hash names the message, and its window loads.
  history.replaceState(history.state, "", "#m-" + target.seq);
  reveal();
}

function blockIn(message, target) {
  var blocks = Array.prototype.slice.call(message.querySelectorAll(".record .block"));
  if (target.callId !== undefined) {
    return blocks.find(function (b) {
      return b.getAttribute("data-call-id") === target.callId && b.classList.contains(target.type);
    }) || null;
  }
  if (target.block === null || target.block === undefined) { return null; }
  return blocks.find(function (b) { return b.getAttribute("data-block") === String(target.block); }) || null;
}

function clearHit() {
  Array.prototype.forEach.call(document.querySelectorAll(".find-hit"), function (element) {
    element.classList.remove("find-hit");
  });
  if (window.CSS && CSS.highlights) { CSS.highlights.delete("replay-find"); }
}

function land() {
  if (!pending) { return; }
  var message = document.getElementById("m-" + pending.seq);
  if (!message) { return; }
  var target = pending;
  pending = null;
  // A note's hit (docs/contract.md §10) lands on the message's notes, its words marked there.
  var block = target.note ? message.querySelector(".notes") : blockIn(message, target);
  if (filterName() && !matchesFilter(message, block)) { setFilter(""); }  // shown, whatever it is
  clearHit();
  (block || message).classList.add("find-hit");
  var current = document.querySelector(".message.current");
  if (current && current !== message) { current.classList.remove("current"); }
  message.classList.add("current");
  history.replaceState(history.state, "", "#m-" + target.seq);
  if (block && target.words) { markWords(block, target.words); }
  (block || message).scrollIntoView({ block: block ? "center" : "start" });
  if (target.focus) { message.focus({ preventScroll: true }); }
}

// The words of a search, marked in the hit's text (the CSS Custom Highlight API: no
// markup is added). A hint only: the server decides what a hit is.
function markWords(block, words) {
  if (!window.CSS || !CSS.highlights || typeof Highlight === "undefined") { return; }
  var ranges = [];
  var walker = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
  var letter = /[\p{L}\p{N}\p{M}]/u;
  for (var node = walker.nextNode(); node && ranges.length < 200; node = walker.nextNode()) {
    var text = node.data.toLowerCase();
    if (text.length !== node.data.length) { continue; }
    words.forEach(function (word) {
      for (var at = text.indexOf(word); at !== -1 && ranges.length < 200; at = text.indexOf(word, at + 1)) {
        if (at > 0 && letter.test(text[at - 1])) { continue; }
        var range = new Range();
        range.setStart(node, at);
        range.setEnd(node, at + word.length);
        ranges.push(range);
      }
    });
  }
  CSS.highlights.set("replay-find", new Highlight(...ranges));
}

// Where the reader is: the hit they are on, else the current message, else the first
// message in view.
function position() {
  var hit = document.querySelector("#messages .find-hit");
  if (hit) {
    var message = messageOf(hit) || hit;
    var block = hit.classList.contains("block") ? hit.getAttribute("data-block") : null;
    return { seq: seqOf(message), block: block === null ? null : parseInt(block, 10) };
  }
  var current = document.querySelector("#messages > .message.current");
  if (current) { return { seq: seqOf(current), block: null }; }
  var inView = held().find(function (m) { return m.offsetParent && m.getBoundingClientRect().bottom > 120; });
  return inView ? { seq: seqOf(inView), block: null } : null;
}

// A cursor from the reader's place: forward includes the message they are on.
function cursorFrom(place, direction) {
  if (!place) { return null; }
  if (place.block !== null) { return place.seq + "." + place.block; }
  if (direction > 0) { return place.seq > 0 ? String(place.seq - 1) : null; }
  return String(place.seq);
}

// --- problems: n / N, and the buttons ------------------------------------------------

var busy = false;
var WHAT = { error: "Tool error", unanswered: "Tool call with no result", compaction: "Compaction" };

function problem(direction) {
  if (busy) { return; }
  busy = true;
  var place = position();
  var origin = place ? place.seq : null;
  var start = cursorFrom(place, direction);
  say("Looking for the " + (direction > 0 ? "next" : "previous") + " problem…");
  var progress = function (at) { say("Looking for problems… (at #" + parseInt(at, 10) + ")"); };
  seek("problem", direction, start, progress).then(function (found) {
    if (found || start === null) { return [found, false]; }
    // Nothing to the end (the start): go round, as a search does.
    var wrapped = seek("problem", direction, direction > 0 ? null : last(), function (at) {
      progress(at);
      if (origin !== null && (direction > 0 ? parseInt(at, 10) >= origin : parseInt(at, 10) <= origin)) {
        throw new Error("none");
      }
    });
    return wrapped.then(function (again) { return [again, true]; });
  }).then(function (outcome) {
    var found = outcome[0];
    if (!found) { say("No tool errors and no tool calls without a result in this conversation."); return; }
    say(WHAT[found.what] + " · #" + found.seq + (outcome[1] ? (direction > 0 ? " (from the start)" : " (from the end)") : ""));
    goTo({ seq: found.seq, block: found.block, focus: true });
  }).catch(function (error) {
    say(error.message === "none" ? "No tool errors and no tool calls without a result in this conversation."
      : "Finding failed: " + error.message);
  }).then(function () { busy = false; });
}

// --- filters ---------------------------------------------------------------------------

var FILTERS = {
  error: { blocks: ".block.is-error", name: "errors", one: "error" },
  tool: { blocks: ".block-tool_use, .block-tool_result", name: "tool calls", one: "tool call" },
  reasoning: { blocks: ".block-reasoning", name: "reasoning", one: "reasoning" },
  image: { blocks: ".block-image", name: "images", one: "image" }
};

function filterName() { return document.body.getAttribute("data-filter") || ""; }

function matchesFilter(message, block) {
  var filter = FILTERS[filterName()];
  if (!filter) { return true; }
  if (block) { return block.matches(filter.blocks); }
  return message.querySelector(".record :is(" + filter.blocks + ")") !== null;
}

function setFilter(name) {
  if (name && FILTERS[name]) {
    document.body.setAttribute("data-filter", name);
  } else {
    document.body.removeAttribute("data-filter");
  }
  refresh();
  var count = document.getElementById("filter-count");
  announce(name && FILTERS[name] && count ? count.textContent : "All blocks shown", "filter");
}

function summarise() {
  var summary = document.getElementById("filter-summary");
  if (!summary) { return; }
  var filter = FILTERS[filterName()];
  Array.prototype.forEach.call(document.querySelectorAll(".find-filter"), function (button) {
    button.setAttribute("aria-pressed", String(button.getAttribute("data-filter") === filterName()));
  });
  if (!filter) { summary.hidden = true; return; }
  var messages = held();
  var matching = messages.filter(function (m) { return matchesFilter(m, null); });
  var blocks = 0;
  matching.forEach(function (m) { blocks += m.querySelectorAll(".record :is(" + filter.blocks + ")").length; });
  var span = messages.length ? " (#" + seqOf(messages[0]) + "–#" + seqOf(messages[messages.length - 1]) + ")" : "";
  setText(document.getElementById("filter-count"), matching.length + " of " + messages.length +
    " messages on this page" + span + " have " + filter.name + " (" + blocks + " block" + (blocks === 1 ? "" : "s") + ")");
  var earlier = document.getElementById("filter-before");
  var later = document.getElementById("filter-after");
  if (messages.length) {
    setText(earlier, "Find " + filter.one + " before #" + seqOf(messages[0]));
    setText(later, "Find " + filter.one + " after #" + seqOf(messages[messages.length - 1]));
  }
  earlier.hidden = !(messages.length && seqOf(messages[0]) > 0);
  later.hidden = !document.getElementById("later");
  summary.hidden = false;
}

function findMore(direction) {
  var name = filterName();
  var messages = held();
  if (busy || !FILTERS[name] || !messages.length) { return; }
  busy = true;
  var edge = direction > 0 ? seqOf(messages[messages.length - 1]) : seqOf(messages[0]);
  say("Looking for " + FILTERS[name].name + (direction > 0 ? " after #" : " before #") + edge + "…");
  seek(name, direction, String(edge), null).then(function (found) {
    if (!found) {
      say("No " + FILTERS[name].name + (direction > 0 ? " after #" : " before #") + edge + ".");
      return;
    }
    say("Found " + FILTERS[name].one + " · #" + found.seq);
    goTo({ seq: found.seq, block: found.block, focus: true });
  }).catch(function (error) { say("Finding failed: " + error.message); })
    .then(function () { busy = false; });
}

// --- search within the conversation ----------------------------------------------------

var search = { q: "", hits: [], index: -1, offset: 0, total: 0, capped: false,
  moreAfter: false, moreBefore: false };

function searchBox() { return document.getElementById("find-q"); }

function searchWords(q) {
  return q.toLowerCase().split(/[^\p{L}\p{N}\p{M}]+/u).filter(function (w) { return w.length > 0; });
}

function cursorOf(hit) { return hit.seq + "." + hit.block; }

// One page of hits (after a place or from the start: direction 1; before a place: -1).
function page(direction, params) {
  params.kind = "text";
  params.q = search.q;
  return ask(params).then(function (body) {
    search.hits = body.hits;
    search.offset = body.offset;
    search.total = body.total;
    search.capped = body.capped;
    var known = body.offset !== null && !body.capped;
    if (direction > 0) {
      search.moreAfter = body.more;
      search.moreBefore = body.offset !== 0;
    } else {
      search.moreBefore = body.more;
      search.moreAfter = !known || body.offset + body.hits.length < body.total;
    }
    search.index = direction > 0 ? 0 : body.hits.length - 1;
    return body;
  });
}

// The page past the hits held, going round at the end (the start): a note says so.
function turn(direction) {
  var more = direction > 0 ? search.moreAfter : search.moreBefore;
  var edge = direction > 0 ? search.hits[search.hits.length - 1] : search.hits[0];
  var next = more && edge ? page(direction, direction > 0 ? { after: cursorOf(edge) } : { before: cursorOf(edge) })
    : Promise.resolve(null);
  return next.then(function (body) {
    if (body && search.hits.length) { return ""; }
    return page(direction, direction > 0 ? {} : { before: last() }).then(function () {
      return direction > 0 ? "(from the start)" : "(from the end)";
    });
  });
}

function showHit(note) {
  var hit = search.hits[search.index];
  var count = search.total.toLocaleString("en") + (search.capped ? "+" : "");
  var k = search.offset === null ? "?" : (search.offset + search.index + 1).toLocaleString("en");
  var kind = hit.is_error ? "error" : hit.type.replace("_", " ");
  say(k + " of " + count + " · #" + hit.seq + " " + kind + ": " + hit.snippet + (note ? " " + note : ""));
  goTo({ seq: hit.seq, block: hit.block, words: searchWords(search.q), focus: false,
    note: hit.type === "note" });
}

function step(direction) {
  var input = searchBox();
  if (!input || busy) { return; }
  var q = input.value.trim();
  if (!q) { say("Type the words to find, then Enter."); return; }
  busy = true;
  var work;
  if (q !== search.q || !search.hits.length) {
    // A new search starts where the reader is, and goes round.
    search.q = q;
    var start = cursorFrom(position(), direction);
    var first = {};
    if (start !== null) { first[direction > 0 ? "after" : "before"] = start; }
    work = page(direction, first).then(function () {
      if (search.hits.length || start === null) { return ""; }
      return page(direction, direction > 0 ? {} : { before: last() }).then(function () {
        return direction > 0 ? "(from the start)" : "(from the end)";
      });
    });
  } else if (direction > 0 && search.index + 1 < search.hits.length) {
    search.index += 1;
    work = Promise.resolve("");
  } else if (direction < 0 && search.index > 0) {
    search.index -= 1;
    work = Promise.resolve("");
  } else {
    work = turn(direction);
  }
  work.then(function (note) {
    if (!search.hits.length) {
      say("No matches in this conversation.");
      return;
    }
    showHit(note);
  }).catch(function (error) {
    search.hits = [];
    search.q = "";
    say(error.message);
  }).then(function () { busy = false; });
}

// --- tool rounds -----------------------------------------------------------------------

// Call id → message seq, from every window the page loaded (the server resolves the
// rounds whose other half a window does not hold). Maps, not objects: ids are anyone's.
function elsewhere(attribute) {
  var map = new Map();
  Array.prototype.forEach.call(document.querySelectorAll("#messages .tool-pairs"), function (element) {
    var parsed;
    try { parsed = JSON.parse(element.getAttribute(attribute) || "{}"); } catch (error) { return; }
    Object.keys(parsed).forEach(function (id) { map.set(id, parsed[id]); });
  });
  return map;
}

function setLink(section, seq, label) {
  var link = section.querySelector(".call-id");
  if (!link) { return; }
  var href = seq === null ? null : "#m-" + seq;
  if (link.getAttribute("href") === href) { return; }
  if (href === null) {
    link.removeAttribute("href");
    link.removeAttribute("title");
  } else {
    link.setAttribute("href", href);
    link.setAttribute("title", label + " in #" + seq);
  }
}

function setMarker(section, unanswered) {
  var marker = section.querySelector(".no-result");
  if (unanswered && !marker) {
    marker = document.createElement("span");
    marker.className = "no-result";
    marker.textContent = "no result";
    var link = section.querySelector(".call-id");
    if (link) { link.after(marker); } else { section.querySelector("h3").appendChild(marker); }
  } else if (!unanswered && marker) {
    marker.remove();
  }
}

// Pairs each call with its result on the page, or where the server says it is; a call
// with neither is marked. Idempotent: run after every change of what the page holds
// (a live result arriving removes its call's marker).
function pairRounds() {
  var messages = box();
  if (!messages) { return; }
  var calls = new Map();
  var results = new Map();
  Array.prototype.forEach.call(messages.querySelectorAll(":scope > .message .record .block[data-call-id]"), function (section) {
    var id = section.getAttribute("data-call-id");
    var into = section.classList.contains("block-tool_use") ? calls : results;
    if (!into.has(id)) { into.set(id, []); }
    into.get(id).push(section);
  });
  var resultsElsewhere = elsewhere("data-results");
  var callsElsewhere = elsewhere("data-calls");
  calls.forEach(function (sections, id) {
    var answers = results.get(id) || [];
    sections.forEach(function (section) {
      var seq = seqOf(messageOf(section));
      var answer = answers.find(function (r) { return seqOf(messageOf(r)) >= seq; }) || answers[0];
      var target = answer ? seqOf(messageOf(answer)) : (resultsElsewhere.has(id) ? resultsElsewhere.get(id) : null);
      setLink(section, target, "Its result");
      setMarker(section, target === null);
    });
  });
  results.forEach(function (sections, id) {
    var asked = calls.get(id) || [];
    sections.forEach(function (section) {
      var seq = seqOf(messageOf(section));
      var before = asked.filter(function (c) { return seqOf(messageOf(c)) <= seq; });
      var call = before.length ? before[before.length - 1] : asked[0];
      var target = call ? seqOf(messageOf(call)) : (callsElsewhere.has(id) ? callsElsewhere.get(id) : null);
      setLink(section, target, "Its call");
    });
  });
}

function roundOf(link) {
  var section = link.closest(".block[data-call-id]");
  if (!section) { return []; }
  var id = section.getAttribute("data-call-id");
  return Array.prototype.slice.call(document.querySelectorAll("#messages .record .block[data-call-id]"))
    .filter(function (b) { return b.getAttribute("data-call-id") === id; });
}

function highlightRound(link, on) {
  roundOf(link).forEach(function (section) { section.classList.toggle("round-pair", on); });
}

// --- the page's changes, keys and controls ---------------------------------------------

var scheduled = false;
var settled = false;

// After any change of what the page holds; a pending landing waits for htmx to settle a
// window (replay-windows.js then scrolls to its deep link first, and this lands after it).
function refresh() {
  scheduled = false;
  pairRounds();
  summarise();
  var input = searchBox();
  if (input && !input.value && search.q && document.activeElement !== input) { input.value = search.q; }
  if (settled) {
    settled = false;
    land();
  }
}

function schedule() {
  if (!scheduled) { scheduled = true; setTimeout(refresh, 0); }
}

function typing(element) {
  return element instanceof Element &&
    (element.isContentEditable || element.closest("input, textarea, select") !== null);
}

function openHelp() {
  var dialog = document.getElementById("shortcuts");
  if (dialog && !dialog.open) { dialog.showModal(); }
}

document.addEventListener("keydown", function (event) {
  if (event.ctrlKey || event.metaKey || event.altKey) { return; }
  var target = event.target;
  if (target instanceof Element && target.id === "find-q") {
    if (event.key === "Enter" && event.shiftKey) {
      event.preventDefault();
      step(-1);
    } else if (event.key === "Escape") {
      // Esc clears the box and stays in it; in an empty box it goes back to the message
      // the reader is on (never to <body>).
      event.preventDefault();
      if (target.value) {
        target.value = "";
        target.dispatchEvent(new Event("input", { bubbles: true }));
        clearHit();
        announce("Search cleared", "find");
        return;
      }
      var place = position();
      var message = place && document.getElementById("m-" + place.seq);
      if (message) { message.focus({ preventScroll: true }); }
    }
    return;
  }
  if (typing(target) || event.defaultPrevented) { return; }
  var dialog = document.getElementById("shortcuts");
  if (dialog && dialog.open) { return; }  // Esc closes it (the browser's own)
  switch (event.key) {
    case "/":
      if (!searchBox()) { return; }
      event.preventDefault();
      searchBox().focus();
      searchBox().select();
      break;
    case "n":
      if (!finder()) { return; }
      event.preventDefault();
      problem(1);
      break;
    case "N":
      if (!finder()) { return; }
      event.preventDefault();
      problem(-1);
      break;
    case "?":
      if (!document.getElementById("shortcuts")) { return; }
      event.preventDefault();
      openHelp();
      break;
    case "Escape":
      clearHit();
      break;
    default:
      break;
  }
});

document.addEventListener("submit", function (event) {
  if (event.target instanceof Element && event.target.id === "find-form") {
    event.preventDefault();
    step(1);
  }
});

document.addEventListener("input", function (event) {
  if (event.target instanceof Element && event.target.id === "find-q") {
    search.hits = [];
    search.q = "";
    say("");
  }
});

document.addEventListener("click", function (event) {
  var target = event.target;
  if (!(target instanceof Element)) { return; }
  var filter = target.closest(".find-filter");
  if (filter) { setFilter(filter.getAttribute("data-filter")); return; }
  if (target.closest("#filter-before")) { findMore(-1); return; }
  if (target.closest("#filter-after")) { findMore(1); return; }
  if (target.closest("#find-prev")) { step(-1); return; }
  if (target.closest("#problem-next")) { problem(1); return; }
  if (target.closest("#problem-prev")) { problem(-1); return; }
  if (target.closest("#shortcuts-open")) { openHelp(); return; }
  var link = target.closest("#messages .record .call-id[href]");
  if (link) {
    // To the other half of the round, loading its window when the page lacks it.
    event.preventDefault();
    var section = link.closest(".block[data-call-id]");
    var other = section.classList.contains("block-tool_use") ? "block-tool_result" : "block-tool_use";
    goTo({
      seq: parseInt(link.getAttribute("href").slice(3), 10),
      callId: section.getAttribute("data-call-id"),
      type: other,
      focus: true
    });
  }
});

["mouseover", "focusin"].forEach(function (name) {
  document.addEventListener(name, function (event) {
    var link = event.target instanceof Element && event.target.closest("#messages .record .call-id");
    if (link) { highlightRound(link, true); }
  });
});
["mouseout", "focusout"].forEach(function (name) {
  document.addEventListener(name, function (event) {
    var link = event.target instanceof Element && event.target.closest("#messages .record .call-id");
    if (!link) { return; }
    var into = event.relatedTarget;
    if (into instanceof Node && link.contains(into)) { return; }
    highlightRound(link, false);
  });
});

document.addEventListener("htmx:afterSettle", function () {
  settled = true;
  schedule();
});
document.addEventListener("DOMContentLoaded", function () {
  var main = document.querySelector("main");
  if (main) { new MutationObserver(schedule).observe(main, { childList: true, subtree: true }); }
  refresh();
});
