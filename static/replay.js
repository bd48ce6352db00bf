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
    var permalink = target.closest(".permalink");
    if (permalink) {
      event.preventDefault();
      var seq = permalink.closest(".message").getAttribute("data-seq");
      history.replaceState(null, "", "#m-" + seq);
      copyText(messageUrl(seq)).then(
        function () { flash(permalink, "#" + seq + " · link copied"); },
        function () { flash(permalink, "#" + seq + " · copy failed"); }
      );
      return;
    }
    var more = target.closest(".show-all");
    if (more) {
      var folded = more.previousElementSibling;
      var open = folded.classList.toggle("folded") === false;
      more.textContent = open ? "show less" : "show all";
    }
  });

  // Deep links: #m-SEQ scrolls to that message, loading earlier ones first if needed.
  var pendingSeq = null;

  function wantedSeq() {
    var match = /^#m-(\d+)$/.exec(window.location.hash);
    return match ? parseInt(match[1], 10) : null;
  }

  function reveal() {
    var seq = wantedSeq();
    if (seq === null) { return; }
    var element = document.getElementById("m-" + seq);
    if (element) {
      pendingSeq = null;
      element.scrollIntoView({ block: "start" });
      element.classList.add("current");
      return;
    }
    var earlier = document.querySelector("#earlier button[hx-get]");
    if (!earlier || pendingSeq === seq || !window.htmx) { return; }
    pendingSeq = seq;
    var url = new URL(earlier.getAttribute("hx-get"), window.location.href);
    url.searchParams.set("from", String(seq));
    window.htmx.ajax("GET", url.pathname + url.search, { target: "#earlier", swap: "outerHTML" });
  }

  document.addEventListener("DOMContentLoaded", reveal);
  window.addEventListener("hashchange", reveal);
  // A toggle swaps the conversation in and pushes its URL without the fragment: keep the
  // message the operator was on (loading it again if it lies before the new window).
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
  document.addEventListener("htmx:beforeRequest", function () { keptHash = window.location.hash; });
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.id === "conversation" && keptHash && !window.location.hash) {
      history.replaceState(null, "", window.location.pathname + window.location.search + keptHash);
      reveal();
      return;
    }
    if (pendingSeq !== null) { reveal(); }
  });

  // j / k: next / previous message.
  document.addEventListener("keydown", function (event) {
    if (event.altKey || event.ctrlKey || event.metaKey) { return; }
    if (event.key !== "j" && event.key !== "k") { return; }
    var active = document.activeElement;
    if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) { return; }
    var messages = Array.prototype.slice.call(document.querySelectorAll(".message"));
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
    history.replaceState(null, "", "#" + next.id);
  });
})();
