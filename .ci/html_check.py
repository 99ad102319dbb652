"""Open each ``--html`` page in headless Chromium over the DevTools protocol and check it (the .ci/html-check tier).

Per page: no console error or uncaught exception, no network request beyond the file itself, the expected sections
in order, a hover that shows a plan (pareto), sorting and filtering that act (solve, batch), a print rendering, and
a full-page screenshot that is not blank (grey-level variance), kept in the screenshots folder.

Usage: python html_check.py CHROMIUM PAGES_DIR SCREENSHOT_DIR EXPECT.json
EXPECT.json maps a page file name to {"sections": [...], "hover": "text the chosen point's tooltip must hold"}.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket
from PIL import Image, ImageStat

MIN_VARIANCE = 50.0  # grey-level variance of a page with text and charts is in the thousands; blank is 0


class Chromium:
    """A headless Chromium and one DevTools websocket to its first page."""

    def __init__(self, exe: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="html-check-")
        args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*",
                f"--user-data-dir={self.profile}", "--window-size=1280,900", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its answer, keeping the events that arrive meanwhile."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 20.0) -> None:
        """Read messages until ``event`` arrives."""
        end = time.time() + timeout
        while time.time() < end:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == event:
                return
        raise TimeoutError(event)

    def js(self, expression: str) -> Any:
        """Evaluate JavaScript in the page and return its (JSON) value."""
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def close(self) -> None:
        """Stop the browser and remove its profile."""
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


def problems_in(events: list[dict[str, Any]], page_url: str) -> list[str]:
    """Console errors, uncaught exceptions, and any request other than the page itself."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            out.append(f"exception: {p['exceptionDetails'].get('text')} {p['exceptionDetails'].get('exception', {})}")
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            out.append(f"console {p['type']}: {[a.get('value') for a in p.get('args', [])]}")
        elif m == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        elif m == "Network.requestWillBeSent" and p["request"]["url"] != page_url:
            out.append(f"network request: {p['request']['url']}")
    return out


def hover(b: Chromium, selector: str) -> str:
    """Move the mouse onto the element's centre; return the tooltip's text ('' when hidden)."""
    rect = b.js(f"(() => {{ const el = document.querySelector({json.dumps(selector)}); el.scrollIntoView("
                "{block: 'center'}); const r = el.getBoundingClientRect(); return [r.x + r.width / 2, "
                "r.y + r.height / 2]; })()")  # fmt: skip
    b.call("Input.dispatchMouseEvent", type="mouseMoved", x=rect[0], y=rect[1])
    return b.js("(() => { const t = document.getElementById('tip'); return t.hidden ? '' : t.textContent; })()")


def screenshot(b: Chromium, path: Path) -> float:
    """Full-page PNG to ``path``; return its grey-level variance."""
    b.js("window.scrollTo(0, 0)")
    size = b.call("Page.getLayoutMetrics")["cssContentSize"]
    height = min(int(size["height"]), 6000)
    shot = b.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                  clip={"x": 0, "y": 0, "width": 1280, "height": height, "scale": 1})  # fmt: skip
    data = base64.b64decode(shot["data"])
    path.write_bytes(data)
    return ImageStat.Stat(Image.open(io.BytesIO(data)).convert("L")).var[0]


def check_page(b: Chromium, page: Path, expect: dict[str, Any], shots: Path) -> list[str]:
    """Every check on one page; the list of what failed."""
    b.events.clear()
    url = page.resolve().as_uri()
    b.call("Page.navigate", url=url)
    b.wait_for("Page.loadEventFired")
    fails = []
    sections = b.js("Array.from(document.querySelectorAll('main > section')).map(s => s.id)")
    if sections != expect["sections"]:
        fails.append(f"sections {sections}, expected {expect['sections']}")
    empty = b.js("Array.from(document.querySelectorAll('main > section')).filter(s => s.innerText.trim().length < 40)"
                 ".map(s => s.id)")  # fmt: skip
    if empty:
        fails.append(f"sections with no content: {empty}")
    if expect.get("hover"):
        text = hover(b, ".dot.chosen")
        missing = [w for w in expect["hover"] if w not in text]
        if not text or missing:
            fails.append(f"hover on the chosen point shows {text!r}, missing {missing}")
        b.call("Input.dispatchMouseEvent", type="mouseMoved", x=2, y=2)
    if expect.get("sort"):
        table, col = expect["sort"]
        before = b.js(f"Array.from(document.querySelectorAll('#{table} tbody tr')).map(r => r.cells[{col}]"
                      ".getAttribute('data-v'))")  # fmt: skip
        b.js(f"document.querySelectorAll('#{table} th')[{col}].click(); "
             f"document.querySelectorAll('#{table} th')[{col}].click()")  # twice: descending
        after = b.js(f"Array.from(document.querySelectorAll('#{table} tbody tr')).map(r => r.cells[{col}]"
                     ".getAttribute('data-v'))")  # fmt: skip
        if after != sorted(before, key=float, reverse=True):
            fails.append(f"sorting {table} column {col} descending gave {after}")
    if expect.get("filter"):
        query, shown = expect["filter"]
        b.js(f"(() => {{ const i = document.getElementById('batch-filter'); i.value = {json.dumps(query)}; "
             "i.dispatchEvent(new Event('input')); })()")
        n = b.js("document.querySelectorAll('#batch-table tbody tr:not([hidden])').length")
        if n != shown:
            fails.append(f"filter {query!r} shows {n} rows, expected {shown}")
        b.js("(() => { const i = document.getElementById('batch-filter'); i.value = ''; "
             "i.dispatchEvent(new Event('input')); })()")
    pdf = b.call("Page.printToPDF", printBackground=True)
    if len(base64.b64decode(pdf["data"])) < 5000:
        fails.append("printing gives an (almost) empty PDF")
    variance = screenshot(b, shots / f"{page.stem}.png")
    if variance < MIN_VARIANCE:
        fails.append(f"screenshot is blank (grey variance {variance:.1f})")
    fails += problems_in(b.events, url)
    print(f"html-check: {page.name}: {len(sections)} sections, screenshot variance {variance:,.0f}, "
          f"{'ok' if not fails else 'FAILED'}")  # fmt: skip
    return fails


BAD_PAGE = ('<!DOCTYPE html><html><head><title>bad</title></head><body><img src="http://127.0.0.1:9/x.png">'
            "<script>console.error('planted'); undefinedFunction();</script></body></html>")


def self_test(b: Chromium, folder: Path) -> None:
    """The checks can fail: a planted page with a request, a console error and an exception is caught on each."""
    page = folder / "planted-bad.html"
    page.write_text(BAD_PAGE)
    b.events.clear()
    url = page.resolve().as_uri()
    b.call("Page.navigate", url=url)
    b.wait_for("Page.loadEventFired")
    found = " | ".join(problems_in(b.events, url))
    page.unlink()
    for what in ("network request: http://127.0.0.1:9/x.png", "console error", "exception"):
        if what not in found:
            raise SystemExit(f"html-check: self-test: the planted page's {what!r} was not caught ({found})")


def main(exe: str, pages: str, shots: str, expect_file: str) -> int:
    """Check every page named in the expectations; exit 1 listing the failures."""
    expect = json.loads(Path(expect_file).read_text())
    out = Path(shots)
    out.mkdir(parents=True, exist_ok=True)
    b = Chromium(exe)
    try:
        for name in ("Page", "Runtime", "Log", "Network"):
            b.call(f"{name}.enable")
        b.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
        self_test(b, Path(pages))
        failures = {name: check_page(b, Path(pages) / name, e, out) for name, e in sorted(expect.items())}
    finally:
        b.close()
    bad = {k: v for k, v in failures.items() if v}
    for name, fails in bad.items():
        for f in fails:
            print(f"html-check: {name}: {f}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
