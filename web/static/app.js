// The dashboard works without this script. It adds two things: an
// auto-refresh switch (remembered in this browser) and a confirmation
// before destructive actions.
(function () {
  "use strict";
  var box = document.getElementById("autorefresh");
  if (box) {
    box.parentElement.hidden = false;
    box.checked = localStorage.getItem("bt-autorefresh") === "1";
    var timer = null;
    var arm = function () {
      clearTimeout(timer);
      if (box.checked) { timer = setTimeout(function () { location.reload(); }, 5000); }
    };
    box.addEventListener("change", function () {
      localStorage.setItem("bt-autorefresh", box.checked ? "1" : "0");
      arm();
    });
    arm();
  }
  document.addEventListener("submit", function (ev) {
    var b = ev.submitter || ev.target.querySelector("button");
    var q = b && b.getAttribute("data-confirm");
    if (q && !window.confirm(q)) { ev.preventDefault(); }
  });
})();
