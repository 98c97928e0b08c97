"""The overview's charts in a real browser (headless Chromium, as test_dashboard_browser.py):
each stream's last hour minute by minute and its jobs by state are drawn from the document
/api/stats serves, with data and without, and a live refresh draws them again."""
from __future__ import annotations

import pgqueue
from tests.acceptance.browserhelp import Dashboard, Tab, require_chromium
from tests.dbhelp import wait_for

require_chromium()

#: The series' stroke colours (dashboard.js) as RGB.
COLOURS = {"enqueued": (47, 111, 235), "acked": (34, 197, 94), "failed": (198, 40, 40)}

SUMS = """stream => {
  const u = window.pgqueueCharts && window.pgqueueCharts[stream];
  if (!u) return null;
  return [1, 2, 3].map(i => u.data[i].reduce((a, b) => a + b, 0));
}"""

# How many pixels of the chart's canvas are near each series' colour: drawn, not just made.
PIXELS = """([stream, colours]) => {
  const card = document.querySelector(`.chart[data-stream="${stream}"]`);
  const canvas = card && card.querySelector("canvas");
  if (!canvas) return null;
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  const out = {};
  for (const [name, [r, g, b]] of Object.entries(colours)) {
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] > 200 && Math.abs(data[i] - r) < 40 && Math.abs(data[i + 1] - g) < 40
          && Math.abs(data[i + 2] - b) < 40) n++;
    }
    out[name] = n;
  }
  return out;
}"""


def _sums(tab: Tab, stream: str) -> list[int] | None:
    found = tab.page.evaluate(SUMS, stream)
    return None if found is None else [int(x) for x in found]


def test_the_overview_draws_each_stream_s_hour_and_depth_and_redraws_them_live(
        admin: Dashboard, tab: Tab, q: pgqueue.Queue) -> None:
    for i in range(4):
        q.enqueue({"n": i})
    held = sorted(q.lease(limit=3), key=lambda h: h.job_id)
    q.ack_many(held[:2])
    q.nack(held[2], error="boom")  # back after a backoff: scheduled
    page = tab.page
    page.goto(admin.url + "/")
    wait_for(lambda: _sums(tab, "default") is not None, 15, "the charts to draw")
    assert _sums(tab, "default") == [4, 2, 1]  # enqueued, acked, failed in the hour
    stats = page.request.get(admin.url + "/api/stats").json()
    (row,) = stats["streams"]
    minutes = row["last_hour"]["per_minute"]
    assert len(minutes["minutes"]) == 60 and sum(minutes["enqueued"]) == 4  # the same document
    drawn = page.evaluate(PIXELS, ["default", COLOURS])
    # each line drawn (three different totals: none hides another)
    assert drawn is not None and all(drawn[name] > 0 for name in COLOURS), drawn
    depth = page.locator(".chart-card[data-stream=default] svg.depth rect")
    widths = {(r.get_attribute("class") or ""): float(r.get_attribute("width") or 0)
              for r in depth.all()}
    assert widths == {"state-pending": 50.0, "state-scheduled": 50.0}, widths
    assert "pending 1" in page.inner_text(".chart-card[data-stream=default] .legend")
    for i in range(4):
        q.enqueue({"more": i})
    # the enqueue wakes the page's event stream, which swaps the page and draws again
    wait_for(lambda: (_sums(tab, "default") or [0])[0] == 8, 30, "the charts to draw again")
    assert _sums(tab, "default") == [8, 2, 1]


def test_a_stream_with_nothing_in_its_hour_draws_an_empty_chart(
        admin: Dashboard, tab: Tab, dsn: str) -> None:
    with pgqueue.Queue(dsn, stream="quiet") as quiet:
        quiet.upsert_schedule("nightly", "0 3 * * *")  # a stream without a job
    page = tab.page
    page.goto(admin.url + "/")
    wait_for(lambda: _sums(tab, "quiet") is not None, 15, "the charts to draw")
    assert _sums(tab, "quiet") == [0, 0, 0]
    card = page.locator(".chart-card[data-stream=quiet]")
    assert "nothing enqueued, acked or failed in the last hour" in card.inner_text()
    assert "no jobs now" in card.inner_text()
    assert card.locator("svg.depth rect").count() == 0
    assert card.locator("canvas").count() >= 1  # the axes are drawn all the same


def test_an_empty_database_shows_how_to_start_and_no_chart(admin: Dashboard, tab: Tab) -> None:
    page = tab.page
    page.goto(admin.url + "/")
    assert "No jobs yet" in page.inner_text("main")
    assert page.locator(".chart").count() == 0
    assert page.evaluate("Object.keys(window.pgqueueCharts || {}).length") == 0


# The y axis' width against what its longest label needs, and the legend's height against one
# line of its text: a clipped label ("12,000" shown as ",000") or a legend that wraps fails.
FITS = """stream => {
  const u = window.pgqueueCharts && window.pgqueueCharts[stream];
  const card = document.querySelector(`.chart[data-stream="${stream}"]`);
  if (!u || !card) return null;
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = u.axes[1].font[0];
  const labels = u.axes[1]._values || [];
  const widest = Math.max(0, ...labels.map(v => ctx.measureText(String(v)).width));
  const legend = card.querySelector(".u-legend");
  const line = parseFloat(getComputedStyle(legend).lineHeight) || 16;
  return {axis: u.axes[1]._size, need: widest + u.axes[1].ticks.size + u.axes[1].gap,
          legend: legend.getBoundingClientRect().height, line: line,
          labels: labels.map(String)};
}"""


def test_a_busy_stream_s_axis_labels_fit_and_its_legend_is_one_line(
        admin: Dashboard, tab: Tab, q: pgqueue.Queue) -> None:
    for _ in range(13):
        q.enqueue_many([pgqueue.NewJob(b"x") for _ in range(1000)])  # 13,000 in one minute
    page = tab.page
    page.set_viewport_size({"width": 900, "height": 900})  # a narrow window: one column
    page.goto(admin.url + "/")
    wait_for(lambda: page.evaluate(FITS, "default"), 15, "the chart to draw")
    fits = page.evaluate(FITS, "default")
    assert any("," in label for label in fits["labels"]), fits  # thousands on the axis
    assert fits["axis"] >= fits["need"], fits
    assert fits["legend"] < 2 * fits["line"], fits


def test_a_stale_worker_s_row_has_the_font_of_a_live_one(admin: Dashboard, tab: Tab,
                                                         dsn: str) -> None:
    from pgqueue.db import connection
    from pgqueue.runtime import registry

    with connection.connect(dsn) as conn:
        live = registry.register(conn, node=0, streams=["default"], concurrency=1)
        stale = registry.register(conn, node=0, streams=["default"], concurrency=1)
        conn.execute("UPDATE pgqueue.worker SET heartbeat_at = now() - interval '1 hour' "
                     "WHERE id = %s", (stale,))
    page = tab.page
    page.goto(admin.url + "/workers")
    size = """id => getComputedStyle(document.querySelector(`#worker-${id} td`)).fontSize"""
    assert page.evaluate(size, live) == page.evaluate(size, stale)
    assert page.locator(f"#worker-{stale}").get_attribute("class") == "row-stale"
