"""End to end in a real headless Chromium: start the app on localhost, open the Example
explorer, check that the token strip and a heatmap rendered, save a screenshot.

Needs Debian's `chromium` package (`apt-get install -y chromium`; `.ci/run` installs it);
where /usr/bin/chromium is absent the test is skipped and says so. Chromium is driven over
the DevTools protocol (tornado's websocket client, which Streamlit already depends on), so
the test waits for the page to finish rendering instead of guessing a time budget.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from conftest import tiny_model
from workbench.experiments.sweep import SweepConfig, run_sweep

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
PAGE_TIMEOUT = 120  # seconds for the server to start and the explorer to render (imports torch)

pytestmark = pytest.mark.slow


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


PROBE = """JSON.stringify({
  plots: document.querySelectorAll('.js-plotly-plot').length,
  heatmaps: document.querySelectorAll('.js-plotly-plot .heatmaplayer image').length,
  exceptions: document.querySelectorAll('[data-testid="stException"]').length,
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
  text: document.body ? document.body.innerText : ''
})"""


async def render(url: str, profile: Path, shot: Path, deadline: float) -> dict:
    """Open `url` in headless Chromium, wait for the explorer's figures, screenshot; the last probe."""
    from tornado.websocket import websocket_connect

    browser = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,2000",
                                "--remote-debugging-port=0", url],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert time.time() < deadline and browser.poll() is None, "chromium did not open its DevTools port"
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            page = next(t for t in json.load(response) if t["type"] == "page")
        ws = await websocket_connect(page["webSocketDebuggerUrl"], max_message_size=1 << 28)
        calls = 0

        async def call(method: str, **params) -> dict:
            nonlocal calls
            calls += 1
            ws.write_message(json.dumps({"id": calls, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.read_message())
                if message.get("id") == calls:
                    assert "error" not in message, message
                    return message["result"]

        state = {}
        while time.time() < deadline:
            result = await call("Runtime.evaluate", expression=PROBE, returnByValue=True)
            state = json.loads(result["result"]["value"])
            if (state["plots"] >= 4 and state["heatmaps"] >= 2 and not state["running"]) or state["exceptions"]:
                break
            await asyncio.sleep(1)
        await asyncio.sleep(1)  # let plotly finish drawing before the picture
        shot.write_bytes(base64.b64decode((await call("Page.captureScreenshot", format="png"))["data"]))
        ws.close()
        return state
    finally:
        browser.terminate()
        try:
            browser.wait(10)
        except subprocess.TimeoutExpired:
            browser.kill()


def test_explorer_renders_in_chromium(tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed: {CHROMIUM} is absent (apt-get install -y chromium)")
    torch.set_num_threads(1)
    model = tiny_model("llama")
    model.hf.save_pretrained(tmp_path / "model")
    model.tokenizer.save_pretrained(tmp_path / "model")
    run_sweep(model, SweepConfig(dataset=f"jsonl:{ROOT / 'tests/fixtures/sample.jsonl'}", n=3,
                                 selectors=("none", "full", "random", "cacheblend", "densedev", "bcr:single"),
                                 budgets=(0.2, 0.5), options={"max_new_tokens": 4}),
              tmp_path / "runs" / "tiny", progress=False)

    port = free_port()
    env = {**os.environ, "KVWB_RUNS": str(tmp_path / "runs"), "KVWB_MODEL": str(tmp_path / "model"),
           "OMP_NUM_THREADS": "1", "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false"}
    log = (tmp_path / "streamlit.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app" / "Home.py"),
                               "--server.headless", "true", "--server.port", str(port),
                               "--server.address", "127.0.0.1", "--server.fileWatcherType", "none"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + PAGE_TIMEOUT
        wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", server, deadline)
        shot = tmp_path / "explorer.png"
        state = asyncio.run(render(f"http://127.0.0.1:{port}/explorer", tmp_path / "chromium-profile", shot,
                                   deadline))
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    server_log = (tmp_path / "streamlit.log").read_text()
    assert state.get("exceptions") == 0, state.get("text", "")[-2000:]
    assert state["plots"] >= 4, (state, server_log[-2000:])  # token strip, picks, heatmaps, residual
    assert state["heatmaps"] >= 2  # the token strip and the layer x token heatmap are plotly heatmaps
    text = state["text"]
    for expected in ("Example explorer", "Tokens", "Layer × token", "In which city was the coach of Varek Olundi",
                     "Runs directory"):
        assert expected in text, expected
    assert shot.stat().st_size > 20_000  # a real picture, not a blank page
    assert "Traceback" not in server_log
