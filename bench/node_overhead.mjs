#!/usr/bin/env node
// ctxkeeper called from Node: the per-step overhead of the npm package ctxkeeper-engine, on the
// input bench/peers/inprocess.py times the Python wheel on (the concatenated tau-bench session
// as OpenAI chat messages, bench/peers/common.py's load_concat_session).
//
// Before every assistant message of the trace (every model call) it calls, and times,
// `await manager.prepare(messagesSinceThePreviousCall)` and reads `prepared.messages`: the
// boundary both ways is inside the timed region. The `default` preset, the extractive
// summarizer, archive writes to a scratch directory. Prints one JSON object: p50 / p99 of quiet
// steps (no compaction) and of all steps, the mean of compacting steps, in µs; medians over runs.
//
// With --memory the archive is in the process (no workspace): such a session can do no IO,
// and its steps run on the caller's thread instead of libuv's thread pool.
//
// Usage: node bench/node_overhead.mjs TRACE [--window 16000] [--runs 3] [--memory]
// (the package from CTXKEEPER_NODE_PROJECT, else .node-project: scripts/nodeproject).
import { createRequire } from "node:module";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const project = process.env.CTXKEEPER_NODE_PROJECT ?? join(repo, ".node-project");
const ck = createRequire(join(project, "package.json"))("ctxkeeper-engine");

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const memory = args.includes("--memory");
const trace = args.find((a, i) => !a.startsWith("--") && !(i > 0 && ["--window", "--runs"].includes(args[i - 1])));
const window = option("--window", 16_000);
const runs = option("--runs", 3);

function loadConcatSession(path) {
  const tasks = JSON.parse(readFileSync(path, "utf8"));
  const messages = [];
  let firstSystem = null;
  tasks.forEach((task, index) => {
    for (const message of task.traj) {
      if (message.role === "system") {
        const text = message.content ?? "";
        if (firstSystem === null) firstSystem = text;
        else if (index > 0 && text === firstSystem) continue;
      }
      messages.push(message);
    }
  });
  return messages;
}

const quantile = (values, q) => {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
};
const median = (values) => quantile(values, 0.5);
const round = (value) => (value === null ? null : Math.round(value * 10) / 10);

async function oneRun(messages) {
  const workspace = mkdtempSync(join(tmpdir(), "ctxk-bench-"));
  try {
    const manager = await ck.ContextManager.open({
      policy: "default",
      model: "gpt-4o",
      window,
      ...(memory ? {} : { workspace }),
    });
    const quiet = [];
    const busy = [];
    let pending = [];
    for (const message of messages) {
      if (message.role === "assistant") {
        const started = process.hrtime.bigint();
        const prepared = await manager.prepare(pending);
        const sent = prepared.messages;
        const took = Number(process.hrtime.bigint() - started) / 1000;
        if (sent.length === 0) throw new Error("empty request");
        (prepared.compacted ? busy : quiet).push(took);
        pending = [];
      }
      pending.push(message);
    }
    const all = quiet.concat(busy);
    return {
      quiet_p50: quantile(quiet, 0.5),
      quiet_p99: quantile(quiet, 0.99),
      all_p50: quantile(all, 0.5),
      all_p99: quantile(all, 0.99),
      compacting_steps: busy.length,
      compacting_mean: busy.length ? busy.reduce((a, b) => a + b, 0) / busy.length : null,
      steps: all.length,
      compactions: manager.stats().compactions,
    };
  } finally {
    rmSync(workspace, { recursive: true, force: true });
  }
}

const messages = loadConcatSession(trace);
const results = [];
for (let run = 0; run < runs; run++) results.push(await oneRun(messages));
const archive = memory ? "in-process archive" : "workspace archive";
const summary = { system: `ctxkeeper-engine ${ck.version()} (default, ${archive}), from Node ${process.version}`, window, runs, messages: messages.length };
for (const key of Object.keys(results[0])) summary[key] = round(median(results.map((r) => r[key])));
console.log(JSON.stringify(summary, null, 2));
