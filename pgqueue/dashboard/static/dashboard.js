// pgqueue dashboard: live refresh and confirmations. No inline scripts (the CSP forbids them).
//
// The page's <main id="live"> is fetched again (htmx) when the server's event stream says
// "refresh": woken by LISTEN/NOTIFY on enqueue, and every few seconds for everything else.
// The stream is closed while the tab is hidden and reopened, with a refresh, when it shows.
(function () {
  "use strict";
  var source = null;
  var dot = null;

  function live() {
    var main = document.getElementById("live");
    return main !== null && main.getAttribute("data-live") === "true";
  }

  function busy() {
    // Never swap the page under someone typing or choosing in a form.
    var active = document.activeElement;
    return active !== null && active.closest && active.closest("#live form") !== null &&
      (active.tagName === "INPUT" || active.tagName === "SELECT" || active.tagName === "TEXTAREA");
  }

  function refresh() {
    if (!live() || busy() || typeof htmx === "undefined") return;
    htmx.ajax("GET", window.location.href, {target: "#live", select: "#live", swap: "outerHTML"});
  }

  function open() {
    if (source !== null || !live() || typeof EventSource === "undefined") return;
    source = new EventSource((document.body.getAttribute("data-root") || "") + "/events");
    source.addEventListener("refresh", refresh);
    source.onopen = function () { if (dot) dot.className = "live on"; };
    source.onerror = function () { if (dot) dot.className = "live off"; };
  }

  function close() {
    if (source !== null) { source.close(); source = null; }
    if (dot) dot.className = "live paused";
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) { close(); } else { open(); refresh(); }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    dot = document.getElementById("live-status");
    if (!document.hidden) open();
  });
})();
