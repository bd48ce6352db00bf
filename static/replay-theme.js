// The colour theme: System (follow prefers-color-scheme), Light or Dark, chosen in the header
// and remembered in localStorage. Loaded without defer in <head> (the CSP allows no inline
// script), so data-theme is on <html> before the first paint and no page flashes light.
(function () {
  "use strict";
  var KEY = "replay-theme";
  var CHOICES = ["system", "light", "dark"];
  var root = document.documentElement;

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return CHOICES.indexOf(value) === -1 ? "system" : value;
    } catch (e) {
      return "system";  // storage refused (privacy settings): follow the system
    }
  }

  // data-theme="system" leaves the colours to the stylesheet's prefers-color-scheme rules,
  // as on pages that run no script (error pages), which show no switch either.
  function apply(choice) {
    root.setAttribute("data-theme", choice);
    var buttons = document.querySelectorAll("[data-theme-choice]");
    for (var i = 0; i < buttons.length; i++) {
      var pressed = buttons[i].getAttribute("data-theme-choice") === choice;
      buttons[i].setAttribute("aria-pressed", pressed ? "true" : "false");
    }
  }

  apply(stored());
  document.addEventListener("DOMContentLoaded", function () { apply(stored()); });

  document.addEventListener("click", function (event) {
    var target = event.target instanceof Element ? event.target.closest("[data-theme-choice]") : null;
    if (!target) { return; }
    var choice = target.getAttribute("data-theme-choice");
    try {
      if (choice === "system") { window.localStorage.removeItem(KEY); } else { window.localStorage.setItem(KEY, choice); }
    } catch (e) { /* not remembered; still applied to this page */ }
    apply(choice);
  });

  // Another tab changed it: follow.
  window.addEventListener("storage", function (event) {
    if (event.key === KEY || event.key === null) { apply(stored()); }
  });
})();
