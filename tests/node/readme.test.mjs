// README's "From TypeScript" examples, run as written: every ```js block of that section runs
// in its own Node process from the project the package is installed in, against the mock
// upstream (OPENAI_BASE_URL / OPENAI_API_KEY), which scripts a few shell steps and then the
// final text. An example that no longer runs fails here. The OpenClaw example runs with the
// Node 24 scripts/nodeproject installs (CTXKEEPER_NODE24): OpenClaw needs it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { PROJECT, REPO, startMock } from "./support.mjs";

function examples() {
  const text = readFileSync(join(REPO, "README.md"), "utf8");
  let section = text.slice(text.indexOf("## From TypeScript"));
  section = section.slice(0, section.indexOf("\n## ", 1));
  return [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
}

test("README has an example per plug-in", () => {
  const found = examples().join("\n");
  for (const name of ["ai-sdk", "openai-agents", "openclaw"]) assert.ok(found.includes(`ctxkeeper-engine/integrations/${name}`), name);
});

for (const [index, code] of examples().entries()) {
  test(`README example ${index + 1} runs`, async () => {
    const mock = await startMock(128_000, "--script-steps", "3", "--script-output-bytes", "2000");
    const dir = mkdtempSync(join(PROJECT, ".readme-"));
    try {
      const file = join(dir, `example-${index + 1}.cjs`);
      writeFileSync(file, code);
      const openclaw = code.includes("ctxkeeper-engine/integrations/openclaw");
      const node = openclaw ? (process.env.CTXKEEPER_NODE24 ?? join(PROJECT, "node24", "bin", "node")) : process.execPath;
      const env = {
        ...process.env,
        OPENAI_BASE_URL: mock.openaiBaseUrl,
        OPENAI_API_KEY: "sk-test",
        OPENAI_AGENTS_DISABLE_TRACING: "1",
        // OpenClaw keeps its state under HOME and TMPDIR: both in the example's directory.
        ...(openclaw ? { HOME: dir, TMPDIR: dir, OPENCLAW_NO_AUTO_UPDATE: "1", DO_NOT_TRACK: "1" } : {}),
      };
      const { code: status, stdout, stderr } = await new Promise((resolve) => {
        execFile(node, [file], { env, timeout: 240_000 }, (err, out, errOut) =>
          resolve({ code: err ? (err.code ?? 1) : 0, stdout: out, stderr: errOut }),
        );
      });
      assert.equal(status, 0, `example ${index + 1} failed:\n${stdout}\n${stderr}`);
      assert.ok(stdout.trim().length > 0);
    } finally {
      mock.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
