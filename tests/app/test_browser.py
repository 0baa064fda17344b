"""End to end in a real headless Chromium against a real `streamlit run` on localhost.

Every page is opened on small runs of each kind (sweep, curve, fidelity, diagnosis; Live runs
a diagnosis). On every page: no Streamlit exception box, and every plotly figure's axes show
its data (read from the browser's own `gd._fullLayout` ranges and `gd._fullData`; log axes
in log10; an autoranged axis may not be stretched far past its data, as the first version's
unit-curve figure was). An example whose question, passage and gold hold a markdown image
pointing at a local HTTP server must be shown as text: the server must receive no request.
Also: the app listens on the loopback interface only, by its own config.

Needs Debian's `chromium` package (`apt-get install -y chromium`); where /usr/bin/chromium is
absent the browser tests are skipped and say so. Chromium is driven over the DevTools protocol
(tornado's websocket client, which Streamlit already depends on). With $KVWB_SCREENSHOTS set
to a folder, a screenshot of every page is saved there.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from small_runs import old_unit_curve_figure, save_diagnosis
from workbench.tasks import Example

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]
START_TIMEOUT = 120  # seconds for the server to answer (it imports torch)
PAGE_TIMEOUT = 120  # seconds for one page to finish rendering
LIVE_TIMEOUT = 480  # Live diagnoses the embedded model first: minutes on 2 shared cores
SHOTS = os.environ.get("KVWB_SCREENSHOTS")

pytestmark = pytest.mark.slow

# (URL path, the page's title, least number of figures) on small runs of every kind, including a
# one-budget sweep, a ten-selector five-budget sweep, a pipeline with every method, a Gemma
# diagnosis and a run whose writer was killed.
PAGES = [
    ("?run=tiny", "KV Repair Workbench", 0),
    ("explorer?run=tiny&example=q1&budget=0.5", "Example explorer", 5),
    ("budget-curves?run=tiny", "Budget curves", 3),
    ("flips?run=tiny", "Decision flips", 1),
    ("budget-curves?run=one-budget", "Budget curves", 3),
    ("budget-curves?run=wide", "Budget curves", 3),
    ("flips?run=wide", "Decision flips", 1),
    ("explorer?run=wide&example=q2&budget=0.2&selectors=cadence-grad,bcr,coin:bcr,cacheblend&signal=draft_attention",
     "Example explorer", 5),
    ("?run=curve", "KV Repair Workbench", 0),
    ("unit-of-choice?run=curve", "Unit of choice", 1),
    ("?run=fid", "KV Repair Workbench", 0),
    ("fidelity?run=fid", "Fidelity vs consumability", 3),
    ("?run=one", "KV Repair Workbench", 0),
    ("explorer?run=one", "Example explorer", 4),  # no layer signals: none, full, random, densedev
    ("explorer?run=gemma", "Example explorer", 4),
    ("?run=pipe", "KV Repair Workbench", 0),
    ("multi-agent?run=pipe", "Multi-agent reuse", 2),
    ("multi-agent?run=pipe-all", "Multi-agent reuse", 3),
    ("multi-agent?run=pipe-rep", "Multi-agent reuse", 3),
    ("?run=killed", "KV Repair Workbench", 0),
]

AXIS_CHECK = """
function axisProblems(gd) {
  // Every x/y axis of a drawn plotly figure must show all its data; an autoranged axis must not
  // be stretched far past it (plotly reads annotation x on a log axis as log10: x=256 -> 10^256).
  const L = gd._fullLayout, D = gd._fullData || [], out = [];
  const title = (L.title && L.title.text) || '(untitled)';
  for (const name of Object.keys(L).filter(k => /^[xy]axis\\d*$/.test(k))) {
    const ax = L[name], letter = name[0];
    if (!ax || !ax.range || !['linear', 'log', 'category'].includes(ax.type)) continue;
    const vals = [];
    for (const t of D) {
      if (t.visible !== true || (t[letter + 'axis'] || letter) !== ax._id) continue;
      let v = t[letter];
      if ((v === undefined || v === null) && t.type === 'heatmap' && t.z) {
        const n = letter === 'x' ? (t.z[0] || []).length : t.z.length;
        v = Array.from({length: n}, (_, i) => i);
      }
      if (!v) continue;
      for (const raw of Array.from(v)) {
        if (raw === null || raw === undefined) continue;
        let x = ax.type === 'category' ? ax._categories.indexOf(String(raw)) : Number(raw);
        if (ax.type === 'category' ? x < 0 : !isFinite(x)) continue;
        if (ax.type === 'log') {
          if (x <= 0) { out.push(title + ': ' + name + ' is a log axis with a value <= 0'); continue; }
          x = Math.log10(x);
        }
        vals.push(x);
      }
    }
    if (!vals.length) continue;
    let lo = Number(ax.range[0]), hi = Number(ax.range[1]);
    if (lo > hi) [lo, hi] = [hi, lo];
    let dmin = Infinity, dmax = -Infinity;
    for (const x of vals) { if (x < dmin) dmin = x; if (x > dmax) dmax = x; }
    const tol = 1e-6 * Math.max(1, hi - lo), shown = '[' + lo.toPrecision(4) + ', ' + hi.toPrecision(4) + ']';
    const data = '[' + dmin.toPrecision(4) + ', ' + dmax.toPrecision(4) + ']' + (ax.type === 'log' ? ' (log10)' : '');
    if (dmin < lo - tol || dmax > hi + tol) out.push(title + ': ' + name + ' shows ' + shown + ' but its data span ' + data);
    if (ax.autorange && dmax > dmin && dmax - dmin < 0.05 * (hi - lo))
      out.push(title + ': ' + name + ' is stretched to ' + shown + ' while its data span ' + data);
  }
  return out;
}
"""

DRAWN_CHECK = """
function titleOf(gd) { return (gd._fullLayout.title && gd._fullLayout.title.text) || '(untitled)'; }
function box(e) { return e.getBoundingClientRect(); }
function meets(a, b) { return a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1; }
function overlapProblems(gd) {
  // No annotation's drawn box may cover a data point (a marker) or a tick label.
  const out = [], notes = [...gd.querySelectorAll('g.annotation')].filter(a => (a.textContent || '').trim());
  const points = [...gd.querySelectorAll('.scatterlayer path.point')].filter(p => p.style.opacity !== '0'
    && getComputedStyle(p).opacity !== '0');
  const ticks = [...gd.querySelectorAll('g.xtick text, g.ytick text, g.x2tick text, g.y2tick text')];
  for (const a of notes) {
    const b = box(a.querySelector('.annotation-text-g') || a), text = a.textContent.trim().slice(0, 60);
    if (points.some(p => meets(b, box(p)))) out.push(titleOf(gd) + ': annotation "' + text + '" covers a data point');
    if (ticks.some(t => meets(b, box(t)))) out.push(titleOf(gd) + ': annotation "' + text + '" covers a tick label');
  }
  return out;
}
function legendProblems(gd) {
  // The legend lies within the figure, shows every entry and needs no scrolling.
  const lg = gd.querySelector('g.legend'), out = [];
  if (!lg) return out;
  const fig = box(gd.querySelector('svg.main-svg')), bg = box(lg.querySelector('rect.bg') || lg);
  if (bg.left < fig.left - 1 || bg.right > fig.right + 1 || bg.top < fig.top - 1 || bg.bottom > fig.bottom + 1)
    out.push(titleOf(gd) + ': the legend runs out of the figure');
  const bar = lg.querySelector('rect.scrollbar');
  if (bar && box(bar).height > 0) out.push(titleOf(gd) + ': the legend scrolls (entries are cut off)');
  for (const entry of lg.querySelectorAll('g.traces')) {
    const e = box(entry);
    if (e.height > 0 && (e.bottom > bg.bottom + 1 || e.right > bg.right + 1))
      out.push(titleOf(gd) + ': legend entry "' + entry.textContent.trim() + '" is cut off');
  }
  return out;
}
function colours(gd) {
  // [name, colour] of every legend entry: traces (their line, else their marker) and shapes.
  const out = [];
  for (const t of gd._fullData || []) {
    if (!t.name || t.showlegend === false || t.visible === false) continue;
    const line = (t.mode || '').includes('lines') && t.line ? t.line.color : null;
    const marker = t.marker && typeof t.marker.color === 'string' ? t.marker.color : null;
    if (line || marker) out.push([t.name, line || marker]);
  }
  for (const s of gd._fullLayout.shapes || []) if (s.showlegend && s.name) out.push([s.name, s.line.color]);
  return out;
}
"""

PROBE = AXIS_CHECK + DRAWN_CHECK + """
JSON.stringify((() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')].filter(gd => gd._fullLayout);
  return {
    plots: plots.length,
    charts: document.querySelectorAll('[data-testid="stPlotlyChart"]').length,
    exceptions: [...document.querySelectorAll('[data-testid="stException"]')].map(e => e.innerText.slice(0, 800)),
    running: !!document.querySelector('[data-testid="stStatusWidget"]'),
    title: (document.querySelector('h1') || {}).innerText || '',
    problems: plots.flatMap(axisProblems),
    drawn: plots.flatMap(gd => [...overlapProblems(gd), ...legendProblems(gd)]),
    colours: plots.flatMap(colours),
    url: location.href,
    text: document.body ? document.body.innerText : '',
  };
})())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, deadline: float) -> None:
    while time.time() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"streamlit exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer ok in time")


class Recorder(http.server.BaseHTTPRequestHandler):
    """Counts every request (the leak test's server)."""

    requests: list[str] = []

    def do_GET(self):  # noqa: N802 - the name http.server calls
        Recorder.requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def leak_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def app(app_world, leak_server):
    """`streamlit run app/Home.py` from the repository root as `make app` runs it, but without
    --server.address: the app's own config must bind it to localhost. Its runs: the session's
    (tests/app/app_world.py) and an example whose text points at the leak server."""
    runs = app_world["base"] / "browser-runs"  # a copy: the leak example is this module's own
    if not runs.exists():
        shutil.copytree(app_world["runs"], runs, ignore=shutil.ignore_patterns(".lock"))
        shutil.copy(app_world["runs"] / "killed" / ".lock", runs / "killed" / ".lock")
    world = {**app_world, "runs": runs}
    image = f"![x]({leak_server}/leak.png)"
    leak = Example("leak", ("Varek Olundi is coached by Mira Tessk.", f"Mira Tessk {image} lives in Tressamor."),
                   f"Where does the coach live? {image}", (f"Tressamor {image}",))
    save_diagnosis(world["tiny_model"], leak, runs / "leak")
    log_path = world["base"] / "streamlit.log"
    with serving({"KVWB_RUNS": str(world["runs"]), "KVWB_MODEL": str(world["model"])}, log_path) as port:
        yield {"url": f"http://127.0.0.1:{port}", "port": port, "log": log_path, "image": image, **world}


@contextlib.contextmanager
def serving(env: dict, log_path: Path):
    """`streamlit run app/Home.py` from the repository root on a free port (its output in
    `log_path`, one OpenMP thread, `env` added): the port once it answers; stopped on exit."""
    port = free_port()
    with log_path.open("w") as log:
        server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app/Home.py", "--server.port", str(port),
                                   "--server.fileWatcherType", "none"], cwd=ROOT,
                                  env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", server, time.time() + START_TIMEOUT)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()


class Browser:
    """One headless Chromium tab over the DevTools protocol."""

    def __init__(self, profile: Path, size: str = "1400,2000"):
        self.process = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={size}",
                                         "--remote-debugging-port=0", "about:blank"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.profile, self.ws, self.calls = profile, None, 0

    async def connect(self) -> None:
        from tornado.websocket import websocket_connect

        port_file, deadline = self.profile / "DevToolsActivePort", time.time() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert time.time() < deadline and self.process.poll() is None, "chromium did not open its DevTools port"
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        self.ws = await websocket_connect(page["webSocketDebuggerUrl"], max_message_size=1 << 28)

    async def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.ws.write_message(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(await self.ws.read_message())
            if message.get("id") == self.calls:
                assert "error" not in message, message
                return message["result"]

    async def evaluate(self, expression: str):
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def probe(self) -> dict:
        return json.loads(await self.evaluate(PROBE))

    async def settle(self, least: int, title: str = "", timeout: float = PAGE_TIMEOUT) -> dict:
        """Poll until the script is done and every chart is drawn (the same state twice in a row)."""
        deadline, last, state = time.time() + timeout, None, {}
        while time.time() < deadline:
            state = await self.probe()
            if state["exceptions"]:
                return state
            done = (not state["running"] and state["plots"] >= least and state["plots"] == state["charts"]
                    and title in state["title"])
            key = (state["plots"], state["charts"], len(state["text"]))
            if done and key == last:
                await asyncio.sleep(0.5)  # let plotly finish drawing before a picture
                return await self.probe()
            last = key if done else None
            await asyncio.sleep(1)
        raise AssertionError(f"the page did not finish rendering: {state.get('title')!r}, {state.get('plots')} of "
                             f"{least} figures; {state.get('text', '')[-1500:]}")

    async def open(self, url: str, least: int, title: str) -> dict:
        await self.call("Page.navigate", url=url)
        await asyncio.sleep(1)
        return await self.settle(least, title)

    async def click_at(self, where: str) -> dict:
        """Click the page point a script (`where`, returning JSON with x and y) finds; its JSON."""
        point = json.loads(await self.evaluate(where))
        await asyncio.sleep(1)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=point["x"], y=point["y"], button="left",
                            clickCount=1)
            await asyncio.sleep(0.2)
        return point

    async def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"]))

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def browse(profile: Path, steps) -> None:
    """Run `await steps(browser)` in a fresh Chromium."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed: {CHROMIUM} is absent (apt-get install -y chromium)")

    async def main():
        browser = Browser(profile)
        try:
            await browser.connect()
            await steps(browser)
        finally:
            if browser.ws is not None:
                browser.ws.close()
            browser.close()

    asyncio.run(main())


def shot_name(path: str) -> str:
    page, _, query = path.partition("?")
    return f"{page or 'runs'}-{query}".replace("&", "-").replace("=", "-")


def check(state: dict, what: str) -> None:
    assert not state["exceptions"], (what, state["exceptions"])
    assert "Page not found" not in state["text"], what
    assert not state["problems"], (what, state["problems"])
    assert not state["drawn"], (what, state["drawn"])


def series_name(name: str) -> str:
    """A legend name without a trailing value ("reuse all (none) 0.333" -> "reuse all (none)")."""
    head, _, last = html.unescape(name).rpartition(" ")
    try:
        float(last)
    except ValueError:
        return html.unescape(name)
    return head


def one_colour_each(seen: dict) -> None:
    """Every selector, method and series has one colour on every page, its own from plots.colors."""
    from workbench import plots
    from workbench.pipeline import METHODS
    from workbench.selectors.registry import default_selectors

    found: dict[str, set] = {}
    for state in seen.values():
        for name, colour in state["colours"]:
            found.setdefault(series_name(name), set()).add(colour.lower())
    assert {n: c for n, c in found.items() if len(c) > 1} == {}, "a series changes colour between figures"
    selectors = set(default_selectors(expensive=True)) | {"coin:bcr"}
    for name, (colour,) in found.items():
        if name in selectors:
            assert colour == plots.selector_color(name).lower(), name
        elif name in METHODS:
            assert colour == plots.method_color(name).lower(), name
    assert {"random", "bcr", "coin:bcr", "kvcomm-0.5", "chat-template"} <= set(found)


# ----------------------------------------------------------------------------- tests

def test_the_app_listens_on_localhost_only(app):
    """No --server.address was given: .streamlit/config.toml binds it to the loopback interface."""
    listening = []
    for table, loopback in (("/proc/net/tcp", "0100007F"), ("/proc/net/tcp6", "00000000000000000000000001000000")):
        if not Path(table).is_file():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.split(":")
            if state == "0A" and int(port, 16) == app["port"]:  # 0A: LISTEN
                listening.append((address, address == loopback))
    if not listening:
        pytest.skip("this system does not show its sockets in /proc/net")
    assert all(ok for _, ok in listening), listening


def test_every_page_renders_with_figures_that_show_their_data(app, tmp_path):
    seen = {}

    async def steps(browser: Browser) -> None:
        for path, title, least in PAGES:
            state = await browser.open(f"{app['url']}/{path}", least, title)
            check(state, path)
            seen[path] = state
            if SHOTS:
                await browser.screenshot(Path(SHOTS) / f"{shot_name(path)}.png")
        state = await browser.open(f"{app['url']}/live", 0, "Live")
        check(state, "live")
        await browser.evaluate("[...document.querySelectorAll('button')].find(b => b.innerText.includes("
                               "'Run diagnosis')).click()")
        await asyncio.sleep(2)
        state = await browser.settle(5, "Live", LIVE_TIMEOUT)
        check(state, "live after Run diagnosis")
        seen["live"] = state
        if SHOTS:
            await browser.screenshot(Path(SHOTS) / "live.png")

    browse(tmp_path / "profile", steps)
    one_colour_each(seen)
    assert "stopped (its process is gone)" in seen["?run=killed"]["text"]
    assert "Budget curves" in seen["budget-curves?run=tiny"]["text"]
    assert "Dorket" not in seen["explorer?run=tiny&example=q1&budget=0.5"]["text"]  # q1, not q2
    assert "In which city was the coach" in seen["explorer?run=one"]["text"]
    assert "Traceback" not in app["log"].read_text()


CELL = """
JSON.stringify((() => {
  // the page position of the flip matrix's first cell (example row 0, selector column 0)
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g._fullLayout
    && (g._fullData || []).some(t => t.name === 'cells'));
  gd.scrollIntoView({block: 'center'});
  const cells = gd._fullData.find(t => t.name === 'cells'), L = gd._fullLayout, r = gd.getBoundingClientRect();
  return {x: r.left + L.xaxis._offset + L.xaxis.d2p(cells.x[0]), y: r.top + L.yaxis._offset + L.yaxis.d2p(cells.y[0]),
          example: cells.customdata[0][0], selector: cells.customdata[0][1]};
})())
"""


def test_a_flip_matrix_cell_opens_its_example_in_the_explorer(app, tmp_path):
    seen = {}

    async def steps(browser: Browser) -> None:
        check(await browser.open(f"{app['url']}/flips?run=wide", 1, "Decision flips"), "flips")
        await asyncio.sleep(1)
        cell = await browser.click_at(CELL)
        seen["cell"], seen["explorer"] = cell, await browser.settle(5, "Example explorer")
        check(seen["explorer"], "explorer opened from a flip-matrix cell")

    browse(tmp_path / "profile", steps)
    url, cell = seen["explorer"]["url"], seen["cell"]
    assert "/explorer?" in url and f"example={cell['example']}" in url and "run=wide" in url, url
    assert f"selectors={cell['selector']}" in url.replace("%3A", ":"), url


def test_markdown_in_data_is_shown_as_text_and_fetches_nothing(app, tmp_path):
    Recorder.requests.clear()
    seen = {}

    async def steps(browser: Browser) -> None:
        seen["explorer"] = await browser.open(f"{app['url']}/explorer?run=leak", 4, "Example explorer")
        await browser.evaluate("[...document.querySelectorAll('summary')].forEach(s => s.click())")  # passages
        await asyncio.sleep(2)
        seen["passages"] = await browser.probe()
        seen["runs"] = await browser.open(f"{app['url']}/?run=leak", 0, "KV Repair Workbench")
        await asyncio.sleep(2)

    browse(tmp_path / "profile", steps)
    assert Recorder.requests == [], f"the browser fetched URLs written in data: {Recorder.requests}"
    check(seen["explorer"], "explorer on the leak example")
    check(seen["runs"], "runs on the leak example")
    for expected in (f"Question: Where does the coach live? {app['image']}", f"Gold: Tressamor {app['image']}"):
        assert expected in seen["explorer"]["text"]
    assert f"Mira Tessk {app['image']} lives" in seen["passages"]["text"]


def figure_alone(fig, folder: Path) -> dict:
    """`fig` drawn alone on a page in a fresh Chromium: the probe's state once it has drawn, with
    `ranges` ([x range, y range] of each plot as plotly laid them out)."""
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / "figure.html"
    page.write_text(fig.to_html(include_plotlyjs=True, full_html=True))
    found = {}

    async def steps(browser: Browser) -> None:
        await browser.call("Page.navigate", url=page.as_uri())
        deadline = time.time() + 60
        while (state := await browser.probe())["plots"] < 1:
            assert time.time() < deadline, "the figure did not draw"
            await asyncio.sleep(0.5)
        found.update(state, ranges=json.loads(await browser.evaluate(
            "JSON.stringify([...document.querySelectorAll('.js-plotly-plot')].map(g => "
            "[g._fullLayout.xaxis.range, g._fullLayout.yaxis.range]))")))

    browse(folder / "profile", steps)
    return found


def test_the_axis_check_catches_the_old_unit_curve_figure(tmp_path):
    """The check above, in the browser, fails the first version's unit-curve figure (x = 256 on a
    log axis stretches it to 10^256) and passes today's figure drawn from the same numbers."""
    import pandas as pd

    from workbench.plots import unit_curve_figure

    summary = pd.DataFrame({"unit": [1, 16, 64, 256], "informed_error": [0.08, 0.12, 0.2, 0.3],
                            "random_error": [0.2, 0.22, 0.25, 0.31], "unrepaired_error": [0.35] * 4,
                            "budget_share": [0.2, 0.2, 0.31, 0.5], "budget_matched": [True, True, False, False],
                            "prompts_won": [3] * 4, "n_prompts": [3] * 4, "p_value": [0.1] * 4})
    found = {name: figure_alone(fig, tmp_path / name)["problems"]
             for name, fig in (("old", old_unit_curve_figure()), ("new", unit_curve_figure(summary)))}
    assert any("xaxis is stretched" in p for p in found["old"]), found["old"]
    assert found["new"] == []


def test_the_picks_matrix_with_an_evidence_row_draws_in_the_browser(tmp_path):
    """The picks matrix with its gold-evidence row drew blank in Chromium (two heatmaps on one
    category axis: plotly.js failed in its calc); on a numeric row axis every row is in range."""
    import pandas as pd

    from workbench.plots import picks_matrix

    n = 40
    tokens = pd.DataFrame({"position": range(n), "reused": [5 <= i < 35 for i in range(n)],
                           "segment": ["prefix"] * 5 + ["passage 1"] * 15 + ["passage 2"] * 15 + ["suffix"] * 5,
                           "token": [f"t{i}" for i in range(n)], "evidence": [10 <= i < 14 for i in range(n)]})
    found = figure_alone(picks_matrix(tokens, {"a": [6, 7, 8], "b": [10, 11]}, highlight=12), tmp_path)
    (x, y), = found["ranges"]
    assert x == [-0.5, 29.5] and sorted(y) == [-0.5, 3.5], found["ranges"]  # 30 reused tokens; 4 rows
    assert found["problems"] == [] and found["exceptions"] == []


TOKEN = """
JSON.stringify((() => {
  // the page position of the strip's 20th token cell (the invisible marker that carries its click)
  const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => g._fullLayout
    && (g._fullData || []).some(t => t.name === 'tokens'));
  gd.scrollIntoView({block: 'center'});
  const cells = gd._fullData.find(t => t.name === 'tokens'), L = gd._fullLayout, r = gd.getBoundingClientRect();
  return {x: r.left + L.xaxis._offset + L.xaxis.d2p(cells.x[20]), y: r.top + L.yaxis._offset + L.yaxis.d2p(cells.y[20]),
          position: cells.customdata[20][0]};
})())
"""
MARKED = """
JSON.stringify([...document.querySelectorAll('.js-plotly-plot')]
  .filter(gd => gd._fullLayout && (gd.layout.shapes || []).some(s => s.name === 'chosen token'))
  .map(gd => String((gd.layout.title || {}).text || '')))
"""
SCROLL_TO = """
(() => { const gd = [...document.querySelectorAll('.js-plotly-plot')].find(g => String((g.layout.title || {}).text
  || '').includes(%s)); gd.scrollIntoView({block: 'start'}); window.scrollBy(0, -120); return !!gd; })()
"""


def test_a_token_clicked_in_the_strip_is_marked_in_every_figure(app, tmp_path):
    seen = {}

    async def steps(browser: Browser) -> None:
        url = f"{app['url']}/explorer?run=wide&example=q1&budget=0.2&selectors=cadence-grad,cacheblend"
        check(await browser.open(url, 6, "Example explorer"), "explorer")
        await asyncio.sleep(1)
        cell = await browser.click_at(TOKEN)
        await asyncio.sleep(2)
        state = await browser.settle(6, "Example explorer")
        check(state, "explorer after a click on a token")
        seen.update(cell=cell, state=state, marked=json.loads(await browser.evaluate(MARKED)))
        if SHOTS:
            for name, title in (("explorer-token", "'outlined: '"), ("explorer-token-heatmaps", "'splice vs dense'"),
                                ("explorer-a-vs-b", "' recompute at b = '"),
                                ("explorer-answer-tokens", "'probability of each token'")):
                await browser.evaluate(SCROLL_TO % title)
                await asyncio.sleep(1)
                await browser.screenshot(Path(SHOTS) / f"{name}.png")

    browse(tmp_path / "profile", steps)
    assert f"token={seen['cell']['position']}" in seen["state"]["url"], seen["state"]["url"]
    titles = " | ".join(seen["marked"])
    assert len(seen["marked"]) >= 5, titles  # strip, picks, deviation, layer signal, A against B
    assert "rows each selector recomputes" in titles and "splice vs dense" in titles
    assert f"Token at position {seen['cell']['position']}" in seen["state"]["text"]


def test_the_first_line_figure_at_a_studys_scale_draws_with_its_legend_and_labels_inside(tmp_path):
    """`first_line_figure` at 10.12w's scale (its eleven selectors less `none` and `full`, and the two
    references: eleven rows): every bar in range, the legend and every value label inside the figure,
    no squeezed axis."""
    import pandas as pd

    from workbench.plots.answer_lines import first_line_figure

    selectors = ["cacheblend", "densedev", "cadence", "cadence-grad", "bcr", "epic", "prophetkv", "relaxkv", "coin:bcr"]
    rows = [{"selector": s, "budget": 0.2, "cells": 200, "retrieved_first_line": 0.0 if i % 4 == 0 else i / 12,
             "retrieved_whole": min(1.0, (i + 1) / 11), "share_more": 0.5} for i, s in enumerate(selectors)]
    rows += [{"selector": s, "budget": float("nan"), "cells": 200, "retrieved_first_line": v,
              "retrieved_whole": 1.0, "share_more": 0.3} for s, v in (("dense", 0.685), ("splice", 0.496))]
    found = figure_alone(first_line_figure(pd.DataFrame(rows), 0.2), tmp_path)
    (x, y), = found["ranges"]
    assert x == [0, 1.02] and y[0] > y[1] and abs(y[0] - y[1]) == len(rows), found["ranges"]  # reversed, every row
    assert found["problems"] == [] and found["drawn"] == [] and found["exceptions"] == [], found
