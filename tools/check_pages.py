#!/usr/bin/env python
"""Open every page of the built book in headless Chromium, offline, and fail on what a reader would see broken.

For each ``.html`` file under the book's output folder (default ``_build/html``) the page is served from
``127.0.0.1`` and loaded in Debian's ``chromium`` with no network, then checked for:

* **maths that did not render**: ``$$``, ``\\[``, ``\\(``, ``\\begin{``, a TeX command (``\\sqrt{``), a TeX
  subscript (``_{``) or an inline ``$...$`` holding TeX left in the page's visible text (code and program
  output excluded); a page with maths elements but no
  MathJax output; a maths element MathJax left untouched; a MathJax error (``merror``, undefined macro);
* **images**: an ``<img>`` that does not decode (missing file or broken data), any resource answered
  with an HTTP error or that failed to load; an image with no alt text or with a file name for one (what
  myst-nb writes for a figure whose cell says nothing), and a figure of a notebook's output with no caption
  (a cell gives both with its metadata ``mystnb: {figure: {caption, name}, image: {alt}}``);
* **links**: an internal link to a file that does not exist, or to an ``#anchor`` that no element of the
  target page carries (ids are read from the rendered pages, so anchors made by JavaScript count);
* **JavaScript**: an uncaught exception, a ``console.error``, or a browser error logged while loading;
* **the network**: any request to a host other than the local server (the book must work offline);
* **glyphs**: a character of the page's text (code and program output included) that no installed font
  has, so that the reader sees an empty box: the Chinese and Japanese of chapter 12 and of the glossary need
  Debian's ``fonts-noto-cjk`` (installed by ``make setup``). Each non-ASCII character is drawn on a canvas
  in its element's font and compared, pixel for pixel, with a code point that no font has (U+10FFFD): when
  Chromium finds no font for a character it draws that same missing-glyph box;
* on chapter pages (those built from a notebook): the ``.ipynb`` download button and the
  "In transformer_lib" box (chapter run time) must be there.

A screenshot of each chapter's first screen is written to ``_build/screenshots/<page>.png``.

Chromium is driven over the Chrome DevTools Protocol on a pipe (``--remote-debugging-pipe``): no
driver package, no port. The script installs nothing: ``make setup`` installs Debian's ``chromium`` with
``apt-get``, and when it is missing the check fails with the command to run. It never downloads a
browser build.

Usage::

    python tools/check_pages.py                 # check _build/html
    python tools/check_pages.py path/to/html    # another build
    python tools/check_pages.py --self-test     # prove each check fails on a page made to break it

Exit status 0 when every page passes, 1 when any check fails (each failure is printed as
``page: kind: detail``), 2 when Chromium cannot be found or started.
"""
from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import posixpath
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-default-apps",
    "--mute-audio",
    "--hide-scrollbars",
    "--disable-dev-shm-usage",
    # No network: every host name resolves to nothing, except the local server that serves the book.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--remote-debugging-pipe",
]
VIEWPORT = (1280, 800)
LOAD_TIMEOUT_S = 60.0
LOCAL_SCHEMES = {"data", "blob", "about", "chrome", "devtools", "chrome-extension"}

# Runs in the page after its load event. Waits for MathJax and for every image, then reports what it sees.
PAGE_PROBE = r"""
(async () => {
  const out = {};
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) { out.mathjaxFailure = String(e); }
  }
  for (const img of document.images) img.loading = "eager";
  out.brokenImages = [];
  out.images = Array.from(document.images).map((img) => img.getAttribute("src"));
  // What a reader who cannot see the image gets (its alt text), and whether a notebook's figure has a caption.
  out.imageText = Array.from(document.images).map((img) => {
    const fig = img.closest("figure");
    return {src: img.getAttribute("src") || "(no src)", alt: img.getAttribute("alt"),
            output: !!img.closest(".cell_output, .output"),
            caption: !!(fig && fig.querySelector("figcaption") && fig.querySelector("figcaption").textContent.trim())};
  });
  await Promise.all(Array.from(document.images).map(async (img) => {
    try { await img.decode(); } catch (e) {}
    if (!img.complete || img.naturalWidth === 0) out.brokenImages.push(img.getAttribute("src") || "(no src)");
  }));
  // Raw maths left in the visible text (code, program output and MathJax's own nodes excluded).
  const SKIP = new Set(["SCRIPT", "STYLE", "CODE", "PRE", "TEXTAREA", "KBD", "SAMP", "NOSCRIPT",
                        "MJX-CONTAINER", "MJX-ASSISTIVE-MML", "svg"]);
  const skipped = (node) => {
    for (let el = node.parentElement; el; el = el.parentElement) {
      if (SKIP.has(el.tagName) || SKIP.has(el.tagName.toUpperCase())) return true;
      if (el.classList && (el.classList.contains("highlight") || el.classList.contains("output"))) return true;
    }
    return false;
  };
  const patterns = [
    [/\$\$/, "$$"], [/\\\[/, "\\["], [/\\\(/, "\\("], [/\\begin\{/, "\\begin{"],
    [/\\[A-Za-z]+\{/, "TeX command"], [/[_^]\{[^}\s]*\}/, "TeX sub/superscript"],
    [/(^|[^\\$\w])\$(?=\S)[^$\n]*?[\\_^{][^$\n]*?\S\$(?!\w)/, "$...$"],
  ];
  out.rawMath = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.nodeValue;
    if (!text || text.indexOf("$") < 0 && text.indexOf("\\") < 0) continue;
    if (skipped(n)) continue;
    for (const [re, label] of patterns) {
      const m = re.exec(text);
      if (m) {
        const at = Math.max(0, m.index - 30);
        out.rawMath.push(label + " in \u00ab" + text.slice(at, m.index + 50).replace(/\s+/g, " ") + "\u00bb");
        break;
      }
    }
  }
  const maths = Array.from(document.querySelectorAll("span.math, div.math"));
  out.mathElements = maths.length;
  out.mathjaxOutputs = document.querySelectorAll("mjx-container").length;
  out.untypeset = maths.filter((el) => !el.querySelector("mjx-container"))
                       .map((el) => el.textContent.trim().slice(0, 80));
  out.mathErrors = [];
  for (const c of document.querySelectorAll("mjx-container")) {
    const err = c.querySelector("[data-mjx-error]");
    if (err) { out.mathErrors.push(err.getAttribute("data-mjx-error")); continue; }
    const red = c.querySelector('mjx-assistive-mml mtext[mathcolor="red"]')
             || c.querySelector('[data-mml-node="mtext"][fill="red"], mjx-mtext[style*="red"]');
    if (red) out.mathErrors.push("undefined macro " + (red.textContent || "").trim());
  }
  out.ids = Array.from(document.querySelectorAll("[id]")).map((el) => el.id)
      .concat(Array.from(document.querySelectorAll("a[name]")).map((el) => el.getAttribute("name")));
  out.links = Array.from(document.querySelectorAll(
      'a[href], area[href], link[href][rel~="next"], link[href][rel~="prev"], '
      + 'link[href][rel~="index"], link[href][rel~="search"]'))
      .map((a) => a.href);
  out.downloadIpynb = Array.from(document.querySelectorAll("a.btn-download-source-button"))
      .map((a) => a.href).filter((h) => h.split("?")[0].endsWith(".ipynb"));
  out.libraryBox = document.querySelectorAll(".tl-chapter-box").length;
  out.runtime = Array.from(document.querySelectorAll(".tl-chapter-box .tl-runtime")).map((e) => e.textContent.trim());
  out.title = document.title;
  // Glyphs: each non-ASCII letter, digit, punctuation or symbol of the text, drawn in its element's font,
  // must differ from the box drawn for U+10FFFD, a code point no font has (Chromium draws that box for
  // every character it finds no font for).
  await document.fonts.ready;
  out.missingGlyphs = [];
  const canvas = document.createElement("canvas");
  canvas.width = 64; canvas.height = 64;
  const ctx = canvas.getContext("2d", {willReadFrequently: true});
  const picture = (font, ch) => {
    ctx.clearRect(0, 0, 64, 64);
    ctx.font = font; ctx.textBaseline = "top"; ctx.fillStyle = "#000";
    ctx.fillText(ch, 8, 8);
    return ctx.getImageData(0, 0, 64, 64).data.join(",");
  };
  const NOGLYPH = String.fromCodePoint(0x10FFFD);
  const VISIBLE = /[\p{L}\p{N}\p{P}\p{S}]/u;
  const boxes = new Map(), tried = new Set();
  const glyphWalker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = glyphWalker.nextNode(); n; n = glyphWalker.nextNode()) {
    const text = n.nodeValue;
    if (!text || !/[^\x00-\x7f]/.test(text) || !n.parentElement) continue;
    let inside = false;
    for (let el = n.parentElement; el; el = el.parentElement) {
      const tag = el.tagName.toUpperCase();
      if (["SCRIPT", "STYLE", "NOSCRIPT", "TEXTAREA", "MJX-CONTAINER", "SVG"].includes(tag)) inside = true;
    }
    if (inside) continue;
    const cs = getComputedStyle(n.parentElement);
    const font = `${cs.fontStyle} ${cs.fontWeight} 40px ${cs.fontFamily}`;
    if (!boxes.has(font)) boxes.set(font, picture(font, NOGLYPH));
    for (const ch of text) {
      if (ch.codePointAt(0) < 0x80 || !VISIBLE.test(ch) || tried.has(font + ch)) continue;
      tried.add(font + ch);
      if (picture(font, ch) === boxes.get(font)) {
        const at = text.indexOf(ch);
        out.missingGlyphs.push(`\u00ab${ch}\u00bb (U+${ch.codePointAt(0).toString(16).toUpperCase()
          .padStart(4, "0")}) in \u00ab${text.slice(Math.max(0, at - 20), at + 20).replace(/\s+/g, " ")
          .trim()}\u00bb, font ${cs.fontFamily}`);
      }
    }
  }
  out.glyphsChecked = tried.size;
  return JSON.stringify(out);
})()
"""


# --------------------------------------------------------------------------------------------- Chromium


INSTALL_HINT = "run `make setup` (it installs Debian's chromium) or `sudo apt-get install chromium`"
GLYPH_HINT = "for Chinese and Japanese: `make setup` installs fonts-noto-cjk"


def find_chromium() -> str:
    """Path to Debian's chromium. The page check installs nothing: `make setup` does."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise FileNotFoundError(f"chromium is not installed: {INSTALL_HINT}")


class CDPError(RuntimeError):
    pass


class Browser:
    """A headless Chromium driven over the DevTools protocol on a pipe (fd 3: commands, fd 4: replies)."""

    def __init__(self, executable: str):
        self.profile = tempfile.mkdtemp(prefix="check-pages-profile-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # Move the child's ends out of the 3/4 range first, so the dup2 calls below cannot clobber them.
        child_in = fcntl_dup_high(to_chrome_r)
        child_out = fcntl_dup_high(from_chrome_w)
        os.close(to_chrome_r)
        os.close(from_chrome_w)

        def wire_pipes() -> None:  # runs in the child, before exec
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        args = [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=wire_pipes, close_fds=False)
        os.close(child_in)
        os.close(child_out)
        self._write = os.fdopen(to_chrome_w, "wb", buffering=0)
        self._read = os.fdopen(from_chrome_r, "rb", buffering=0)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.events: queue.Queue = queue.Queue()
        self._stderr_tail: list[str] = []
        threading.Thread(target=self._reader, daemon=True).start()
        threading.Thread(target=self._stderr_reader, daemon=True).start()
        self.session: str | None = None

    def _stderr_reader(self) -> None:
        for line in self.proc.stderr:
            self._stderr_tail = (self._stderr_tail + [line.decode("utf-8", "replace").rstrip()])[-20:]

    def _reader(self) -> None:
        buf = b""
        while True:
            chunk = self._read.read(1 << 16)
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        q = self._replies.get(msg["id"])
                    if q is not None:
                        q.put(msg)
                else:
                    self.events.put(msg)
        self.events.put({"method": "_closed"})

    def send(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60.0) -> dict:
        with self._lock:
            self._next_id += 1
            msg_id = self._next_id
            q: queue.Queue = queue.Queue()
            self._replies[msg_id] = q
        msg = {"id": msg_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        try:
            self._write.write(json.dumps(msg).encode() + b"\0")
        except BrokenPipeError as exc:
            raise CDPError(f"chromium exited: {' | '.join(self._stderr_tail)}") from exc
        try:
            reply = q.get(timeout=timeout)
        except queue.Empty:
            raise CDPError(f"no reply to {method} within {timeout:.0f} s") from None
        finally:
            with self._lock:
                self._replies.pop(msg_id, None)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')}")
        return reply.get("result", {})

    def open_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Network.setCacheDisabled", {"cacheDisabled": True})
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": VIEWPORT[0], "height": VIEWPORT[1], "deviceScaleFactor": 1, "mobile": False})

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10)
        except CDPError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def fcntl_dup_high(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


# ------------------------------------------------------------------------------------------- the server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the output to the failures
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# ------------------------------------------------------------------------------------------- the checks


@dataclass
class PageResult:
    page: str
    problems: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    is_chapter: bool = False
    runtime: str = ""
    seconds: float = 0.0
    stats: str = ""


def _local(url: str, base: str) -> bool:
    return url.startswith(base)


def load_and_probe(browser: Browser, url: str, base: str, rel: str, screenshot: Path | None,
                   is_chapter: bool = False) -> PageResult:
    """Load one page, wait for MathJax and its images, and record every problem a reader would meet."""
    result = PageResult(rel)
    t0 = time.monotonic()
    while not browser.events.empty():  # drop what the previous page left behind
        browser.events.get_nowait()
    nav = browser.send("Page.navigate", {"url": url})
    if nav.get("errorText"):
        result.problems.append(f"navigation: {nav['errorText']}")
        return result
    errors: list[str] = []
    requests: dict[str, str] = {}
    loaded = False
    deadline = time.monotonic() + LOAD_TIMEOUT_S

    def take(ev: dict) -> None:
        nonlocal loaded
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Page.loadEventFired":
            loaded = True
        elif method == "Network.requestWillBeSent":
            req_url = p["request"]["url"]
            requests[p["requestId"]] = req_url
            scheme = urllib.parse.urlsplit(req_url).scheme
            if scheme not in LOCAL_SCHEMES and not _local(req_url, base):
                errors.append(f"network: the page requests {req_url} (the book must work offline)")
        elif method == "Network.responseReceived":
            status = p["response"].get("status", 0)
            if status >= 400 and p["response"]["url"] != base + "favicon.ico":  # the browser's own request
                errors.append(f"resource: HTTP {status} for {_short(p['response']['url'], base)}")
        elif method == "Network.loadingFailed":
            if not p.get("canceled"):
                req_url = requests.get(p["requestId"], "?")
                errors.append(f"resource: {_short(req_url, base)} failed to load ({p.get('errorText')})")
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text", "")
            errors.append(f"javascript: uncaught {text.splitlines()[0] if text else 'exception'}"
                          f" at {_short(d.get('url', ''), base)}:{d.get('lineNumber', 0) + 1}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            errors.append(f"javascript: console.{p['type']}: {args[:200]}")
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            entry = p["entry"]
            if entry.get("source") != "network":  # network failures are reported above, once
                errors.append(f"javascript: {entry.get('source')}: {entry.get('text', '')[:200]}")
        elif method == "_closed":
            raise CDPError("chromium closed the connection")

    while not loaded:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            result.problems.append(f"load: no load event within {LOAD_TIMEOUT_S:.0f} s")
            return result
        try:
            take(browser.events.get(timeout=remaining))
        except queue.Empty:
            continue
    reply = browser.send("Runtime.evaluate", {"expression": PAGE_PROBE, "awaitPromise": True,
                                             "returnByValue": True}, timeout=LOAD_TIMEOUT_S)
    if "exceptionDetails" in reply:
        result.problems.append(f"probe: {reply['exceptionDetails'].get('text')}")
        return result
    info = json.loads(reply["result"]["value"])
    time.sleep(0.2)  # let late console errors and failed requests arrive
    while not browser.events.empty():
        take(browser.events.get_nowait())
    result.problems.extend(dict.fromkeys(errors))  # once each, in order

    for src in info["brokenImages"]:
        result.problems.append(f"image: {src} is missing or does not decode")
    result.problems.extend(image_text_problems(info["imageText"]))
    for hit in info["rawMath"]:
        result.problems.append(f"maths: raw TeX left on the page: {hit}")
    if info["mathElements"] and not info["mathjaxOutputs"]:
        result.problems.append(f"maths: {info['mathElements']} maths elements and no MathJax output")
    elif info["untypeset"]:
        for text in info["untypeset"][:5]:
            result.problems.append(f"maths: not typeset by MathJax: {text}")
    for text in info["mathErrors"]:
        result.problems.append(f"maths: MathJax error: {text}")
    if info.get("mathjaxFailure"):
        result.problems.append(f"maths: MathJax failed to start: {info['mathjaxFailure']}")
    for hit in info["missingGlyphs"][:10]:
        result.problems.append(f"glyph: no installed font has {hit} ({GLYPH_HINT})")
    result.ids = set(info["ids"])
    result.links = info["links"]
    result.is_chapter = is_chapter
    result.stats = (f"maths {info['mathElements'] - len(info['untypeset'])}/{info['mathElements']}, "
                    f"images {len(info['images'])}, links {len(info['links'])}, "
                    f"characters {info['glyphsChecked']}")
    result.runtime = "; ".join(info["runtime"])
    if result.is_chapter:
        if not info["downloadIpynb"]:
            result.problems.append("download: no .ipynb download button on a chapter page")
        if not info["libraryBox"]:
            result.problems.append("runtime: no 'In transformer_lib' box (run time) on a chapter page")
    if screenshot is not None:
        shot = browser.send("Page.captureScreenshot", {"format": "png"})
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
    result.seconds = time.monotonic() - t0
    return result


_FILE_NAME = re.compile(r"(^|/)[^\s/]+\.(png|jpe?g|svg|gif|webp)$", re.IGNORECASE)


def image_text_problems(images: list[dict]) -> list[str]:
    """An image with no alt text, or with a file name for one (what myst-nb writes when a cell says nothing),
    and a figure of a notebook's output with no caption: a reader who cannot see it gets nothing."""
    problems = []
    for img in images:
        src, alt = img["src"], (img["alt"] or "").strip()
        name = src.rsplit("/", 1)[-1]
        if not alt:
            problems.append(f"image: {name} has no alt text (give the cell mystnb.image.alt)")
        elif _FILE_NAME.search(alt) or alt == name:
            problems.append(f"image: the alt text of {name} is a file name ({alt!r}); describe the image")
        if img["output"] and not img["caption"]:
            problems.append(f"figure: {name} has no caption (give the cell mystnb.figure.caption)")
    return problems


def _redirect_target(path: Path) -> str | None:
    """The target of a meta-refresh redirect page (Jupyter Book's index.html), else None."""
    if path.stat().st_size > 2048:
        return None
    text = path.read_text(errors="replace")
    m = re.search(r'<meta\s+http-equiv="refresh"\s+content="\d+;\s*url=([^"]+)"', text, re.I)
    return m.group(1) if m else None


def _short(url: str, base: str) -> str:
    return url[len(base):] if url.startswith(base) else url


def check_links(results: dict[str, PageResult], html_dir: Path, base: str) -> None:
    """Internal links must reach a file, and their #anchor an id of the target page."""
    for res in results.values():
        seen: set[str] = set()
        for href in res.links:
            if href in seen or not href.startswith(base):
                continue
            seen.add(href)
            parts = urllib.parse.urlsplit(href)
            path = urllib.parse.unquote(parts.path)
            rel = posixpath.normpath(path.lstrip("/")) if path.strip("/") else "index.html"
            if rel.startswith(".."):
                res.problems.append(f"link: {href[len(base):]} points outside the book")
                continue
            target = html_dir / rel
            if target.is_dir():
                rel = posixpath.join(rel, "index.html")
                target = html_dir / rel
            if not target.is_file():
                res.problems.append(f"link: {href[len(base):]} leads nowhere (no file {rel})")
                continue
            frag = urllib.parse.unquote(parts.fragment)
            if frag and rel.endswith(".html"):
                ids = results[rel].ids if rel in results else None
                if ids is not None and frag not in ids:
                    res.problems.append(f"link: {href[len(base):]}: page {rel} has no anchor #{frag}")


def check_site(html_dir: Path, screenshots: Path | None, chromium: str, verbose: bool = True,
               every_screenshot: bool = False) -> dict[str, PageResult]:
    pages = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                   if not p.relative_to(html_dir).as_posix().startswith(("_static/", "_sources/")))
    if not pages:
        raise FileNotFoundError(f"no .html pages under {html_dir}: build the book first (make book)")
    server, base = serve(html_dir)
    browser = Browser(chromium)
    results: dict[str, PageResult] = {}
    try:
        browser.open_page()
        for rel in pages:
            redirect = _redirect_target(html_dir / rel)
            if redirect is not None:  # e.g. index.html -> book/intro.html: a reader lands on the target
                target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), redirect))
                res = PageResult(rel, links=[base + target])
                res.stats = f"redirect to {redirect}"
            else:
                # A chapter page is one built from a notebook: Sphinx copies its source to _sources/.
                chapter = (html_dir / "_sources" / (rel[: -len(".html")] + ".ipynb")).is_file()
                wanted = screenshots is not None and (chapter or every_screenshot)
                shot = screenshots / (rel[: -len(".html")].replace("/", "__") + ".png") if wanted else None
                res = load_and_probe(browser, base + urllib.parse.quote(rel), base, rel, shot, chapter)
            results[rel] = res
            if verbose:
                status = "ok" if not res.problems else f"{len(res.problems)} problem(s)"
                ran = f", notebook ran {res.runtime}" if res.runtime else ""
                print(f"  {rel:<36} {res.seconds:4.1f} s  {status:<13} {res.stats}{ran}", flush=True)
    finally:
        browser.close()
        server.shutdown()
    check_links(results, html_dir, base)
    return results


def report(results: dict[str, PageResult]) -> int:
    failures = [(page, p) for page, res in results.items() for p in res.problems]
    chapters = sum(r.is_chapter for r in results.values())
    for page, problem in failures:
        print(f"{page}: {problem}")
    print(f"check_pages: {len(results)} pages checked ({chapters} chapter pages), "
          f"{len(failures)} problem(s) on {len({p for p, _ in failures})} page(s)")
    return 1 if failures else 0


# ------------------------------------------------------------------------------------------- self-test

_SELF_TEST_PAGES = {
    "good.html": """<!doctype html><html><head><meta charset="utf-8"><title>good</title>
<script>window.MathJax = {tex: {inlineMath: [['\\\\(', '\\\\)']]}};</script>
<script defer src="mathjax/tex-svg-full.js"></script></head><body>
<p id="top">Good: <span class="math">\\(x^2\\)</span>, an image <img src="ok.png" alt="a white dot">,
links <a href="other.html#there">there</a> and <a href="#top">top</a>.
Code may show TeX: <code>$$x$$ \\(y\\)</code>. A price of $5 and $6 is not maths.</p>
<p>Chinese and Japanese: 2026年11月30日, 三千七百二十四, 导师引导训练; Latin: zéro, fünf, ␣.</p>
<pre>2026年11月30日 -> November 30, 2026</pre>
<div class="cell_output"><figure><img src="ok.png" alt="A white dot, alone."><figcaption><p>Fig. 1 A dot.</p>
</figcaption></figure></div></body></html>""",
    "other.html": "<!doctype html><html><body><h1 id='there'>there</h1></body></html>",
    "raw_math.html": """<!doctype html><html><body><p>Left raw: $$a+b$$ and \\(q_k\\) and $d_{model}$.</p>
<p>A heading turned into text: Scaled by \\sqrt{d_{model}}</p></body></html>""",
    "no_mathjax.html": """<!doctype html><html><body><p><span class="math">\\(x\\)</span></p></body></html>""",
    "tex_error.html": """<!doctype html><html><head>
<script defer src="mathjax/tex-svg-full.js"></script></head><body>
<p><span class="math">\\(x^1^2\\)</span> <span class="math">\\(\\nosuchmacro x\\)</span></p></body></html>""",
    "bad_image.html": """<!doctype html><html><body><img src="missing.png" alt="a missing image">
<img src="broken.png" alt="a broken image"></body></html>""",
    "bad_alt.html": """<!doctype html><html><body><img src="ok.png"><img src="ok.png" alt="../_images/ok.png">
<div class="cell_output"><img src="ok.png" alt="A white dot, alone."></div></body></html>""",
    "bad_link.html": """<!doctype html><html><body><a href="nowhere.html">a</a>
<a href="other.html#nothere">b</a> <a href="#alsonothere">c</a></body></html>""",
    "js_error.html": """<!doctype html><html><body><script>undefinedFunction();</script>
<script>console.error("boom")</script></body></html>""",
    "network.html": """<!doctype html><html><body><img src="https://cdn.example.org/x.png" alt="a remote image">
</body></html>""",
    "notebook.html": """<!doctype html><html><body><div class="cell">code</div></body></html>""",
    "redirect.html": """<meta http-equiv="Refresh" content="0; url=nowhere/intro.html" />""",
    # U+17000, a Tangut character: no font of a Debian desktop has it
    "missing_glyph.html": """<!doctype html><html><head><meta charset="utf-8"></head><body>
<p>Tangut: \U00017000 here.</p></body></html>""",
}
_EXPECTED = {
    "good.html": [],
    "other.html": [],
    "raw_math.html": ["$$ in", "TeX command in"],
    "no_mathjax.html": ["no MathJax output"],
    "tex_error.html": ["Double exponent", "undefined macro \\nosuchmacro"],
    "bad_image.html": ["missing.png", "broken.png"],
    "bad_alt.html": ["ok.png has no alt text", "is a file name", "ok.png has no caption"],
    "bad_link.html": ["nowhere.html", "#nothere", "#alsonothere"],
    "js_error.html": ["undefinedFunction", "console.error: boom"],
    "network.html": ["cdn.example.org"],
    "notebook.html": ["download:", "runtime:"],
    "redirect.html": ["nowhere/intro.html"],
    "missing_glyph.html": ["glyph: no installed font has \u00ab\U00017000\u00bb (U+17000)"],
}


def self_test(chromium: str) -> int:
    """Build pages that each break one rule, and check that the checker catches exactly those."""
    with tempfile.TemporaryDirectory(prefix="check-pages-selftest-") as tmp:
        site = Path(tmp)
        for name, text in _SELF_TEST_PAGES.items():
            (site / name).write_text(text, encoding="utf-8")
        png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQ"
                               "IAX8jx0gAAAABJRU5ErkJggg==")
        (site / "ok.png").write_bytes(png)
        (site / "broken.png").write_bytes(b"this is not a png")
        (site / "_sources").mkdir()
        (site / "_sources" / "notebook.ipynb").write_text("{}", encoding="utf-8")
        mathjax = _mathjax_dir()
        if mathjax is None:
            print("self-test: sphinx-mathjax-offline is not installed", file=sys.stderr)
            return 1
        shutil.copytree(mathjax, site / "mathjax")
        results = check_site(site, None, chromium, verbose=False)
    failed = False
    for page, wanted in _EXPECTED.items():
        got = results[page].problems
        missing = [w for w in wanted if not any(w in p for p in got)]
        extra = len(got) - len(wanted) if not wanted else 0
        ok = not missing and not extra and (bool(got) == bool(wanted))
        failed |= not ok
        print(f"  self-test {page:<18} {'ok' if ok else 'FAILED'}: {len(got)} problem(s) found")
        for p in got:
            print(f"      found: {p}")
        for w in missing:
            print(f"      NOT FOUND: {w}")
    print("check_pages self-test: "
          + ("FAILED" if failed else "every check fires on its broken page, none on the good one"))
    return 1 if failed else 0


def _mathjax_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("html", nargs="?", type=Path, default=ROOT / "_build" / "html",
                        help="the built book (default: _build/html)")
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="where to save each chapter's first screen (default: <html>/../screenshots)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on pages made to fail")
    parser.add_argument("--every-screenshot", action="store_true",
                        help="screenshot every page, not only the chapters")
    args = parser.parse_args(argv)
    try:
        chromium = find_chromium()
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        print(f"check_pages: {exc}", file=sys.stderr)
        return 2
    if args.self_test:
        return self_test(chromium)
    html = args.html.resolve()
    screenshots = (args.screenshots or html.parent / "screenshots").resolve()
    shutil.rmtree(screenshots, ignore_errors=True)
    print(f"check_pages: {html} in {chromium} (offline), screenshots in {screenshots}")
    try:
        results = check_site(html, screenshots, chromium, every_screenshot=args.every_screenshot)
    except (CDPError, FileNotFoundError) as exc:
        print(f"check_pages: {exc}", file=sys.stderr)
        return 2
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
