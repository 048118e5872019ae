"""asv's own published pages: the commits it put on the site (index.json), the link to
compare.html and the offline fallback in its index.html, and the edits of its graph page."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .results import SiteError


def published_commits(html_dir: Path) -> set[str] | None:
    """The commits `asv publish` put on the site (index.json's revision map): results of other
    commits (not on asv's `branches`, e.g. a PR's) are not on the site, so not compared either."""
    try:
        return set(json.loads((html_dir / "index.json").read_text())["revision_to_hash"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return None


NAV_ID = "nav-li-compare"
_NAV_AFTER = re.compile(r'(<li id="nav-li-regressions">.*?</li>)', re.S)
_FALLBACK = re.compile(r'(function js_load_failure\(\)\s*\{\s*window\.location\s*=\s*)"error\.html"')


def link_index(index: Path) -> list[str]:
    """Link compare.html from asv's index.html (idempotent); returns what was changed."""
    text = index.read_text()
    changed = []
    if NAV_ID not in text:
        link = f'\n\t<li id="{NAV_ID}"><a href="compare.html">Contenders compared</a></li>'
        text, n = _NAV_AFTER.subn(lambda m: m.group(1) + link, text, count=1)
        if not n:
            raise SiteError(f"{index}: no 'nav-li-regressions' entry to put the link after "
                            "(not asv 0.6's index.html?)")
        changed.append("link")
    text, n = _FALLBACK.subn(lambda m: m.group(1) + '"compare.html#offline"', text, count=1)
    if n:
        changed.append("offline fallback")
    index.write_text(text)
    return changed


# asv 0.6.6's graph page draws every machine's results on one linear axis, with a legend of one
# entry per series (machine x shape) drawn over the top left of the plot. These edits of the
# published graphdisplay.js and index.html make the default readable: one machine per graph
# (the others a click away in the left panel, or in the URL), every declared shape (asv shows the
# first 8 parameter values, which leaves out the CPU box's small shapes), a log y axis (the
# shapes' times span three decades), and the legend in a column beside the plot. Each edit is found by its exact
# text in asv 0.6.6's files: with a different asv, `int8nax site` says what it could not change
# and carries on (the page it writes does not depend on them).
_GRAPH_EDITS = (
    ("graphdisplay.js", "one machine per graph",
     "            state = {};\n            state.machine = index.params.machine;\n\n"
     "            $.each(index.params, function(param, values) {\n                state[param] = values;\n"
     "                if (values.length > 1 && param !== 'machine') {\n                    if (param == 'branch') {\n"
     "                        state[param] = [values[0]];\n                    }\n                }\n            });\n",
     None),
    ("graphdisplay.js", "every shape",
     "            var max_curves = 8;\n",
     "            var max_curves = 16; /* int8nax: all 14 declared shapes, not the first 8 */\n"),
    ("graphdisplay.js", "log y axis by default",
     "            delete params['y-axis-scale'];\n        }\n",
     "            delete params['y-axis-scale'];\n        }\n"
     "        else { /* int8nax: log y axis by default */\n"
     "            $('#log-scale').addClass('active');\n            log_scale = true;\n        }\n"),
    ("graphdisplay.js", "legend beside the plot",
     "                show: show_legend,\n                position: \"nw\",\n",
     "                show: show_legend,\n                position: \"nw\",\n"
     "                container: $('#int8nax-legend'), /* int8nax: beside the plot, not over it */\n"),
    ("index.html", "room for the legend",
     '<div style="position: absolute; top: 48px; left: 0; right: 0; bottom: 100px;">',
     '<div id="int8nax-legend" style="position: absolute; top: 48px; right: 0; width: 230px; bottom: 100px; '
     'overflow-y: auto; font-size: 11px"></div>\n'
     '          <div style="position: absolute; top: 48px; left: 0; right: 240px; bottom: 100px;">'),
)
_FIRST_MACHINE = re.compile(r"/\* int8nax: one machine per graph \*/ state\.machine = .*\n")


def tune_graphs(html_dir: Path, first: str | None) -> tuple[list[str], list[str]]:
    """Apply _GRAPH_EDITS to the published site (idempotent); `first` is the machine a graph
    shows by default (None: the first in asv's list). Returns (what was changed, what could not
    be: an edit whose text is not found, another asv version). A site without asv's graph
    page (no graphdisplay.js) is left alone."""
    changed, failed = [], []
    if not (html_dir / "graphdisplay.js").is_file():
        return changed, failed
    pick = (f"[{json.dumps(first)}]" if first else "[]")
    line = (f"/* int8nax: one machine per graph */ state.machine = {pick}.filter(function (m) "
            "{ return index.params.machine.indexOf(m) >= 0; }).concat(index.params.machine).slice(0, 1);\n")
    for name, what, old, new in _GRAPH_EDITS:
        path = html_dir / name
        text = path.read_text()
        if what == "one machine per graph":
            if _FIRST_MACHINE.search(text):
                updated = _FIRST_MACHINE.sub(lambda m: line, text)
            elif old in text:
                updated = text.replace(old, old + line, 1)
            else:
                failed.append(f"{what} (asv 0.6.6's text not found in {name})")
                continue
        elif new in text:
            continue
        elif old in text:
            updated = text.replace(old, new, 1)
        else:
            failed.append(f"{what} (asv 0.6.6's text not found in {name})")
            continue
        if updated != text:
            path.write_text(updated)
            changed.append(what)
    return changed, failed
