// Replay's page behaviour: copy and download, deep links, folding, j/k navigation.
// No inline scripts (the CSP forbids them); htmx swaps are picked up via its events.
(function () {
  "use strict";

  function flash(button, text) {
    var original = button.textContent;
    button.textContent = text;
    setTimeout(function () { button.textContent = original; }, 1500);
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain-HTTP fallback: a hidden textarea and execCommand.
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "offscreen";
      document.body.appendChild(area);
      area.select();
      var ok = document.execCommand("copy");
      area.remove();
      if (ok) { resolve(); } else { reject(new Error("copy refused")); }
    });
  }
  window.replayCopy = copyText;  // replay-reading.js copies through it too

  function messageUrl(seq) {
    var url = new URL(window.location.href);
    url.hash = "m-" + seq;
    return url.toString();
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (!(target instanceof Element)) { return; }
    var copy = target.closest("#copy-payload");
    if (copy) {
      fetch(copy.getAttribute("data-url"), { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(copyText)
        .then(function () { flash(copy, "Copied"); })
        .catch(function () { flash(copy, "Copy failed"); });
      return;
    }
    var share = target.closest(".copy-share");
    if (share) {
      var field = document.getElementById(share.getAttribute("data-target"));
      copyText(field.value).then(
        function () { flash(share, "Copied"); },
        function () { field.select(); flash(share, "Copy failed: select and copy"); }
      );
      return;
    }
    var permalink = target.closest(".permalink");
    if (permalink) {
      event.preventDefault();
      var seq = permalink.closest(".message").getAttribute("data-seq");
      history.replaceState(history.state, "", "#m-" + seq);
      copyText(messageUrl(seq)).then(
        function () { flash(permalink, "#" + seq + " · link copied"); },
        function () { flash(permalink, "#" + seq + " · copy failed"); }
      );
      return;
    }
    var rest = target.closest(".load-rest");
    if (rest) {
      // The whole text, served as text/plain, set as text (never parsed as markup).
      var note = rest.closest(".truncated");
      var pre = note.previousElementSibling;
      while (pre && pre.tagName !== "PRE") {
        pre = pre.tagName === "DETAILS" ? pre.querySelector("pre") : pre.previousElementSibling;
      }
      rest.disabled = true;
      fetch(rest.getAttribute("data-url"), { credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.text();
        })
        .then(function (text) {
          pre.textContent = text;
          note.remove();
        })
        .catch(function () { rest.disabled = false; flash(rest, "Loading failed"); });
      return;
    }
    var more = target.closest(".show-all");
    if (more) {
      // The server's label says how much is folded ("show all 40 lines, 1.2 kB"): kept.
      if (!more.hasAttribute("data-label")) { more.setAttribute("data-label", more.textContent); }
      var folded = more.previousElementSibling;
      var open = folded.classList.toggle("folded") === false;
      more.textContent = open ? "show less" : more.getAttribute("data-label");
    }
  });

  // Windows (docs/contract.md §4 Bounds): the document holds at most DOCUMENT messages. A deep link to
  // a message outside it loads the window around it; "earlier" and "later" load the windows
  // beside, trimming the far end; each change tells the live socket what the page now holds.
  var DOCUMENT = 300;

  function box() { return document.getElementById("messages"); }

  function held() {
    var messages = box();
    return messages ? Array.prototype.slice.call(messages.querySelectorAll(":scope > .message")) : [];
  }

  function seqOf(element) { return parseInt(element.getAttribute("data-seq"), 10); }

  function control(kind, seq) {
    // The same control the server renders for a window ("earlier" before SEQ, "later" after).
    var div = document.createElement("div");
    div.id = kind;
    div.className = kind === "later" ? "earlier later" : "earlier";
    var button = document.createElement("button");
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
  function trim(keep) {
    var messages = held();
    var extra = messages.length - DOCUMENT;
    if (extra <= 0) { return 0; }
    var dropped = keep === "end" ? messages.slice(0, extra) : messages.slice(messages.length - extra);
    dropped.forEach(function (m) { m.remove(); });
    var kind = keep === "end" ? "earlier" : "later";
    var old = document.getElementById(kind);
    if (old) { old.remove(); }
    var fresh = control(kind, keep === "end" ? seqOf(messages[extra]) : seqOf(messages[messages.length - extra - 1]));
    if (keep === "end") { box().insertBefore(fresh, box().firstChild); } else { box().appendChild(fresh); }
    if (window.htmx) { window.htmx.process(fresh); }
    return extra;
  }

  function changed() { document.dispatchEvent(new CustomEvent("replay:window")); }

  window.replayWindow = { trim: trim, changed: changed, DOCUMENT: DOCUMENT };

  // Deep links: #m-SEQ scrolls to that message, loading the window around it if needed.
  var pendingSeq = null;

  function wantedSeq() {
    var match = /^#m-(\d+)$/.exec(window.location.hash);
    return match ? parseInt(match[1], 10) : null;
  }

  function reveal() {
    var seq = wantedSeq();
    if (seq === null) { return false; }
    var element = document.getElementById("m-" + seq);
    if (element) {
      pendingSeq = null;
      element.scrollIntoView({ block: "start" });
      var current = document.querySelector(".message.current");
      if (current && current !== element) { current.classList.remove("current"); }
      element.classList.add("current");
      return true;
    }
    var messages = box();
    if (!messages || pendingSeq === seq || !window.htmx) { return true; }
    pendingSeq = seq;
    window.htmx.ajax("GET", messages.getAttribute("data-windows") + "&around=" + seq,
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
  var keptHash = "";
  // A refused search (400: q too long or too many words) carries its explanation in the
  // results fragment; htmx swaps no error response unless told to.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail.target;
    if (event.detail.xhr.status === 400 && target && target.id === "results") {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  // Trimmed as soon as a window is swapped in, not at settle (20 ms later): the document
  // never holds more than DOCUMENT messages for anyone to see.
  var trimmed = new WeakSet();
  document.addEventListener("htmx:afterSwap", function (event) {
    var xhr = event.detail && event.detail.xhr;
    var target = event.detail && event.detail.target;
    if (!xhr || trimmed.has(xhr) || !target) { return; }
    trimmed.add(xhr);
    if (target.id === "earlier") { trim("start"); }
    if (target.id === "later") { trim("end"); }
  });

  var settled = new WeakSet();  // htmx fires afterSettle on every swapped element: act once
  document.addEventListener("htmx:beforeRequest", function () { keptHash = window.location.hash; });
  document.addEventListener("htmx:afterSettle", function (event) {
    var xhr = event.detail && event.detail.xhr;
    if (xhr) {
      if (settled.has(xhr)) { return; }
      settled.add(xhr);
    }
    var target = event.detail && event.detail.target;
    var id = target && target.id;
    if (id === "conversation" && keptHash && !window.location.hash) {
      history.replaceState(history.state, "", window.location.pathname + window.location.search + keptHash);
      reveal();
      return;
    }
    if (id === "earlier" || id === "later" || id === "messages") { changed(); }
    if (pendingSeq !== null) { reveal(); }
  });

  // j / k: next / previous message.
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    if (event.key !== "j" && event.key !== "k") { return; }
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) { return; }
    // Only the messages shown: a block filter (replay-finding.js) hides the others.
    var messages = Array.prototype.slice.call(document.querySelectorAll(".message"))
      .filter(function (m) { return m.getClientRects().length > 0; });
    if (!messages.length) { return; }
    var current = document.querySelector(".message.current");
    var index = messages.indexOf(current);
    if (index === -1) {
      // Start from the first message whose top is in view.
      index = messages.findIndex(function (m) { return m.getBoundingClientRect().bottom > 100; });
      index = event.key === "j" ? index - 1 : index + 1;
    }
    var next = messages[Math.max(0, Math.min(messages.length - 1, index + (event.key === "j" ? 1 : -1)))];
    if (current) { current.classList.remove("current"); }
    next.classList.add("current");
    next.scrollIntoView({ block: "start" });
    next.focus({ preventScroll: true });
    history.replaceState(history.state, "", "#" + next.id);
  });
})();
