"""The installed headless Chromium driven over the DevTools protocol (a websocket, `websocket-client`), offline.

`Browser` starts Chromium on a free port, opens one tab at a fixed viewport (1400 px wide by default), loads
local pages, evaluates JavaScript in them and takes screenshots. `PAGE_METRICS` is the script the book's
browser test and `python tests/chromium_cdp.py` (page heights and first-screen screenshots) measure pages with.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

# What the browser test checks on a built page, measured in the page: its height, the content column's width,
# every table wider than that column, every cell reading `nan` (a missing value: the whole cell, or a number's
# place in a merged cell; "loss nan at epoch 1", a diverged run's recorded reason, is text), every image with
# its alt text and caption, where the findings block starts, and whether a stale banner is shown.
PAGE_METRICS = r"""
(() => {
  const article = document.querySelector('article.bd-article') || document.body;
  const style = getComputedStyle(article);
  const column = {width: article.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)};
  const top = el => el.getBoundingClientRect().top + window.scrollY;
  const wide = [];
  for (const t of article.querySelectorAll('table')) {
    const r = t.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // inside a closed <details>: measured when opened below
    const width = Math.max(r.width, t.scrollWidth);
    if (width > column.width + 1) wide.push({width: width, column: column.width,
      head: (t.querySelector('tr') || t).innerText.slice(0, 80)});
  }
  const nan = [...article.querySelectorAll('td, th')].map(c => c.innerText.trim())
    .filter(s => /^(nan|NaN|<NA>|None)$/.test(s) || /(^|[·±\[,]\s*)nan\s*([·±\],%]|$)/.test(s));
  const images = [...article.querySelectorAll('img')].map(img => {
    const figure = img.closest('figure');
    const caption = figure ? (figure.querySelector('figcaption') || {innerText: ''}).innerText.trim() : '';
    return {src: img.getAttribute('src'), alt: img.getAttribute('alt') || '', caption: caption};
  });
  const findings = article.querySelector('.xmr-findings');
  return {
    height: document.documentElement.scrollHeight,
    page_width: document.documentElement.scrollWidth,
    column: column.width,
    wide: wide,
    nan: nan.slice(0, 20),
    n_nan: nan.length,
    tables: article.querySelectorAll('table').length,
    images: images,
    findings_top: findings ? top(findings) : null,
    stale: article.querySelectorAll('.xmr-stale').length,
    provenance: article.querySelectorAll('.xmr-provenance').length,
  };
})()
"""
OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => d.open = true); true"


def find_chromium() -> str | None:
    """The path of an installed Chromium or Chrome, or None."""
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class Browser:
    """One headless Chromium tab at `width` x `height` CSS pixels (device scale 1)."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900) -> None:
        import websocket

        self._profile = tempfile.mkdtemp(prefix="xmr-chromium-")
        self._proc = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--hide-scrollbars", "--remote-debugging-port=0", f"--user-data-dir={self._profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.time() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.time() > deadline or self._proc.poll() is not None:
                self.close()
                raise RuntimeError(f"{executable} did not open its DevTools port within 60 s")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as reply:
            tabs = [t for t in json.load(reply) if t.get("type") == "page"]
        self._ws = websocket.create_connection(tabs[0]["webSocketDebuggerUrl"], timeout=120, suppress_origin=True)
        self._id = 0
        self.width, self.height = width, height
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  width=width, height=height, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events in between are dropped)."""
        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def open(self, page: Path) -> None:
        """Load a local page and wait until its scripts have run and its images are decoded."""
        self.call("Page.navigate", url=page.resolve().as_uri())
        self.evaluate("new Promise(done => { const ready = () => document.readyState === 'complete' ? done(true)"
                      " : setTimeout(ready, 50); ready(); })")
        self.evaluate("Promise.race([new Promise(done => setTimeout(done, 20000)), Promise.all([...document.images]"
                      ".map(i => i.decode().catch(() => null)))]).then(() => true)")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, height: int | None = None, quality: int | None = None) -> None:
        """The top `height` pixels of the page (the viewport when None), as PNG, or JPEG at `quality`."""
        self.evaluate("window.scrollTo(0, 0); true")
        clip = {"x": 0, "y": 0, "width": self.width, "height": height or self.height, "scale": 1}
        fmt = {"format": "jpeg", "quality": quality} if quality else {"format": "png"}
        beyond = (height or self.height) > self.height  # only then: it can shift a page sideways in the shot
        data = self.call("Page.captureScreenshot", clip=clip, captureBeyondViewport=beyond, **fmt)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if getattr(self, "_ws", None) is not None:
            self._ws.close()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:  # noqa: PYI034 (a plain class, never subclassed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compress(png: Path, colours: int = 96) -> None:
    """Rewrite a screenshot with a palette of `colours` (a page's text and badges survive it), optimised."""
    from PIL import Image

    image = Image.open(png).convert("RGB")
    image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(png, optimize=True)


def main(argv: list[str]) -> None:
    """`python tests/chromium_cdp.py HTML_DIR [SHOTS_DIR]`: each chapter page's height and findings position at
    1400 px, its wide tables, `nan` cells and images without a caption; with SHOTS_DIR, its first screen as a
    palette PNG."""
    html = Path(argv[0])
    shots = Path(argv[1]) if len(argv) > 1 else None
    executable = find_chromium()
    if executable is None:
        raise SystemExit("no Chromium found")
    with Browser(executable) as browser:
        for page in sorted(html.glob("0*/*.html")):
            browser.open(page)
            m = browser.evaluate(PAGE_METRICS)
            browser.evaluate(OPEN_DETAILS)
            opened = browser.evaluate(PAGE_METRICS)
            uncaptioned = sum(1 for i in m["images"] if not i["caption"])
            print(f"{page.relative_to(html)}\theight {m['height']}\twidth {m['page_width']}"
                  f"\tfindings at {m['findings_top']}"
                  f"\twide tables {len(m['wide'])} ({len(opened['wide'])} with details open)\tnan cells {m['n_nan']}"
                  f"\timages {len(m['images'])} ({uncaptioned} without caption)\tstale {m['stale']}")
            if shots is not None and page.stem != "claims":
                shots.mkdir(parents=True, exist_ok=True)
                browser.open(page)
                shot = shots / f"{page.parent.name}_{page.stem}.png"
                browser.screenshot(shot)
                compress(shot)


if __name__ == "__main__":
    main(sys.argv[1:])
