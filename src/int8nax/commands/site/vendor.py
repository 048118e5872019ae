"""The JavaScript and CSS that asv 0.6.6's published site loads from CDNs, shipped with int8nax
(package data, int8nax/site_assets/) so that `int8nax site` makes the site work offline.

asv's index.html loads jQuery, Flot (and two plugins), Bootstrap, md5 and stupidtable from
CDNs; on a machine without internet it shows only "external dependencies failed to load".
vendor() copies the shipped libraries into <html>/vendor/ and points index.html at them. An
unknown CDN reference is an error, so an asv upgrade that adds one is noticed.

The libraries are pinned by tools/asv-site/package-lock.json (npm); site_assets/ holds the
files used, byte for byte as npm installs them, at their paths inside each npm package
(site_assets/<package>/<path>), with each package's licence file (all are MIT; the minified
stupidtable and md5 files carry no header, so their LICENSE files come with them).
site_assets/MANIFEST.json lists each package's version and each file's SHA-256:
`python tools/asv_site.py ship` rewrites both from `npm ci --prefix tools/asv-site`, and
tests/test_site.py checks the shipped files against the manifest and the lockfile (and against
node_modules where it exists).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from importlib import resources
from pathlib import Path

# CDN URL in asv 0.6.6's index.html -> (npm package, file in it). cdnjs serves its own minified
# builds of flot and stupidtable; the npm packages hold the same code unminified.
CDN_FILES = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": ("flot", "jquery.flot.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": ("flot", "jquery.flot.time.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js":
        ("flot", "jquery.flot.selection.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js":
        ("flot", "jquery.flot.categories.js"),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js":
        ("flot-orderbars", "js/jquery.flot.orderBars.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js":
        ("stupid-table-plugin", "stupidtable.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": ("blueimp-md5", "js/md5.min.js"),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": ("bootstrap", "dist/js/bootstrap.min.js"),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": ("bootstrap", "dist/css/bootstrap.min.css"),
}
FONTS = ("bootstrap", "dist/fonts")
"""bootstrap.min.css loads ../fonts/*: the folder copied to <html>/vendor/fonts."""
FONT_FILES = tuple(f"glyphicons-halflings-regular.{ext}" for ext in ("eot", "svg", "ttf", "woff"))
LICENSES = {"jquery": "LICENSE.txt", "flot": "LICENSE.txt", "bootstrap": "LICENSE", "blueimp-md5": "LICENSE.txt",
            "stupid-table-plugin": "LICENSE"}
"""Each package's licence file, shipped beside its files (flot-orderbars has none: its one file
says "Released under the MIT license" in its header)."""

VENDOR = "vendor"
MANIFEST = "MANIFEST.json"
_TAG = re.compile(r"<(script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"[^>]*>")


class VendorError(Exception):
    pass


def shipped_paths() -> list[str]:
    """Every file site_assets/ holds besides the manifest, as '<package>/<path>'."""
    paths = {f"{pkg}/{path}" for pkg, path in CDN_FILES.values()}
    paths |= {f"{FONTS[0]}/{FONTS[1]}/{name}" for name in FONT_FILES}
    paths |= {f"{pkg}/{name}" for pkg, name in LICENSES.items()}
    return sorted(paths)


def assets() -> Path:
    """The shipped files' folder (int8nax/site_assets)."""
    return Path(str(resources.files("int8nax") / "site_assets"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest() -> dict:
    """{"packages": {name: version}, "sha256": {"<package>/<path>": hex}} of the shipped files."""
    return json.loads((assets() / MANIFEST).read_text())


def unlinked(index_html: str) -> list[str]:
    """The CDN URLs index.html still loads scripts or stylesheets from."""
    return [m.group(2) for m in _TAG.finditer(index_html)]


def vendor(html_dir: Path) -> list[str]:
    """Copy the shipped libraries into html_dir/vendor and point index.html at them
    (idempotent); returns the URLs replaced. VendorError for a site without index.html or an
    index that loads a library not in CDN_FILES."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise VendorError(f"{index} does not exist: run `asv publish` first")
    source = assets()
    text = index.read_text()
    replaced = []

    def local(match: re.Match) -> str:
        tag, url = match.group(1), match.group(2)
        if url not in CDN_FILES:
            if tag == "script" or "stylesheet" in match.group(0):
                raise VendorError(f"index.html loads {url}, which int8nax.commands.site.vendor does not ship; "
                                  "add it to CDN_FILES (and to tools/asv-site/package.json)")
            return match.group(0)
        pkg, path = CDN_FILES[url]
        target = html_dir / VENDOR / ("css" if url.endswith(".css") else "js") / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / pkg / path, target)
        replaced.append(url)
        rel = target.relative_to(html_dir).as_posix()
        if tag == "script":
            return f'<script src="{rel}" onerror="js_load_failure()">'  # the closing tag stays
        return f'<link rel="stylesheet" href="{rel}">'

    text = _TAG.sub(local, text)
    fonts = html_dir / VENDOR / "fonts"
    fonts.mkdir(parents=True, exist_ok=True)
    for name in FONT_FILES:
        shutil.copyfile(source / FONTS[0] / FONTS[1] / name, fonts / name)
    licenses = html_dir / VENDOR / "licenses"
    licenses.mkdir(parents=True, exist_ok=True)
    for pkg, name in LICENSES.items():
        shutil.copyfile(source / pkg / name, licenses / f"{pkg}-{name}")
    index.write_text(text)
    return replaced


def ship(node_modules: Path, target: Path | None = None) -> dict:
    """Copy the used files from an `npm ci` tree into site_assets (or `target`) and rewrite the
    manifest from it: the maintainer's step after changing tools/asv-site/package.json."""
    target = target or assets()
    packages = {}
    for pkg in sorted({p for p, _ in CDN_FILES.values()}):
        meta = node_modules / pkg / "package.json"
        if not meta.is_file():
            raise VendorError(f"{meta} is missing: run `npm ci --prefix {node_modules.parent}`")
        packages[pkg] = json.loads(meta.read_text())["version"]
    sums = {}
    for rel in shipped_paths():
        dst = target / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(node_modules / rel, dst)
        sums[rel] = sha256(dst)
    data = {"packages": packages, "sha256": sums}
    (target / MANIFEST).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data
