// Parity: a trace prepared through the npm package gives the same requests as `ctxkeeper
// replay --emit-requests`, step for step (the fixture and the method of
// tests/python/test_py_parity.py, so the Python wheel is held to the same requests).
//
// `replay --policy none` emits each step's whole history in the wire shape; the messages a
// step added since the previous one are fed to a ContextManager in that shape, and what it
// prepares must equal what `replay --policy default` emitted for the same step, through its
// compactions. Like a provider, the replay reports each request's size back (`usage`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { REPO, binary, ck } from "./support.mjs";

const TRACE = join(REPO, "examples", "demo-trace.json");
const WINDOW = 8_000;
const FIELD = { "openai-chat": "messages", responses: "input" };
const SYSTEM = { "openai-chat": null, responses: "instructions" };

function emitted(dir, wire, policy, window) {
  const out = join(dir, `${policy}-${wire}`);
  execFileSync(binary("CTXKEEPER_BIN", "ctxkeeper"), [
    "replay", TRACE, "--policy", policy, "--window", String(window), "--wire", wire,
    "--emit-requests", out, "--workspace", join(dir, `ws-${policy}-${wire}`), "--json",
  ], { stdio: ["ignore", "ignore", "pipe"] });
  return readdirSync(out)
    .filter((name) => /^step-.*\.json$/.test(name))
    .sort()
    .map((name) => JSON.parse(readFileSync(join(out, name), "utf8")));
}

// Anthropic's shape is left out for the reason test_py_parity.py gives (a tool result parsed
// from an Anthropic user message counts 2 tokens fewer than the trace's chat shape).
for (const wire of ["openai-chat", "responses"]) {
  test(`node prepares the requests replay emits (${wire})`, async () => {
    const dir = mkdtempSync(join(tmpdir(), "ctxk-parity-"));
    const whole = emitted(dir, wire, "none", 1_000_000);
    const managed = emitted(dir, wire, "default", WINDOW);
    assert.equal(whole.length, 52);
    assert.equal(managed.length, 52);
    const first = whole[0];
    const options = { policy: "default", model: first.model, window: WINDOW, wire, tools: first.tools, session: "0" };
    if (SYSTEM[wire] && first[SYSTEM[wire]] != null) options.system = first[SYSTEM[wire]];
    const cm = await ck.ContextManager.open(options);
    const field = FIELD[wire];
    let seen = [];
    let compacted = 0;
    for (let step = 0; step < whole.length; step++) {
      const messages = whole[step][field];
      assert.deepEqual(messages.slice(0, seen.length), seen, `step ${step + 1}: the history is not append-only`);
      const prepared = await cm.prepare(messages.slice(seen.length));
      seen = messages;
      compacted += prepared.compacted ? 1 : 0;
      assert.deepEqual(prepared.messages, managed[step][field], `step ${step + 1}`);
      if (SYSTEM[wire]) assert.deepEqual(prepared.system, managed[step][SYSTEM[wire]] ?? null, `step ${step + 1}`);
      cm.usage(cm.countTokens());
    }
    assert.ok(compacted >= 5, "the trace should compact several times at this window");
  });
}
