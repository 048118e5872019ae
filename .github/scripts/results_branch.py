"""Keep asv results on a branch of their own (default `asv-results`) and bring them back.

The branch holds what asv keeps in its results_dir: `benchmarks.json` and one folder per machine
(`<machine>/machine.json`, `<machine>/<sha8>-<env>.json`). Benchmark runners on main `save` their
machine's folder there; the next run `restore`s it first (so `asv run NEW` knows what is done),
and the publishing job restores everything before `asv publish`.

`save` builds the commit with git plumbing in a private index, never touching the working tree or
HEAD of the checkout it runs in. When the push is rejected because another runner pushed first,
it fetches the new tip, rebuilds its commit on top and tries again: each machine writes only its
own folder, so no other machine's results are lost; `benchmarks.json` (the suite's description,
rewritten by every run) takes the copy of the run that pushes last.

usage:
  python .github/scripts/results_branch.py restore --results-dir .asv/results [--machine NAME]
  python .github/scripts/results_branch.py save --results-dir .asv/results --machine NAME \
      --message "asv results: NAME at <sha>"
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE_FILE = "benchmarks.json"  # asv writes it at the top of results_dir on every discovery
BOT_NAME = "github-actions[bot]"
BOT_EMAIL = "41898282+github-actions[bot]@users.noreply.github.com"


def git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> bytes:
    """Run git in `repo`; raise with git's own message when it fails."""
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({result.returncode}): {result.stderr.decode().strip()}")
    return result.stdout


def fetch_tip(repo: Path, remote: str, branch: str) -> str | None:
    """Fetch `branch` from `remote`; its commit id, or None when the remote has no such branch."""
    probe = subprocess.run(
        ["git", "-C", str(repo), "ls-remote", "--exit-code", "--heads", remote, f"refs/heads/{branch}"],
        capture_output=True,
        check=False,
    )
    if probe.returncode == 2:  # --exit-code: the remote answered, and has no such branch
        return None
    if probe.returncode != 0:
        raise RuntimeError(f"git ls-remote {remote} failed: {probe.stderr.decode().strip()}")
    tracking = f"refs/remotes/{remote}/{branch}"
    git(repo, "fetch", "--quiet", "--no-tags", remote, f"+refs/heads/{branch}:{tracking}")
    return git(repo, "rev-parse", "--verify", f"{tracking}^{{commit}}").decode().strip()


def restore(repo: Path, remote: str, branch: str, results_dir: Path, machine: str | None) -> int:
    """Write the branch's files (one machine's folder, or all) under results_dir; count them."""
    tip = fetch_tip(repo, remote, branch)
    if tip is None:
        print(f"{remote}/{branch} does not exist yet: nothing to restore")
        return 0
    pathspec = [f"{machine}/"] if machine else []
    listing = git(repo, "ls-tree", "-r", "-z", "--name-only", tip, "--", *pathspec)
    paths = [p for p in listing.decode().split("\0") if p]
    for path in paths:
        target = results_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(git(repo, "cat-file", "blob", f"{tip}:{path}"))
    print(f"restored {len(paths)} file(s) from {remote}/{branch} ({tip[:8]}) into {results_dir}")
    return len(paths)


def files_to_save(results_dir: Path, machine: str) -> list[str]:
    """Paths (relative to results_dir, '/'-separated) of the machine's folder and the suite file."""
    machine_dir = results_dir / machine
    if not machine_dir.is_dir():
        raise FileNotFoundError(f"no results for machine {machine!r}: {machine_dir} is not a directory")
    paths = sorted(p.relative_to(results_dir).as_posix() for p in machine_dir.rglob("*") if p.is_file())
    if (results_dir / SUITE_FILE).is_file():
        paths.append(SUITE_FILE)
    return paths


def build_commit(repo: Path, parent: str | None, results_dir: Path, paths: list[str], message: str) -> str | None:
    """A commit holding `parent`'s tree with `paths` (from results_dir) laid over it; None when
    that changes nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(repo, "read-tree", *([parent] if parent else ["--empty"]), env=index)
        sources = "\n".join(str(results_dir / p) for p in paths) + "\n"
        blobs = git(repo, "hash-object", "-w", "--stdin-paths", stdin=sources.encode()).decode().split()
        entries = "".join(f"100644 {blob}\t{path}\n" for blob, path in zip(blobs, paths, strict=True))
        git(repo, "update-index", "--add", "--index-info", env=index, stdin=entries.encode())
        tree = git(repo, "write-tree", env=index).decode().strip()
    if parent and tree == git(repo, "rev-parse", f"{parent}^{{tree}}").decode().strip():
        return None
    identity = {
        "GIT_AUTHOR_NAME": BOT_NAME,
        "GIT_AUTHOR_EMAIL": BOT_EMAIL,
        "GIT_COMMITTER_NAME": BOT_NAME,
        "GIT_COMMITTER_EMAIL": BOT_EMAIL,
    }
    parents = ["-p", parent] if parent else []
    return git(repo, "commit-tree", tree, *parents, "-m", message, env=identity).decode().strip()


def push_commit(repo: Path, remote: str, commit: str, branch: str) -> bool:
    """Fast-forward `branch` on `remote` to `commit`; False when the remote moved meanwhile."""
    result = subprocess.run(
        ["git", "-C", str(repo), "push", "--quiet", remote, f"{commit}:refs/heads/{branch}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        print(f"push to {remote}/{branch} rejected: {result.stderr.strip()}", file=sys.stderr)
    return result.returncode == 0


def save(
    repo: Path,
    remote: str,
    branch: str,
    results_dir: Path,
    machine: str,
    message: str,
    attempts: int = 5,
    backoff_s: float = 2.0,
) -> str | None:
    """Commit the machine's results onto the branch and push, retrying on a moved tip.
    The pushed commit, or None when the branch already held exactly these files."""
    paths = files_to_save(results_dir, machine)
    for attempt in range(1, attempts + 1):
        tip = fetch_tip(repo, remote, branch)
        commit = build_commit(repo, tip, results_dir, paths, message)
        if commit is None:
            print(f"{remote}/{branch} already holds these results: nothing to push")
            return None
        if push_commit(repo, remote, commit, branch):
            print(f"pushed {len(paths)} file(s) to {remote}/{branch} as {commit[:8]}")
            return commit
        if attempt < attempts:
            time.sleep(backoff_s * attempt)
    raise RuntimeError(f"could not push to {remote}/{branch} after {attempts} attempts")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["restore", "save"])
    parser.add_argument("--results-dir", type=Path, required=True, help="asv's results_dir")
    parser.add_argument("--machine", help="the asv machine name (restore: default all machines)")
    parser.add_argument("--message", help="commit message (save)")
    parser.add_argument("--branch", default="asv-results")
    parser.add_argument("--remote", default="origin")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the git checkout (default: cwd)")
    args = parser.parse_args(argv)
    results_dir = args.results_dir.resolve()
    if args.command == "restore":
        restore(args.repo, args.remote, args.branch, results_dir, args.machine)
        return 0
    if not args.machine or not args.message:
        parser.error("save needs --machine and --message")
    save(args.repo, args.remote, args.branch, results_dir, args.machine, args.message)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
