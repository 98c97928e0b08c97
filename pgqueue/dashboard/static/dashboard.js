// pgqueue dashboard: live refresh and confirmations. No inline scripts (the CSP forbids them).
//
// The page's <main id="live"> is fetched again (htmx) when the server's event stream says
// "refresh": woken by LISTEN/NOTIFY on enqueue, and every few seconds for everything else.
// "away" says the database is unreachable: the dot turns red with the reason beside it (as
// text), and the page keeps what it shows until the database is back.
// The stream is closed while the tab is hidden and reopened, with a refresh, when it shows.
(function () {
  "use strict";
  var source = null;
  var dot = null;
  var note = null;

  function say(text) {
    if (note) note.textContent = text;
  }

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
    source.addEventListener("refresh", function () {
      if (dot) dot.className = "live on";
      say("");
      refresh();
    });
    source.addEventListener("away", function (event) {
      if (dot) dot.className = "live off";
      var message = "";
      try { message = JSON.parse(event.data).message || ""; } catch (e) { message = ""; }
      say("database unreachable" + (message ? ": " + message : ""));
    });
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
    note = document.getElementById("live-note");
    if (!document.hidden) open();
  });
})();
