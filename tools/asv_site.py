"""Make a published asv site self-contained, and check it in a real (headless) browser.

    python tools/asv_site.py vendor .asv/html
    python tools/asv_site.py check .asv/html [--screenshot docs/asv-site.png] [--bench NAME]

vendor: asv 0.6.6's index.html loads jQuery, Flot, Bootstrap, md5 and stupidtable from
    CDNs, so on a machine without internet the site shows only "external dependencies
    failed to load". This copies the same libraries, pinned in tools/asv-site/package.json
    (install them with `npm ci --prefix tools/asv-site`), into <html>/vendor/ and points
    index.html at them. An unknown CDN reference is an error, so an asv upgrade that adds
    one is noticed.

check: serves the directory on 127.0.0.1, opens it in headless Chromium (selenium with
    Debian's chromium + chromium-driver) and verifies that
    - the index lists every benchmark of index.json,
    - on every machine, the graph of a parametrized benchmark (default: the first one
      with data), showing the shapes that have results, draws one series per shape,
    - the browser logged no JavaScript error or failed request.
    It prints a report, optionally saves a screenshot of the main page, and exits 1 on a
    failed check (2 when the browser itself is missing).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

ASSETS = Path(__file__).resolve().parent / "asv-site" / "node_modules"

# CDN URL in asv 0.6.6's index.html -> file in ASSETS. cdnjs serves its own minified
# builds of flot and stupidtable; the npm packages hold the same code unminified.
CDN_FILES = {
    "https://code.jquery.com/jquery-3.3.1.min.js": "jquery/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": "flot/jquery.flot.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": "flot/jquery.flot.time.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": "flot/jquery.flot.selection.js",
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": "flot/jquery.flot.categories.js",
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": "flot-orderbars/js/jquery.flot.orderBars.js",
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "stupid-table-plugin/stupidtable.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "blueimp-md5/js/md5.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "bootstrap/dist/js/bootstrap.min.js",
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "bootstrap/dist/css/bootstrap.min.css",
}
EXTRA_DIRS = {"bootstrap/dist/fonts": "fonts"}  # bootstrap.min.css loads ../fonts/*
VENDOR = "vendor"
_TAG = re.compile(r"<(script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"[^>]*>")


class SiteError(Exception):
    pass


def vendor(html_dir: Path) -> list[str]:
    """Copy the CDN libraries into html_dir/vendor and rewrite index.html; returns the URLs replaced."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise SiteError(f"{index} does not exist: run `asv publish` first")
    if not ASSETS.is_dir():
        raise SiteError(f"{ASSETS} is missing: run `npm ci --prefix {ASSETS.parent}`")
    text = index.read_text()
    replaced = []

    def local(match: re.Match) -> str:
        tag, url = match.group(1), match.group(2)
        if url not in CDN_FILES:
            if tag == "script" or "stylesheet" in match.group(0):
                raise SiteError(f"index.html loads {url}, which tools/asv_site.py does not know; add it to CDN_FILES")
            return match.group(0)
        source = ASSETS / CDN_FILES[url]
        target = html_dir / VENDOR / ("css" if url.endswith(".css") else "js") / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        replaced.append(url)
        rel = target.relative_to(html_dir).as_posix()
        if tag == "script":
            return f'<script src="{rel}" onerror="js_load_failure()">'  # the closing tag stays
        return f'<link rel="stylesheet" href="{rel}">'

    text = _TAG.sub(local, text)
    for src, dst in EXTRA_DIRS.items():
        shutil.copytree(ASSETS / src, html_dir / VENDOR / dst, dirs_exist_ok=True)
    index.write_text(text)
    return replaced


# --- the browser check ---------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome",
            "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
            "/Applications/Chromium.app/Contents/MacOS/Chromium")


def find_browser() -> tuple[str, str]:
    """(Chromium/Chrome binary, chromedriver): from PATH, the macOS app folders, or
    $CHROMEWEBDRIVER (GitHub's runner images); SiteError naming what is missing."""
    binary = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    driver = shutil.which("chromedriver")
    if driver is None and os.environ.get("CHROMEWEBDRIVER"):
        driver = shutil.which("chromedriver", path=os.environ["CHROMEWEBDRIVER"])
    if not binary or not driver:
        missing = " and ".join(n for n, v in (("chromium", binary), ("chromedriver", driver)) if not v)
        raise SiteError(f"{missing} not found (Debian: apt-get install chromium chromium-driver)")
    return binary, driver


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(html_dir: Path) -> tuple[ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _wait(driver, script: str, timeout: float = 20.0):
    """Poll a JavaScript expression until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def _graph_series(html_dir: Path, index: dict, bench: str, machine: str) -> tuple[int, list[str]]:
    """(series with data, parameter values with data) in `machine`'s graph files of `bench`.

    A machine can have several graph files for one benchmark (one per environment: Python,
    requirement versions); the page draws one series per file and parameter value.
    """
    values = index["benchmarks"][bench]["params"][0]
    series, found = 0, set()
    for graph in (html_dir / "graphs").rglob(f"{bench}.json"):
        if f"machine-{machine}" not in graph.parts:
            continue
        points = json.loads(graph.read_text())
        for i, value in enumerate(values):
            if any(isinstance(p[1], list) and p[1][i] is not None for p in points):
                series += 1
                found.add(value)
    return series, [v for v in values if v in found]


def _graph_hash(index: dict, bench: str, machine: str, values: list[str]) -> str:
    """The page address asv's UI uses for `bench` on `machine` with these parameter values shown
    (by default it shows only the first 8 values of a parameter)."""
    name = index["benchmarks"][bench]["param_names"][0]
    parts = [f"machine={quote(machine, safe='')}"] + [f"p-{quote(name, safe='')}={quote(v, safe='')}" for v in values]
    return f"#{bench}?" + "&".join(parts)


_DRAWN_SERIES = (
    "var p = window.jQuery && jQuery('#main-graph').data('plot');"
    "return p ? p.getData().filter(s => s.data.some(d => d[1] !== null)).length : null;"
)


def check(html_dir: Path, screenshot: Path | None = None, bench: str | None = None) -> dict:
    """Run the checks; returns a report dict, raises SiteError on a failed check."""
    index = json.loads((html_dir / "index.json").read_text())
    benchmarks = sorted(index["benchmarks"])
    machines = index["params"].get("machine", [])
    if bench is None:
        bench = next((b for b in benchmarks if index["benchmarks"][b]["params"]
                      and any(_graph_series(html_dir, index, b, m)[0] for m in machines)), None)
        if bench is None:
            raise SiteError("no parametrized benchmark has any results")

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    server, url = serve(html_dir)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    report = {"benchmarks": len(benchmarks), "machines": machines, "graph": bench, "series": {}}
    problems = []
    try:
        driver.get(url + "index.html")
        listed = _wait(driver, "var l = document.querySelectorAll('.benchmark-plot[id^=\"summarygrid-\"]');"
                               "return l.length ? Array.from(l).map(e => e.id.slice(12)) : null;") or []
        missing = [b for b in benchmarks if b not in listed]
        report["index_lists"] = len(benchmarks) - len(missing)
        if missing:
            problems.append(f"the index does not list {len(missing)} benchmark(s): {', '.join(missing[:5])}")
        if screenshot is not None:
            time.sleep(1.0)  # let the summary thumbnails finish drawing
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(screenshot))
        errors = _errors(driver.get_log("browser"))
        for machine in machines:
            expected, values = _graph_series(html_dir, index, bench, machine)
            if not expected:
                continue
            driver.get("about:blank")  # a fresh page load, not just a hash change
            driver.get(url + "index.html" + _graph_hash(index, bench, machine, values))
            drawn = _wait(driver, _DRAWN_SERIES)
            report["series"][machine] = {"drawn": drawn, "shapes_with_data": values}
            if drawn != expected:
                problems.append(f"the graph of {bench} on {machine} draws {drawn} series with data, expected "
                                f"{expected} (one per shape with results)")
            errors += _errors(driver.get_log("browser"))
    finally:
        driver.quit()
        server.shutdown()
    report["js_errors"] = errors
    if errors:
        problems.append(f"the browser logged {len(errors)} error(s), first: {errors[0]}")
    if not report["series"]:
        problems.append(f"no machine has results for {bench}")
    if problems:
        raise SiteError("; ".join(problems) + "\nreport: " + json.dumps(report, indent=1))
    return report


def _errors(log: list[dict]) -> list[str]:
    return [entry["message"] for entry in log if entry.get("level") == "SEVERE"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_vendor = sub.add_parser("vendor", help="serve the site's CDN libraries locally")
    p_vendor.add_argument("html_dir", type=Path)
    p_check = sub.add_parser("check", help="check the site in headless Chromium")
    p_check.add_argument("html_dir", type=Path)
    p_check.add_argument("--screenshot", type=Path)
    p_check.add_argument("--bench", help="benchmark whose graph is checked (default: first parametrized with data)")
    args = parser.parse_args(argv)
    try:
        if args.command == "vendor":
            for url in vendor(args.html_dir):
                print(f"vendored {url}")
        else:
            print(json.dumps(check(args.html_dir, args.screenshot, args.bench), indent=1))
    except SiteError as exc:
        print(f"asv_site: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
