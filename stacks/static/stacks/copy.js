// Copy buttons: an element with data-copy puts its text (data-copy, else its value) on the clipboard. One listener
// on the document, so buttons in htmx-swapped fragments work too (no inline handlers: CSP).
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy]") : null;
    if (!button || !navigator.clipboard) return;
    event.preventDefault();
    navigator.clipboard.writeText(button.getAttribute("data-copy") || button.value).then(function () {
      var label = button.textContent;
      button.textContent = "copied";
      button.classList.add("copied");
      setTimeout(function () { button.textContent = label; button.classList.remove("copied"); }, 1200);
    });
  });
})();
