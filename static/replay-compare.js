// The compare page (docs/contract.md §9): open at the first divergence. The server
// prints its row number on #compare-page (data-first-row) and chooses the page holding it;
// unless the address already names a row, the page scrolls that row into view.
// An ES module, loaded by the compare page only.

function openAtFirstDivergence() {
  const page = document.getElementById("compare-page");
  if (!page || window.location.hash) { return; }
  const row = document.querySelector("#compare-rows .first-divergence");
  if (row) { row.scrollIntoView({ block: "start" }); }
}

openAtFirstDivergence();
