// The list page's file drop (docs/contract.md §6): the dropped or chosen file is POSTed as the body
// to the dashboard's import endpoint (session cookie + CSRF header), with upload progress;
// on success the page goes to the imported conversation. Messages are set as text only,
// and said in the page's status region. The file input is visually hidden but in the Tab
// order: Enter or Space on it opens the file chooser.
// An ES module.
import { announce } from "./replay-shared.js";

// An error is styled as the page's errors are (`.error`); any other message is not.
function tell(status, text, failed) {
  status.textContent = text;
  status.classList.toggle("error", Boolean(failed));
  announce(text, "import");
}

function csrfToken() {
  try {
    return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || "";
  } catch (e) {
    return "";
  }
}

function start(zone, file) {
  var progress = document.getElementById("import-progress");
  var status = document.getElementById("import-status");
  var request = new XMLHttpRequest();
  progress.hidden = false;
  progress.value = 0;
  tell(status, "Uploading " + file.name + "…");
  zone.setAttribute("data-state", "uploading");
  request.upload.addEventListener("progress", function (event) {
    if (event.lengthComputable) {
      progress.value = Math.round((event.loaded / event.total) * 100);
    }
  });
  request.upload.addEventListener("load", function () {
    progress.removeAttribute("value"); // indeterminate while the server imports
    tell(status, "Importing " + file.name + "…");
  });
  request.addEventListener("load", function () {
    var answer = {};
    try {
      answer = JSON.parse(request.responseText);
    } catch (e) {
      answer = { error: "The server answered " + request.status + "." };
    }
    if (request.status === 200 || request.status === 201) {
      progress.value = 100;
      zone.setAttribute("data-state", "done");
      tell(status, (request.status === 200 ? "Already imported: " : "Imported: ") +
        answer.messages + " messages, " + answer.blocks + " blocks, " + answer.gaps + " gaps.");
      window.location.assign(answer.url);
    } else {
      progress.hidden = true;
      zone.setAttribute("data-state", "error");
      tell(status, answer.error || "The import failed (" + request.status + ").", true);
    }
  });
  request.addEventListener("error", function () {
    progress.hidden = true;
    zone.setAttribute("data-state", "error");
    tell(status, "The upload failed: the server could not be reached.", true);
  });
  request.open("POST", zone.getAttribute("data-url"));
  request.setRequestHeader("X-CSRFToken", csrfToken());
  request.setRequestHeader("X-File-Name", encodeURIComponent(file.name).slice(0, 255));
  request.setRequestHeader("Content-Type", "application/octet-stream");
  request.send(file);
}

function setUp() {
  var zone = document.getElementById("dropzone");
  if (!zone || zone.getAttribute("data-ready")) {
    return;
  }
  zone.setAttribute("data-ready", "1");
  zone.addEventListener("dragover", function (event) {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", function () {
    zone.classList.remove("over");
  });
  zone.addEventListener("drop", function (event) {
    event.preventDefault();
    zone.classList.remove("over");
    if (event.dataTransfer && event.dataTransfer.files.length) {
      start(zone, event.dataTransfer.files[0]);
    }
  });
  var input = document.getElementById("import-file");
  if (input) {
    input.addEventListener("change", function () {
      if (input.files.length) {
        start(zone, input.files[0]);
      }
    });
  }
}

document.addEventListener("DOMContentLoaded", setUp);
