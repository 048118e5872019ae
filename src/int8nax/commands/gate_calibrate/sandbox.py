"""The sandbox a calibration measures in: a clone of the checkout with a private HOME and a fixed
asv machine, holding the commits A (the checkout), A' (an empty commit on A) and B_f (A with the
planted slowdown f)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
"""The checkout this package runs from (src/int8nax/commands/gate_calibrate/ four levels down):
the calibration clones it."""


PLANT_TARGET = "src/int8nax/backends/__init__.py"
PLANT = '''

# --- Planted by int8nax.commands.gate_calibrate: a slowdown of {factor}x of int8nax's GEMM and W8A8 ---
# Every backend's int8_matmul and w8a8_linear waits, after computing, for ({factor} - 1) times
# the time the call took, whichever backend and whichever CPU path runs.
import time as _planted_time

_PLANTED_FACTOR = {factor}
_planted_get = get


def _planted(method):
    def slowed(*args, **kwargs):
        start = _planted_time.perf_counter()
        out = method(*args, **kwargs)
        mx.eval(out)
        end = _planted_time.perf_counter()
        until = end + (_PLANTED_FACTOR - 1.0) * (end - start)
        while _planted_time.perf_counter() < until:
            pass
        return out
    return slowed


@lru_cache(maxsize=None)
def get(name):
    backend = _planted_get(name)
    if backend is not None and "int8_matmul" not in vars(backend):
        for method in ("int8_matmul", "w8a8_linear"):
            setattr(backend, method, _planted(getattr(backend, method)))
    return backend
'''


def plant(clone: Path, factor: float) -> None:
    """Append the planted slowdown to the clone's backend registry (not committed)."""
    target = clone / PLANT_TARGET
    text = target.read_text()
    if "def get(name" not in text or "lru_cache" not in text:
        raise SystemExit(f"{PLANT_TARGET} no longer defines get() with lru_cache: update PLANT")
    target.write_text(text + PLANT.format(factor=factor))


def sandbox_env(home: Path, who: str) -> dict:
    """The environment for asv in a throwaway clone: a private HOME (asv's machine file), pip's
    cache kept, virtualenv finding this interpreter's python3.X on PATH, PYTHONPATH kept in
    benchmark processes (asv 0.6.6 drops it otherwise) less its entries that hold an int8nax
    package (a checkout's src/, relative or not, would shadow the commit asv built: a planted
    slowdown then measured nothing), and a git identity for the commits."""
    email = who.replace(" ", "-") + "@int8nax.invalid"
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (Path(p) / "int8nax" / "__init__.py").is_file()]
    return {
        **os.environ,
        "HOME": str(home),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "ASV_PYTHONPATH": os.pathsep.join(kept),
        "GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": who, "GIT_COMMITTER_EMAIL": email,
    }


COPY_LEFT_OUT = shutil.ignore_patterns(".git", ".venv", ".asv", ".pytest_cache", ".hypothesis", "build", "dist",
                                       "__pycache__", "node_modules", "*.egg-info")
"""What a copy of a working tree without git history leaves out (mostly .gitignore's list)."""


def has_history(repo: Path) -> bool:
    """Whether `repo` is a git checkout with a HEAD commit (a device's copy of the working
    tree is not: it holds the files only)."""
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
                          capture_output=True, text=True).returncode == 0 and (repo / ".git").exists()


class Clone:
    """A clone of `source`'s committed HEAD (default REPO) with a private HOME, a fixed asv
    machine, and the commits A, A' and B_f. A `source` without git history (the copy of the
    working tree a GPU box gets) is copied and committed instead: A is then that copy."""

    def __init__(self, root: Path, machine: str, source: Path = REPO, copy: bool = False):
        self.root = root
        self.path = root / "int8nax"
        home = root / "home"
        home.mkdir()
        self.env = sandbox_env(home, "gate calibration")
        self.copied = copy or not has_history(source)
        if self.copied:
            shutil.copytree(source, self.path, ignore=COPY_LEFT_OUT, symlinks=True)
            self.git("init", "-q")
            self.git("add", "-A")
            self.git("commit", "-q", "-m", "A: a copy of the working tree (no git history there)")
        else:
            self.git("clone", "-q", "--no-hardlinks", str(source), str(self.path), cwd=root)
        self.git("checkout", "-q", "-B", "main")
        self.run(sys.executable, str(self.path / ".github/scripts/asv_machine.py"), "--name", machine)
        self.base = self.head()
        self.git("commit", "-q", "--allow-empty", "-m", "A/A: no change")
        self.same = self.head()
        self.slow: dict[float, str] = {}

    def run(self, *args, cwd=None):
        result = subprocess.run(args, cwd=cwd or self.path, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result.stdout

    def git(self, *args, cwd=None):
        return self.run("git", *args, cwd=cwd)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def tree(self, commit: str) -> Path:
        """A worktree of the clone at `commit` (detached), made once: that commit's own sources."""
        path = self.root / "trees" / commit[:12]
        if not path.is_dir():
            path.parent.mkdir(exist_ok=True)
            self.git("worktree", "add", "-q", "--detach", str(path), commit)
        return path

    def add_slowdown(self, factor: float) -> str:
        self.git("checkout", "-q", "-B", f"slow-{factor}", self.base)
        plant(self.path, factor)
        self.git("commit", "-q", "-am", f"A/B: planted {factor}x slowdown")
        self.slow[factor] = self.head()
        self.git("checkout", "-q", "main")
        return self.slow[factor]


def shlex_join(command) -> str:
    import shlex

    return shlex.join(str(c) for c in command)
