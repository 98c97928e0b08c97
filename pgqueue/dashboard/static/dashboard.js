// pgqueue dashboard: live refresh and confirmations. No inline scripts (the CSP forbids them).
//
// The page's <main id="live"> is fetched again (htmx) when the server's event stream says
// "refresh": woken by LISTEN/NOTIFY on enqueue, and every few seconds for everything else.
// "away" says the database is unreachable: the dot turns red with the reason beside it (as
// text), and the page keeps what it shows until the database is back.
// The stream is closed while the tab is hidden and reopened, with a refresh, when it shows.
// The overview's charts (uPlot, vendored) are drawn from the same document as the page's
// numbers (each chart's data-series: /api/stats's per_minute), and drawn again after each
// refresh swaps the page.
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

  var charts = {};

  function axisWidth(u, values, axisIdx, cycleNum) {
    var axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;  // uPlot's rule: settle after the first cycles
    var longest = 0;
    (values || []).forEach(function (v) { longest = Math.max(longest, String(v).length); });
    return Math.ceil(axis.ticks.size + axis.gap + longest * 7.5 + 8);
  }

  function drawCharts() {
    Object.keys(charts).forEach(function (stream) { charts[stream].destroy(); });
    charts = {};
    window.pgqueueCharts = charts;  // (read by the browser tests)
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".chart[data-series]").forEach(function (node) {
      var s;
      try { s = JSON.parse(node.getAttribute("data-series")); } catch (e) { return; }
      var opts = {
        width: Math.max(280, node.clientWidth), height: 150,
        cursor: {drag: {x: false, y: false}},
        scales: {x: {time: true},
                 y: {range: function (u, min, max) { return [0, Math.max(4, max)]; }}},
        legend: {live: false},
        series: [{label: "minute"},
                 {label: "enqueued", stroke: "#2f6feb", width: 1.5},
                 {label: "acked", stroke: "#22c55e", width: 1.5},
                 {label: "failed", stroke: "#c62828", width: 1.5}],
        // the y axis as wide as its longest label ("12,000" was clipped to ",000")
        axes: [{}, {size: axisWidth}]
      };
      charts[node.getAttribute("data-stream")] =
        new uPlot(opts, [s.minutes, s.enqueued, s.acked, s.failed], node);
    });
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

  document.addEventListener("htmx:afterSettle", drawCharts);

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    dot = document.getElementById("live-status");
    note = document.getElementById("live-note");
    if (!document.hidden) open();
  });
})();
