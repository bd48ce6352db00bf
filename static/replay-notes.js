// Notes beside a message's record (docs/contract.md §10). Every viewer gets the same
// markup (the page and each live frame); this marks the notes the reader wrote, so the
// stylesheet shows edit and delete on them (delete on all for users who may delete any:
// `data-note-delete-any` on #conversation). The server checks every change again.
// A refused change (400, 403) answers the notes with the reason: htmx is told to show it.
function markMine(root) {
  const page = document.getElementById("conversation");
  const viewer = page && page.getAttribute("data-viewer");
  if (!viewer || !root || !root.querySelectorAll) { return; }
  const notes = root.matches && root.matches(".note") ? [root] : [];
  root.querySelectorAll(".note").forEach(function (note) { notes.push(note); });
  notes.forEach(function (note) {
    note.classList.toggle("mine", note.getAttribute("data-user") === viewer);
  });
}

document.addEventListener("htmx:load", function (event) { markMine(event.target); });
document.addEventListener("DOMContentLoaded", function () { markMine(document); });

document.addEventListener("htmx:beforeSwap", function (event) {
  const target = event.detail.target;
  const status = event.detail.xhr.status;
  if ((status === 400 || status === 403) && target &&
      (target.classList.contains("notes") || target.classList.contains("note"))) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// An edit form open: the live list keeps it (static/replay-live.js) until saved or cancelled.
document.addEventListener("htmx:afterSwap", function (event) {
  const target = event.detail.elt;
  if (target instanceof Element) { markMine(target.closest(".notes") || target); }
});
