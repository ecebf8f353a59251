// The OpenClaw plug-in (ctxkeeper-engine/integrations/openclaw) in a real OpenClaw session:
// OpenClaw's own embedded agent (`openclaw agent --local`, one process per user turn, the
// session kept in OpenClaw's state directory), its own `exec` tool running the shell command
// the model asks for, and its model provider an OpenAI-compatible one pointed at the mock
// upstream, whose window is the model's `contextWindow` in OpenClaw's config. The mock plays
// a chat assistant: one build step a user turn, each printing 16 kB (~9,300 tokens), so a
// history kept whole passes the 32,000-token window in the fourth turn.
//
// OpenClaw hands a context engine the history before each turn (its durable-turn contract);
// the turn's own messages it appends itself, and commits them to the engine when the turn is
// accepted. With the ctxkeeper engine selected (`plugins.slots.contextEngine`) the session
// runs every turn with no request over the window, compacts, and what left the context is
// read back from the engine's store after OpenClaw exited; with OpenClaw's own engine
// (`legacy`) the same session sends a request over the window.
//
// Runs under Node 24 (OpenClaw requires >= 24.16): tests/python/test_node_package.py runs this
// file with the Node that scripts/nodeproject installs into .node-project/node24.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import { PROJECT, startMock } from "./support.mjs";

const projectRequire = createRequire(join(PROJECT, "package.json"));
const OPENCLAW = projectRequire.resolve("openclaw/cli-entry");
const PACKAGE = dirname(projectRequire.resolve("ctxkeeper-engine"));
const { CtxkeeperContextEngine } = projectRequire("ctxkeeper-engine/integrations/openclaw");

const WINDOW = 32_000;
const OUTPUT_BYTES = 16_000;
const TURNS = 6;
const SESSION = "build-1";

function configFor(mock, workspace, engine) {
  return {
    update: { checkOnStart: false },
    models: {
      mode: "replace",
      providers: {
        mock: {
          baseUrl: mock.openaiBaseUrl,
          apiKey: "sk-test",
          api: "openai-completions",
          models: [{ id: "gpt-4o", name: "gpt-4o", reasoning: false, input: ["text"], contextWindow: WINDOW, maxTokens: 1000 }],
        },
      },
    },
    agents: { defaults: { model: { primary: "mock/gpt-4o" }, workspace, skipBootstrap: true } },
    // The shell tool only: the request is the history, not OpenClaw's whole tool catalogue.
    tools: { profile: "minimal", alsoAllow: ["exec"] },
    // No memory plugin: it would embed the workspace's files with a provider of its own.
    plugins: engine
      ? {
          load: { paths: [PACKAGE] },
          slots: { contextEngine: "ctxkeeper", memory: "none" },
          entries: { ctxkeeper: { enabled: true } },
        }
      : { slots: { memory: "none" } },
  };
}

/** An OpenClaw installation of its own: state directory, config, workspace. */
function openclawHome(mock, engine) {
  const home = mkdtempSync(join(tmpdir(), "ctxk-openclaw-"));
  const state = join(home, "state");
  const workspace = join(home, "workspace");
  mkdirSync(state);
  mkdirSync(workspace);
  const config = join(home, "openclaw.json");
  writeFileSync(config, JSON.stringify(configFor(mock, workspace, engine), null, 2));
  const env = { ...process.env };
  // OpenClaw talks to the mock only: no provider credentials of the environment.
  for (const name of Object.keys(env)) if (/_API_KEY$|^OPENAI_|^ANTHROPIC_/.test(name)) delete env[name];
  Object.assign(env, {
    HOME: home,
    OPENCLAW_STATE_DIR: state,
    OPENCLAW_CONFIG_PATH: config,
    OPENCLAW_NO_AUTO_UPDATE: "1",
    DO_NOT_TRACK: "1",
    PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
  });
  return { home, state, workspace, env };
}

/** One user turn: `openclaw agent --local`, OpenClaw's embedded agent, as a user runs it. */
function turn(installation, message) {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [OPENCLAW, "agent", "--local", "--session-id", SESSION, "--json", "-m", message],
      { env: installation.env, cwd: installation.workspace, timeout: 240_000, maxBuffer: 1 << 26 },
      (err, stdout, stderr) => {
        let reply = null;
        try {
          reply = JSON.parse(stdout).payloads?.map((p) => p.text).join("\n") ?? null;
        } catch {
          // Not JSON: the failure is in stderr.
        }
        resolve({ code: err ? (err.code ?? 1) : 0, reply, stdout, stderr });
      },
    );
  });
}

function startScriptedMock() {
  return startMock(WINDOW, "--script-steps", String(TURNS + 2), "--script-output-bytes", String(OUTPUT_BYTES));
}

// The engine alone, through OpenClaw's ContextEngine contract, as OpenClaw calls it.

/** Turn `k` in OpenClaw's message shape: the user's message, a shell call, its output, a reply. */
function openclawTurn(k) {
  const output = `ctxkstep${k}out\n${Array.from({ length: 3422 }, (_, i) => i + 1).join("\n")}`;
  const assistant = { api: "openai-completions", provider: "mock", model: "gpt-4o", usage: {}, timestamp: k };
  return [
    { role: "user", content: `Run the next build step (turn ${k}).`, timestamp: k },
    {
      role: "assistant",
      content: [{ type: "thinking", thinking: "next step" }, { type: "toolCall", id: `call_${k}`, name: "exec", arguments: { command: "seq" } }],
      stopReason: "toolUse",
      ...assistant,
    },
    { role: "toolResult", toolCallId: `call_${k}`, toolName: "exec", content: [{ type: "text", text: output }], isError: false, timestamp: k },
    { role: "assistant", content: [{ type: "text", text: `Step ${k} done.` }], stopReason: "stop", ...assistant },
  ];
}

test("openclaw engine: an accepted turn is committed once per advancement key, across engines", async () => {
  const stateDir = mkdtempSync(join(tmpdir(), "ctxk-openclaw-engine-"));
  try {
    const session = { sessionId: SESSION, sessionKey: `agent:main:explicit:${SESSION}` };
    const first = new CtxkeeperContextEngine({ stateDir });
    const turn1 = { ...session, advancementKey: "turn-1", messages: openclawTurn(1) };
    assert.deepEqual(await first.commitTurn(turn1), { status: "committed" });
    assert.deepEqual(await first.commitTurn(turn1), { status: "duplicate" });
    await first.dispose();
    // The next turn's engine (OpenClaw makes one a turn) resumes the stored session.
    const second = new CtxkeeperContextEngine({ stateDir });
    assert.deepEqual(await second.commitTurn(turn1), { status: "duplicate" });
    assert.deepEqual(await second.commitTurn({ ...session, advancementKey: "turn-2", messages: openclawTurn(2) }), { status: "committed" });
    assert.equal((await second.manager(session)).stats().ingested, 8);
    await second.dispose();
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
});

test("openclaw engine: assemble keeps the history within the turn's budget, in OpenClaw's own objects", async () => {
  const engine = new CtxkeeperContextEngine({ store: "memory" });
  const session = { sessionId: "s", sessionKey: "agent:main:explicit:s" };
  const transcript = [1, 2].flatMap(openclawTurn);
  // The turn's first call: the history's budget.
  const first = await engine.assemble({ ...session, messages: transcript, tokenBudget: 12_000, model: "gpt-4o", runtimeSettings: { limits: { promptTokenBudget: 12_000 } } });
  assert.ok(first.estimatedTokens <= 12_000, `${first.estimatedTokens}`);
  const kept = first.messages.filter((m) => transcript.includes(m));
  assert.ok(kept.length >= 6, "messages the engine kept come back as OpenClaw's objects");
  assert.ok(kept.some((m) => m.content?.[0]?.type === "thinking"), "with what the Chat shape has no slot for");
  for (const message of first.messages) assert.ok(["user", "assistant", "toolResult"].includes(message.role), message.role);
  // Before a later model call of the turn: the window less what the turn added.
  const later = await engine.assemble({ ...session, messages: first.messages, tokenBudget: 24_000, model: "gpt-4o", runtimeSettings: { limits: { promptTokenBudget: 32_000 } } });
  assert.ok(later.estimatedTokens <= 12_000 - 8_000, `${later.estimatedTokens}`);
  await engine.dispose();
});

describe("openclaw", { concurrency: true }, () => {
  test("openclaw: the ctxkeeper engine keeps every turn inside the window, every output readable", async (t) => {
    const mock = await startScriptedMock();
    const installation = openclawHome(mock, true);
    try {
      for (let k = 1; k <= TURNS; k++) {
        const done = await turn(installation, `Run the next build step (turn ${k}).`);
        assert.equal(done.code, 0, `turn ${k} failed:\n${done.stdout}\n${done.stderr}`);
        assert.equal(done.reply, `Step ${k} done.`, `turn ${k}:\n${done.stdout}\n${done.stderr}`);
        assert.doesNotMatch(done.stderr, /context-engine\] Context engine "ctxkeeper" degraded/, `turn ${k}`);
      }
      const calls = await mock.modelCalls();
      assert.equal(calls.length, 2 * TURNS, "a tool call and a reply each turn");
      assert.deepEqual(await mock.overflows(), []);
      // OpenClaw sent every output of the turn it ran in; later turns got the managed history.
      const largest = Math.max(...calls.map((c) => c.input_tokens));
      assert.ok(largest <= WINDOW - 1000, `largest request ${largest}`);

      // After OpenClaw exited: the engine's store holds the session, compacted, and what left
      // the context reads back.
      const engine = new CtxkeeperContextEngine({ stateDir: installation.state });
      const manager = await engine.manager({ sessionId: SESSION, agentId: "main" });
      const stats = manager.stats();
      assert.equal(stats.ingested, 4 * TURNS, JSON.stringify(stats));
      assert.ok(stats.compactions >= 1, JSON.stringify(stats));
      const hits = await manager.search("ctxkstep1out");
      assert.ok(hits.length > 0, "the first step's output is in the archive");
      const texts = await Promise.all(hits.map((hit) => manager.read(hit.reference)));
      // Step 1's output as the model got it in turn 1 (OpenClaw's exec tool caps a result at
      // 16,000 characters), whole.
      const sent = calls
        .flatMap((call) => call.body.messages)
        .find((m) => m.role === "tool" && String(m.content).startsWith("ctxkstep1out"));
      assert.ok(sent && sent.content.length > 15_000, "turn 1 sent step 1's output");
      assert.ok(texts.includes(sent.content), `step 1's output reads back whole: ${hits.map((h) => h.reference)}`);
      const archived = await manager.archived();
      t.diagnostic(
        `${TURNS} turns, ${calls.length} model calls, 0 over the window (largest ${largest} tokens), ` +
          `${stats.compactions} compactions, ${archived.length} items archived (${archived.map((a) => a.reference).join(", ")})`,
      );
      // The last request no longer carries the first step's output.
      const last = JSON.stringify(calls.at(-1).body.messages);
      assert.doesNotMatch(last, /ctxkstep1out\\n1\\n2\\n3\\n/);
      await engine.dispose();
    } finally {
      mock.stop();
      rmSync(installation.home, { recursive: true, force: true });
    }
  });

  test("openclaw: the same session with OpenClaw's own engine sends a request over the window", async (t) => {
    const mock = await startScriptedMock();
    const installation = openclawHome(mock, false);
    try {
      let turns = 0;
      while (turns < TURNS && (await mock.overflows()).length === 0) {
        turns += 1;
        await turn(installation, `Run the next build step (turn ${turns}).`);
      }
      const calls = (await mock.modelCalls()).map((c) => [c.status, c.input_tokens]);
      const overflows = await mock.overflows();
      assert.ok(overflows.length > 0, JSON.stringify(calls));
      t.diagnostic(`over the window in turn ${turns}: ${overflows.length} refused of ${calls.length} model calls ${JSON.stringify(calls)}`);
    } finally {
      mock.stop();
      rmSync(installation.home, { recursive: true, force: true });
    }
  });
});
