// Sticky bars never hide what has focus (WCAG 2.4.7; docs/contract.md §4, Keyboard and screen readers). The page's scroll padding
// (--bar-top, --bar-bottom in replay.css) is the height of the header while it sticks and of
// the phone's bottom toolbar while it is fixed, so the browser scrolls a focused element, a
// link's target or a message moved to clear of both. A header taller than a third of the
// window does not stick at all (html.head-unstuck): at 200 % zoom it would cover most of the
// page. The stylesheet unsticks it on short windows by itself, script or not.
// An ES module (deferred: it runs before the page's own scrolling, after the document is parsed).

const root = document.documentElement;
const TALLEST = 1 / 3;  // of the window's height, for a header that sticks

function height(element) {
  return Math.ceil(element.getBoundingClientRect().height);
}

function positioned(element, position) {
  return element !== null && getComputedStyle(element).position === position;
}

function fit() {
  const head = document.querySelector(".conv-head");
  root.classList.toggle("head-unstuck", head !== null && height(head) > window.innerHeight * TALLEST);
  const toolbar = document.querySelector(".find-nav");
  root.style.setProperty("--bar-top", (positioned(head, "sticky") ? height(head) : 0) + "px");
  // The next-request line sticks below the header: focus clears it too.
  const summary = document.getElementById("next-summary");
  root.style.setProperty("--bar-summary", (summary !== null ? height(summary) : 0) + "px");
  root.style.setProperty("--bar-bottom", (positioned(toolbar, "fixed") ? height(toolbar) : 0) + "px");
}

// The bars change size as they wrap, fill (a search's status, an alert) or are replaced
// whole (a toggle swaps the conversation): watch whichever are on the page now.
const sizes = new ResizeObserver(fit);

function watch() {
  sizes.disconnect();
  for (const bar of document.querySelectorAll(".conv-head, .find-nav, #next-summary")) { sizes.observe(bar); }
  fit();
}

watch();
window.addEventListener("resize", fit);
document.addEventListener("htmx:afterSettle", watch);
