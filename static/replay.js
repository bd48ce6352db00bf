// Replay's page behaviour: copy and download, folding, j/k navigation; windows and deep
// links are replay-windows.js. An ES module (deferred, run after htmx): no inline scripts
// (the CSP forbids them); htmx swaps are picked up via its events.
import { copyText, fetchText, flash } from "./replay-shared.js";
import "./replay-windows.js";  // its listeners are registered here, before this page's others

// The button that had the focus went with what it loaded: the focus goes to what it
// brought (never to <body>), without moving the page.
function keepFocus(element) {
  if (!element || (document.activeElement && document.activeElement !== document.body)) { return; }
  if (!element.hasAttribute("tabindex")) { element.setAttribute("tabindex", "-1"); }
  element.focus({ preventScroll: true });
}

function messageUrl(seq) {
  const url = new URL(window.location.href);
  url.hash = "m-" + seq;
  return url.toString();
}

document.addEventListener("click", function (event) {
  const target = event.target;
  if (!(target instanceof Element)) { return; }
  const copy = target.closest("#copy-payload");
  if (copy) {
    fetchText(copy.getAttribute("data-url"))
      .then(copyText)
      .then(function () { flash(copy, "Copied"); })
      .catch(function () { flash(copy, "Copy failed"); });
    return;
  }
  const share = target.closest(".copy-share");
  if (share) {
    const field = document.getElementById(share.getAttribute("data-target"));
    copyText(field.value).then(
      function () { flash(share, "Copied"); },
      function () { field.select(); flash(share, "Copy failed: select and copy"); }
    );
    return;
  }
  const permalink = target.closest(".permalink");
  if (permalink) {
    event.preventDefault();
    const seq = permalink.closest(".message").getAttribute("data-seq");
    history.replaceState(history.state, "", "#m-" + seq);
    copyText(messageUrl(seq)).then(
      function () { flash(permalink, "#" + seq + " · link copied"); },
      function () { flash(permalink, "#" + seq + " · copy failed"); }
    );
    return;
  }
  const rest = target.closest(".load-rest");
  if (rest) {
    // The whole text, served as text/plain, set as text (never parsed as markup).
    const note = rest.closest(".truncated");
    let pre = note.previousElementSibling;
    while (pre && pre.tagName !== "PRE") {
      pre = pre.tagName === "DETAILS" ? pre.querySelector("pre") : pre.previousElementSibling;
    }
    rest.disabled = true;
    fetchText(rest.getAttribute("data-url"))
      .then(function (text) {
        pre.textContent = text;
        note.remove();
        keepFocus(pre);
      })
      .catch(function () { rest.disabled = false; flash(rest, "Loading failed"); });
    return;
  }
  const blocks = target.closest(".load-blocks");
  if (blocks) {
    // The next blocks of a message's record, rendered (escaped) by the server as the page's
    // own partial; the fold they replace comes back with them while more are left.
    const fold = blocks.closest(".block-fold");
    blocks.disabled = true;
    fetchText(blocks.getAttribute("data-url"))
      .then(function (html) {
        const fragment = document.createElement("template");
        fragment.innerHTML = html;
        const first = fragment.content.firstElementChild;
        fold.replaceWith(fragment.content);
        keepFocus(first);
      })
      .catch(function () { blocks.disabled = false; flash(blocks, "Loading failed"); });
    return;
  }
  const more = target.closest(".show-all");
  if (more) {
    // The server's label says how much is folded ("show all 40 lines, 1.2 kB"): kept.
    if (!more.hasAttribute("data-label")) { more.setAttribute("data-label", more.textContent); }
    const folded = more.previousElementSibling;
    const open = folded.classList.toggle("folded") === false;
    more.textContent = open ? "show less" : more.getAttribute("data-label");
  }
});

// A refused search (400: q too long or too many words) carries its explanation in the
// results fragment; htmx swaps no error response unless told to.
document.addEventListener("htmx:beforeSwap", function (event) {
  const target = event.detail.target;
  if (event.detail.xhr.status === 400 && target && target.id === "results") {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// j / k: next / previous message.
document.addEventListener("keydown", function (event) {
  if (event.altKey || event.ctrlKey || event.metaKey) { return; }
  if (event.key !== "j" && event.key !== "k") { return; }
  const active = document.activeElement;
  if (active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) { return; }
  // Only the messages shown: a block filter (replay-finding.js) hides the others.
  const messages = Array.prototype.slice.call(document.querySelectorAll(".message"))
    .filter(function (m) { return m.getClientRects().length > 0; });
  if (!messages.length) { return; }
  const current = document.querySelector(".message.current");
  let index = messages.indexOf(current);
  if (index === -1) {
    // Start from the first message whose top is in view.
    index = messages.findIndex(function (m) { return m.getBoundingClientRect().bottom > 100; });
    index = event.key === "j" ? index - 1 : index + 1;
  }
  const next = messages[Math.max(0, Math.min(messages.length - 1, index + (event.key === "j" ? 1 : -1)))];
  if (current) { current.classList.remove("current"); }
  next.classList.add("current");
  next.scrollIntoView({ block: "start" });
  next.focus({ preventScroll: true });
  history.replaceState(history.state, "", "#" + next.id);
});
