"""Make a published asv site self-contained, and check it in a real (headless) browser.

    python tools/asv_site.py vendor .asv/html
    python tools/asv_site.py check .asv/html [--screenshot docs/asv-site.png] [--bench NAME]
                                             [--compare-screenshot docs/compare-page.png]
                                             [--graph-screenshot docs/asv-graph.png]
                                             [--regressions-screenshot docs/asv-regressions.png]
    python tools/asv_site.py ship

vendor: points index.html at asv's JavaScript/CSS libraries copied into <html>/vendor/
    (int8nax.commands.site.vendor; `int8nax site` does it too, so the README's command gives a site
    that works offline).

ship: copies those libraries from `npm ci --prefix tools/asv-site` (the pin:
    tools/asv-site/package-lock.json) into the package (src/int8nax/site_assets) and rewrites
    its manifest of versions and SHA-256s: the step after changing tools/asv-site/package.json.

check: serves the directory on 127.0.0.1, opens it in headless Chromium (selenium with
    Debian's chromium + chromium-driver) and verifies that
    - the index lists every benchmark of index.json,
    - on every machine, the graph of a parametrized benchmark (default: the first one
      with data), showing the shapes that have results, draws one series per shape,
    - the browser logged no JavaScript error or failed request,
    - where `int8nax site` has tuned the graph page: opened with no choices in its address, a
      graph shows one machine, on a log y axis, with its legend beside the plot (not over it),
    - the Regressions page lists only int8nax's own benchmarks (no peer or baseline, no
      throughput), and the ratio benchmarks in their unit ("ratio"), never as seconds,
    - where `int8nax site` has run (compare.html exists): the index links it, and the page
      loads no script and nothing from outside the site, logs no error, and shows exactly
      one table row and one bar per mode for every contender and shape that has results
      (as compare.json lists them), "missing" rows for the others (never a zero), speed
      ratios that equal the peer's time over the contender's, and times that equal the
      values in asv's own graph files at that commit (so a misread result file, a wrong
      ratio or a dropped series fails the check).
    It prints a report, optionally saves screenshots of the main page and the comparison
    page, and exits 1 on a failed check (2 when the browser itself is missing).
"""

from __future__ import annotations

import argparse
import functools
import itertools
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

from int8nax.commands.site import vendor as site_vendor

ASSETS = Path(__file__).resolve().parent / "asv-site" / "node_modules"
"""npm's install of the pinned libraries (only `ship` needs it)."""


class SiteError(Exception):
    pass


def vendor(html_dir: Path) -> list[str]:
    """int8nax.commands.site.vendor.vendor, its errors as SiteError; returns the URLs replaced."""
    try:
        return site_vendor.vendor(html_dir)
    except site_vendor.VendorError as exc:
        raise SiteError(str(exc)) from None


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


# The default graph view, read back: the series drawn (with data), legend rows beside the plot and
# inside it, whether the log-scale button is on, and the machines selected in the left panel.
_DEFAULT_VIEW = """
var p = window.jQuery && jQuery('#main-graph').data('plot');
if (!p) return null;
var machines = [];
jQuery('.asv-navigation .panel').each(function () {
  if (jQuery(this).find('.panel-heading').text().trim() == 'machine')
    jQuery(this).find('.btn.active').each(function () { machines.push(jQuery(this).text().trim()); });
});
return {drawn: p.getData().filter(s => s.data.some(d => d[1] !== null)).length,
        legend_beside: document.querySelectorAll('#int8nax-legend tr').length,
        legend_over_plot: document.querySelectorAll('#main-graph .legend').length,
        log_scale: jQuery('#log-scale').hasClass('active'), machines: machines};
"""

_REGRESSION_ROWS = """
var rows = document.querySelectorAll('#regressions-body table tbody tr');
if (!rows.length && !document.querySelector('#regressions-body p, #regressions-body table')) return null;
return Array.from(rows).filter(r => r.offsetParent !== null).map(r => Array.from(r.cells).map(c => c.innerText.trim()));
"""

OURS = re.compile(r"^bench_(gemm|linear)\.Int8nax\w+\.time_|^bench_model\.W8A8Model(Compiled)?\.time_"
                  r"|^bench_ratio\.\w+\.track_\w+_ratio|^bench_kernel\.KernelTime\.track_int8nax_\w+_kernel_us"
                  r"|^bench_host\.\w+\.track_w8a8_(layer_)?host_us")
"""The benchmarks the Regressions page may list: int8nax's own times (its GEMM, W8A8 layer and
W8A8 model, its kernel times and W8A8's host work) and ratios (asv.conf.json's regressions_first_commits leaves the peers, the other
model forms, the display figures and the throughputs out)."""


def check_default_graph(driver, url: str, bench: str, screenshot: Path | None, problems: list[str]) -> dict:
    """The graph of `bench` opened without choices in its address (see the module docstring)."""
    driver.get("about:blank")
    driver.get(url + "index.html#" + bench)
    view = _wait(driver, "return (function(){" + _DEFAULT_VIEW + "})();")
    time.sleep(0.5)
    if view is None:
        problems.append(f"the default graph of {bench} was not drawn")
        return {}
    if len(view["machines"]) != 1:
        problems.append(f"the default graph of {bench} shows machines {view['machines']}, not one")
    if not view["log_scale"]:
        problems.append(f"the default graph of {bench} has a linear y axis")
    if view["legend_over_plot"] or not view["legend_beside"]:
        problems.append(f"the default graph of {bench} draws its legend over the plot "
                        f"({view['legend_over_plot']} legend(s) inside, {view['legend_beside']} rows beside)")
    if not view["drawn"]:
        problems.append(f"the default graph of {bench} draws no series")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
    # asv's default view also asks for graphs of environment combinations that were never run
    # (a 404 each): not an error of the site
    errors = [e for e in _errors(driver.get_log("browser")) if not re.search(r"/graphs/.*\.json.* 404", e)]
    if errors:
        problems.append(f"the default graph of {bench}: the browser logged {len(errors)} error(s), first: {errors[0]}")
    return view


def check_regressions(html_dir: Path, index: dict, driver, url: str, screenshot: Path | None,
                      problems: list[str]) -> dict:
    """The Regressions page: only int8nax's benchmarks; ratios in their unit, not seconds."""
    driver.get("about:blank")
    driver.get(url + "index.html#regressions")
    rows = _wait(driver, "return (function(){" + _REGRESSION_ROWS + "})();")
    time.sleep(0.5)
    names = [r[0] for r in rows if r]
    foreign = [n for n in names if not OURS.match(n)]
    if foreign:
        problems.append(f"the Regressions page lists {len(foreign)} benchmark(s) that are not int8nax's: {foreign[:3]}")
    for r in rows:
        if r and "_ratio" in r[0] and not all(c.endswith(" ratio") for c in r[4:6]):
            problems.append(f"the Regressions page shows the ratio {r[0]} as {r[4:6]}, not as a ratio")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(screenshot))
    return {"rows": len(rows), "ratios": sum("_ratio" in n for n in names)}


def read_index(html_dir: Path) -> dict:
    """asv's index.json of a published site; SiteError (like `vendor`'s) where there is none or it
    is not what `asv publish` writes."""
    path = html_dir / "index.json"
    if not path.is_file():
        raise SiteError(f"{path} does not exist: run `asv publish` first")
    try:
        index = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SiteError(f"{path} cannot be read as JSON ({exc}): run `asv publish` again") from None
    if not (isinstance(index, dict) and isinstance(index.get("benchmarks"), dict)
            and isinstance(index.get("params"), dict)):
        raise SiteError(f"{path} is not asv's index (a JSON object with \"benchmarks\" and \"params\"): "
                        "run `asv publish` again")
    return index


def check(html_dir: Path, screenshot: Path | None = None, bench: str | None = None,
          compare_screenshot: Path | None = None, graph_screenshot: Path | None = None,
          regressions_screenshot: Path | None = None, graph_bench: str | None = None,
          offline: bool = False) -> dict:
    """Run the checks; returns a report dict, raises SiteError on a failed check. `offline`:
    in a browser that resolves no host but the local server's (a machine without internet)."""
    index = read_index(html_dir)
    benchmarks = sorted(index["benchmarks"])
    machines = index["params"].get("machine", [])
    if bench is None:
        bench = next((b for b in benchmarks if index["benchmarks"][b]["params"]
                      and any(_graph_series(html_dir, index, b, m)[0] for m in machines)), None)
        if bench is None:
            raise SiteError("no parametrized benchmark has any results")

    server, url = serve(html_dir)
    driver = browser(*([OFFLINE] if offline else []))
    report = {"offline_browser": offline, "benchmarks": len(benchmarks), "machines": machines, "graph": bench, "series": {}}
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
        if "int8nax-legend" in (html_dir / "index.html").read_text():  # tuned by int8nax site
            report["default_graph"] = check_default_graph(driver, url, graph_bench or bench, graph_screenshot, problems)
        elif graph_screenshot is not None:
            problems.append("the graph page is asv's own: run `int8nax site` after `asv publish`")
        report["regressions"] = check_regressions(html_dir, index, driver, url, regressions_screenshot, problems)
        if (html_dir / "compare.html").is_file():
            report["compare"] = check_compare(html_dir, index, driver, url, compare_screenshot, problems)
        elif compare_screenshot is not None:
            problems.append("no compare.html to screenshot: run `int8nax site` after `asv publish`")
    finally:
        driver.quit()
        server.shutdown()
    report["js_errors"] = errors
    if errors:
        problems.append(f"the browser logged {len(errors)} error(s), first: {errors[0]}")
    if not report["series"]:
        problems.append(f"no machine has results for {bench}")
    if (html_dir / "compare.html").is_file():
        try:
            report["offline"] = check_offline(html_dir)
        except SiteError as exc:
            problems.append(str(exc))
    if problems:
        raise SiteError("; ".join(problems) + "\nreport: " + json.dumps(report, indent=1))
    return report


# --- the comparison page (int8nax site) ------------------------------------------------------

# What the page shows, read back from the DOM: per machine section and shape block, the rows
# (contender, class, times per mode, ratio cells) and the bars (contender, mode).
_COMPARE_DOM = """
var out = {scripts: document.scripts.length, external: [], machines: {}};
document.querySelectorAll('[src],[href]').forEach(function (e) {
  var u = e.getAttribute('src') || e.getAttribute('href');
  if (/^[a-z]+:/i.test(u) && !/^(data|about):/i.test(u) && !(e.tagName == 'svg' || e.namespaceURI.endsWith('svg')))
    out.external.push(u);
});
document.querySelectorAll('section.machine').forEach(function (sec) {
  var shapes = {};
  sec.querySelectorAll('div.shape').forEach(function (div) {
    var rows = [], bars = [];
    div.querySelectorAll('table.contenders tr[data-contender]').forEach(function (tr) {
      var row = {contender: tr.dataset.contender, kind: tr.className, seconds: {}, ratios: {}};
      tr.querySelectorAll('td.seconds').forEach(function (td) { row.seconds[td.dataset.mode] = td.dataset.seconds; });
      tr.querySelectorAll('td.ratio:not(.self)').forEach(function (td) {
        row.ratios[td.dataset.peer] = {call: td.dataset.call || null, chain: td.dataset.chain || null};
      });
      rows.push(row);
    });
    div.querySelectorAll('svg rect.bar').forEach(function (r) {
      var box = r.getBBox();
      bars.push({contender: r.dataset.contender, mode: r.dataset.mode, width: box.width});
    });
    shapes[div.dataset.shape] = {rows: rows, bars: bars};
  });
  out.machines[sec.dataset.machine] = {commit: sec.dataset.commit, shapes: shapes};
});
return out;
"""


def _graph_values(html_dir: Path, index: dict, machine: str, bench: str, commit: str) -> dict[str, list[float]]:
    """{parameter value: asv's published values} of `bench` on `machine` at `commit` (one per
    environment that has one), read from the graph files `asv publish` wrote: independent of
    how int8nax site reads the result files."""
    revisions = {h: int(r) for r, h in index.get("revision_to_hash", {}).items()}
    rev = revisions.get(commit)
    info = index["benchmarks"].get(bench)
    if rev is None or info is None or not info["params"]:
        return {}
    names = [", ".join(c) if len(c) > 1 else c[0] for c in itertools.product(*info["params"])]
    found: dict[str, list[float]] = {}
    for graph in (html_dir / "graphs").rglob(f"{bench}.json"):
        if f"machine-{machine}" not in graph.parts:
            continue
        for point in json.loads(graph.read_text()):
            if point[0] == rev and isinstance(point[1], list):
                for name, value in zip(names, point[1]):
                    if value is not None:
                        found.setdefault(name, []).append(value)
    return found


def _latest_revisions(html_dir: Path, index: dict, benches: set[str]) -> dict[str, int]:
    """{machine: the highest revision at which any of `benches` has a value in the graphs}."""
    latest: dict[str, int] = {}
    for bench in benches:
        for graph in (html_dir / "graphs").rglob(f"{bench}.json"):
            machine = next((p[len("machine-"):] for p in graph.parts if p.startswith("machine-")), None)
            if machine is None:
                continue
            for rev, values in json.loads(graph.read_text()):
                if (any(v is not None for v in values) if isinstance(values, list) else values is not None):
                    latest[machine] = max(latest.get(machine, rev), rev)
    return latest


def _close(a, b, rel: float = 1e-9) -> bool:
    return a is not None and b is not None and abs(float(a) - float(b)) <= rel * max(abs(float(a)), abs(float(b)))


def check_compare(html_dir: Path, index: dict, driver, url: str, screenshot: Path | None,
                  problems: list[str]) -> dict:
    """The comparison page: see the module docstring. Appends to `problems`; returns a report."""
    data = json.loads((html_dir / "compare.json").read_text())
    index_html = (html_dir / "index.html").read_text()
    if 'href="compare.html"' not in index_html:
        problems.append("index.html does not link compare.html")
    driver.get("about:blank")
    driver.get(url + "compare.html")
    dom = _wait(driver, "return document.readyState == 'complete' ? (" + "function(){" + _COMPARE_DOM + "})() : null;")
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        driver.set_window_size(1400, 1500)  # the first machine's first shape: plot and table
        driver.save_screenshot(str(screenshot))
        driver.set_window_size(1400, 1000)
    errors = _errors(driver.get_log("browser"))
    report = {"entries": 0, "bars": 0, "machines": {}, "js_errors": errors}
    if errors:
        problems.append(f"compare.html: the browser logged {len(errors)} error(s), first: {errors[0]}")
    if dom["scripts"]:
        problems.append(f"compare.html has {dom['scripts']} script element(s); it must work without JavaScript")
    if dom["external"]:
        problems.append(f"compare.html loads from outside the site: {dom['external'][:3]}")
    from int8nax.commands.site.results import NOT_CONTENDERS  # the gate's ratio benchmarks: ratios, not times

    time_benches = {b for b in index["benchmarks"] if ".time_" in b and not b.startswith(NOT_CONTENDERS)}
    # 0. every machine with a time on the site is on the page, at its latest such commit
    latest = _latest_revisions(html_dir, index, time_benches)
    hashes = index.get("revision_to_hash", {})
    for machine, rev in sorted(latest.items()):
        shown_commit = data["machines"].get(machine, {}).get("commit")
        if shown_commit is None:
            problems.append(f"asv publishes times for machine {machine}; compare.html has no section for it")
        elif shown_commit != hashes.get(str(rev)):
            problems.append(f"compare.html shows {machine} at {shown_commit[:8]}, but its latest commit with "
                            f"times on the site is {hashes.get(str(rev), '?')[:8]}")
    for machine, mdata in data["machines"].items():
        shown = dom["machines"].get(machine)
        if shown is None:
            problems.append(f"compare.html has no section for machine {machine}")
            continue
        if shown["commit"] != mdata["commit"]:
            problems.append(f"compare.html shows {machine} at {shown['commit']}, compare.json at {mdata['commit']}")
        entries = {(e["shape"], e["contender"]): e for e in mdata["entries"]}
        with_results = [e for e in mdata["entries"] if e["has_result"]]
        report["machines"][machine] = {"commit": mdata["commit"][:8], "entries": len(with_results)}
        report["entries"] += len(with_results)
        # 1. asv's graph files against compare.json: every series with a value is there, same value.
        listed = {b for e in mdata["entries"] for b in e["benchmarks"].values() if b}
        for bench in sorted(time_benches):
            for shape, values in _graph_values(html_dir, index, machine, bench, mdata["commit"]).items():
                hit = [(e, m) for e in mdata["entries"] for m, b in e["benchmarks"].items()
                       if b == bench and e["shape"] == shape]
                if not hit:
                    problems.append(f"{machine}: asv publishes {bench} at {shape} = {values[0]}, "
                                    f"compare.html has no entry for it")
                elif not any(_close(hit[0][0]["seconds"][hit[0][1]], v) for v in values):
                    problems.append(f"{machine}: {bench} at {shape}: compare.html says "
                                    f"{hit[0][0]['seconds'][hit[0][1]]}, asv's graph {values}")
            if bench in listed and not _graph_values(html_dir, index, machine, bench, mdata["commit"]) \
                    and any(e["seconds"][m] is not None for e in mdata["entries"]
                            for m, b in e["benchmarks"].items() if b == bench):
                problems.append(f"{machine}: compare.html has times for {bench}, asv's graphs none")
        # 2. the page against compare.json: one row per entry, bars for the modes with a time.
        for shape in mdata["shapes"]:
            block = shown["shapes"].get(shape)
            if block is None:
                problems.append(f"{machine}: compare.html has no block for shape {shape}")
                continue
            rows = {}
            for row in block["rows"]:
                if row["contender"] in rows:
                    problems.append(f"{machine} {shape}: {row['contender']} has two rows")
                rows[row["contender"]] = row
            bars = {}
            for bar in block["bars"]:
                bars.setdefault((bar["contender"], bar["mode"]), []).append(bar)
                if not bar["width"] > 0:
                    problems.append(f"{machine} {shape}: the {bar['mode']} bar of {bar['contender']} is not drawn")
            report["bars"] += len(block["bars"])
            for (eshape, contender), e in entries.items():
                if eshape != shape:
                    continue
                row = rows.get(contender)
                if row is None:
                    problems.append(f"{machine} {shape}: no row for {contender}")
                    continue
                if e["has_result"] != (row["kind"] == "result"):
                    problems.append(f"{machine} {shape}: {contender} shown as {row['kind']}, "
                                    f"has_result={e['has_result']}")
                for mode, seconds in e["seconds"].items():
                    n_bars = len(bars.get((contender, mode), []))
                    if n_bars != (seconds is not None):
                        problems.append(f"{machine} {shape}: {contender} has {n_bars} {mode} bar(s) "
                                        f"for a time of {seconds}")
                    if e["has_result"] and seconds is not None and not _close(row["seconds"].get(mode), seconds):
                        problems.append(f"{machine} {shape}: {contender} {mode} time {row['seconds'].get(mode)} "
                                        f"on the page, {seconds} in compare.json")
            # 3. every ratio on the page is the peer's time over the row's time.
            for row in block["rows"]:
                for peer, pair in row["ratios"].items():
                    for mode, shown_ratio in pair.items():
                        mine = row["seconds"].get(mode)
                        theirs = rows.get(peer, {}).get("seconds", {}).get(mode)
                        expected = (float(theirs) / float(mine)
                                    if mine not in (None, "None") and theirs not in (None, "None") else None)
                        if (expected is None) != (shown_ratio is None) or \
                                (expected is not None and not _close(shown_ratio, expected)):
                            problems.append(f"{machine} {shape}: {row['contender']} vs {peer} ({mode}) shows "
                                            f"{shown_ratio}, expected {expected}")
    if not report["entries"]:
        problems.append("compare.html shows no entry with results")
    return report


def browser(*args: str):
    """A headless Chromium driven by selenium, logging the console; `args` go to Chromium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = find_browser()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", *args):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


# Chromium resolves no host but the local server's: the site as a machine without internet sees it.
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


def check_offline(html_dir: Path) -> dict:
    """Open index.html as a machine without internet would. A vendored site must show asv's
    benchmark grid; an unvendored one (asv's CDN links, or a vendor/ folder gone) must land on compare.html#offline,
    with its notice shown and its tables there. Raises SiteError otherwise."""
    server, url = serve(html_dir)
    driver = browser(OFFLINE)
    try:
        driver.get(url + "index.html")
        state = _wait(driver, "var l = document.querySelectorAll('.benchmark-plot[id^=\"summarygrid-\"]').length;"
                              "if (location.pathname.endsWith('compare.html') && document.readyState == 'complete') {"
                              "  var n = document.getElementById('offline');"
                              "  return {page: 'compare', hash: location.hash,"
                              "          notice: !!n && getComputedStyle(n).display != 'none',"
                              "          rows: document.querySelectorAll('tr.result').length}; }"
                              "return l ? {page: 'index', listed: l} : null;")
    finally:
        driver.quit()
        server.shutdown()
    # vendored: index.html loads nothing from CDNs and the copies are there to load
    vendored = not site_vendor.unlinked((html_dir / "index.html").read_text()) and (html_dir / site_vendor.VENDOR).is_dir()
    if state is None:
        raise SiteError("offline, index.html showed neither asv's grid nor the comparison page")
    if vendored and state["page"] != "index":
        raise SiteError(f"offline, the vendored site did not show asv's grid: {state}")
    if not vendored and not (state["page"] == "compare" and state["hash"] == "#offline"
                             and state["notice"] and state["rows"] > 0):
        raise SiteError(f"offline, the unvendored site did not fall back to compare.html#offline with "
                        f"its notice and tables: {state}")
    return {"vendored": vendored, **state}


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
    p_check.add_argument("--compare-screenshot", type=Path, help="save a screenshot of compare.html here")
    p_check.add_argument("--graph-screenshot", type=Path, help="save a screenshot of a graph in its default view")
    p_check.add_argument("--graph-bench", help="the benchmark of that graph (default: --bench's)")
    p_check.add_argument("--regressions-screenshot", type=Path, help="save a screenshot of the Regressions page")
    p_check.add_argument("--offline", action="store_true", help="in a browser that resolves no host but the site's")
    sub.add_parser("ship", help="copy the pinned libraries from npm's node_modules into the package")
    args = parser.parse_args(argv)
    try:
        if args.command == "ship":
            try:
                data = site_vendor.ship(ASSETS)
            except site_vendor.VendorError as exc:
                raise SiteError(str(exc)) from None
            print(f"shipped {len(data['sha256'])} files of {', '.join(f'{k} {v}' for k, v in data['packages'].items())}")
        elif args.command == "vendor":
            for url in vendor(args.html_dir):
                print(f"vendored {url}")
        else:
            print(json.dumps(check(args.html_dir, args.screenshot, args.bench, args.compare_screenshot,
                                   args.graph_screenshot, args.regressions_screenshot, args.graph_bench,
                                   args.offline), indent=1))
    except SiteError as exc:
        print(f"asv_site: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
