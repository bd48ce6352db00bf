// Helpers the page scripts share (an ES module, imported, never loaded by a <script> tag
// of its own): what the page holds, fetching a text, writing to the clipboard, a button's
// brief confirmation. No side effects on import.

// The conversation's message column (absent on the list), and the messages it holds.
export function box() { return document.getElementById("messages"); }

export function held() {
  const messages = box();
  return messages ? Array.prototype.slice.call(messages.querySelectorAll(":scope > .message")) : [];
}

export function seqOf(element) { return parseInt(element.getAttribute("data-seq"), 10); }

// A number the server printed on `element` (a data- attribute computed in Python).
export function numberFrom(element, attribute) {
  return element ? parseInt(element.getAttribute(attribute), 10) : NaN;
}

// A same-origin GET answered as text; rejects on any status but 2xx.
export function fetchText(url) {
  return fetch(url, { credentials: "same-origin" }).then(function (response) {
    if (!response.ok) { throw new Error("HTTP " + response.status); }
    return response.text();
  });
}

export function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    return navigator.clipboard.writeText(text);
  }
  // Plain-HTTP fallback: a hidden textarea and execCommand.
  return new Promise(function (resolve, reject) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (ok) { resolve(); } else { reject(new Error("copy refused")); }
  });
}

// Says `text` on `button` for a moment; its own label (kept in data-text, so that a second
// click during the first flash does not make "Copied" the label) comes back.
export function flash(button, text) {
  const original = button.getAttribute("data-text") || button.textContent;
  button.setAttribute("data-text", original);
  button.textContent = text;
  setTimeout(function () { button.textContent = original; }, 1500);
}
