// What the Node tests share: the package under test, the project-local node_modules the
// plug-in tests load their frameworks from, and the mock upstream as a real process.
//
// The package is the one scripts/nodepkg built and installed (CTXKEEPER_NODE_PROJECT names
// the project whose node_modules holds it); the mock upstream binary comes from
// CTXKEEPER_MOCK_UPSTREAM_BIN, else the debug build in cargo's target directory.
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const PROJECT = process.env.CTXKEEPER_NODE_PROJECT ?? join(REPO, ".node-project");
const projectRequire = createRequire(join(PROJECT, "package.json"));

/** A package of the project-local node_modules, imported (ESM or CommonJS alike). */
export async function load(name) {
  return import(pathToFileURL(projectRequire.resolve(name)).href);
}

/** ctxkeeper-engine as installed from its packed tarball. */
export const ck = projectRequire("ctxkeeper-engine");

function targetDir() {
  const configured = process.env.CARGO_TARGET_DIR;
  if (!configured) return join(REPO, "target");
  return resolve(REPO, configured);
}

export function binary(envVar, name) {
  const path = process.env[envVar] ?? join(targetDir(), "debug", name);
  if (!existsSync(path)) throw new Error(`${name} binary not found at ${path}: build it with cargo build`);
  return path;
}

/** The mock upstream on a free port with a `window`-token limit; `stop()` when done. */
export async function startMock(window, ...extra) {
  const exe = binary("CTXKEEPER_MOCK_UPSTREAM_BIN", "ctxkeeper-mock-upstream");
  const child = spawn(exe, ["--listen", "127.0.0.1:0", "--window", String(window), ...extra], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  const url = await new Promise((resolveUrl, reject) => {
    let seen = "";
    const timer = setTimeout(() => reject(new Error(`mock upstream did not start: ${seen}`)), 20_000);
    child.stdout.on("data", (chunk) => {
      seen += chunk;
      const match = /listening on (http:\/\/\S+)/.exec(seen);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`mock upstream exited with ${code}: ${seen}`)));
  });
  child.stdout.resume();
  return {
    url,
    openaiBaseUrl: `${url}/v1`,
    async requests() {
      const answer = await fetch(`${url}/mock/requests`);
      return answer.json();
    },
    /** The model calls the mock refused as over its window. */
    async overflows() {
      const all = await this.requests();
      return all.filter(
        (r) => r.path.startsWith("/v1/") && r.method === "POST" && r.status === 400 && r.input_tokens > 0,
      );
    },
    async modelCalls() {
      const all = await this.requests();
      return all.filter((r) => r.path.startsWith("/v1/") && r.method === "POST");
    },
    stop() {
      child.kill("SIGTERM");
    },
  };
}

// The scripted agent loop of the plug-in tests (the mock's --script-steps): ~8 steps of
// output fill the window, so a loop left to itself overflows.
export const WINDOW = 12_000;
export const STEPS = 12;
export const OUTPUT_BYTES = 6_000;
export const TASK = "Run the build steps one by one and report when they are all done.";
export const SYSTEM = "You are a build agent. Run one shell command per step with shell_command.";
export const DONE = "All done.";

export function scriptedMock() {
  return startMock(WINDOW, "--script-steps", String(STEPS), "--script-output-bytes", String(OUTPUT_BYTES));
}

/** The tool's body: runs the command the model asked for, returns what it printed. */
export async function runShell(command) {
  const { execFile } = await import("node:child_process");
  return new Promise((resolveOut) => {
    execFile("bash", ["-c", command], { timeout: 30_000, maxBuffer: 1 << 24 }, (_err, stdout, stderr) =>
      resolveOut(stdout + stderr),
    );
  });
}
