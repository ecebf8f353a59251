// The npm package itself: it loads, round-trips each wire shape, refuses bad input with a
// typed error that stores nothing, and keeps a loop with big tool outputs inside its window
// with every removed output readable back from the archive.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { ck } from "./support.mjs";

test("the package loads the addon and names its presets", () => {
  assert.match(ck.version(), /^\d+\.\d+\.\d+/);
  assert.ok(ck.presets().includes("default"));
});

test("chat: prepare hands back the caller's own objects while nothing changed", async () => {
  const cm = await ck.ContextManager.open({ window: 16_000 });
  const user = { role: "user", content: "List the files." };
  const first = await cm.prepare([user]);
  assert.deepEqual(first.messages, [user]);
  assert.strictEqual(first.messages[0], user);
  assert.equal(first.compacted, false);
  assert.ok(first.inputTokens > 0 && first.inputTokens <= 16_000);
  const reply = { role: "assistant", content: "a.txt b.txt" };
  const second = await cm.prepare(reply);
  assert.deepEqual(second.messages, [user, reply]);
  assert.strictEqual(second.messages[1], reply);
  assert.equal(second.changed, false);
  assert.deepEqual(second.params, { messages: [user, reply] });
  assert.deepEqual(cm._emitFull(), [user, reply]);
  assert.equal(cm.stats().ingested, 2);
});

test("responses: instructions ride apart and input items come back in shape", async () => {
  const cm = await ck.ContextManager.open({ wire: "responses", window: 16_000, system: "Be brief." });
  const items = [
    { role: "user", content: "What is in the ledger?" },
    { type: "function_call", call_id: "call_1", name: "read_file", arguments: '{"path":"ledger.csv"}' },
    { type: "function_call_output", call_id: "call_1", output: "total,42" },
  ];
  const prepared = await cm.prepare(items);
  assert.equal(prepared.system, "Be brief.");
  assert.deepEqual(Object.keys(prepared.params).sort(), ["input", "instructions"]);
  assert.equal(prepared.messages.length, 3);
  assert.equal(prepared.messages[1].type, "function_call");
  assert.equal(prepared.messages[2].output, "total,42");
  assert.equal(prepared.request("gpt-4o").model, "gpt-4o");
});

test("anthropic: system apart, tool_use and tool_result blocks round-trip", async () => {
  const cm = await ck.ContextManager.open({ wire: "anthropic", model: "claude-sonnet-4", window: 16_000, system: "You audit ledgers." });
  const messages = [
    { role: "user", content: "Check the ledger." },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "read_file", input: { path: "ledger.csv" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "total,42" }] },
  ];
  const prepared = await cm.prepare(messages);
  assert.equal(prepared.system, "You audit ledgers.");
  assert.deepEqual(prepared.messages, messages);
  assert.deepEqual(Object.keys(prepared.params).sort(), ["messages", "system"]);
});

test("bad input rejects with a typed error naming the place, and stores nothing", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ctxk-node-"));
  const store = `sqlite://${join(dir, "sessions.db")}`;
  const cm = await ck.ContextManager.open({ window: 16_000, store, session: "s1" });
  await cm.prepare([{ role: "user", content: "hello" }]);
  const before = cm.stats();

  // A tool result whose call was never made.
  const orphan = [
    { role: "assistant", content: "running" },
    { role: "tool", tool_call_id: "call_9", content: "output" },
  ];
  await assert.rejects(cm.ingest(orphan), (err) => {
    assert.ok(err instanceof ck.InvalidInputError, err);
    assert.ok(err instanceof ck.CtxkeeperError);
    assert.equal(err.kind, "tool_pairing");
    assert.equal(err.index, 1);
    assert.equal(err.path, "messages[1]");
    return true;
  });
  // An unknown role is a parse error at its path.
  await assert.rejects(cm.prepare([{ role: "narrator", content: "x" }]), (err) => {
    assert.ok(err instanceof ck.InvalidInputError);
    assert.match(err.path, /^messages\[0\]/);
    assert.match(err.message, /messages\[0\]/);
    return true;
  });
  // A hostile tool-call id.
  const hostile = [
    { role: "assistant", content: null, tool_calls: [{ id: "../../etc/passwd", type: "function", function: { name: "f", arguments: "{}" } }] },
  ];
  await assert.rejects(cm.ingest(hostile), (err) => err instanceof ck.InvalidInputError && err.kind === "hostile_id");
  assert.deepEqual(cm.stats().ingested, before.ingested);
  assert.deepEqual(cm.stats().messages, before.messages);

  // The store holds what the good step saved, nothing of the refused input.
  const again = await ck.ContextManager.open({ window: 16_000, store, session: "s1" });
  assert.equal(again.session.stored, true);
  assert.equal(again.stats().messages, before.messages);
  assert.deepEqual(again._emitFull(), [{ role: "user", content: "hello" }]);

  await assert.rejects(ck.ContextManager.open({ windw: 1 }), (err) => err instanceof ck.ConfigError && /windw/.test(err.message));
  await assert.rejects(ck.ContextManager.open({ policy: "no-such-preset" }), ck.ConfigError);
});

test("a loop with big tool outputs never exceeds a small window; archives read back", async () => {
  const window = 8_000;
  const cm = await ck.ContextManager.open({ window, system: "You are a build agent." });
  const events = [];
  let prepared = await cm.prepare([{ role: "user", content: "Run the twenty build steps." }]);
  for (let step = 1; step <= 20; step++) {
    const id = `call_${step}`;
    const lines = Array.from({ length: 700 }, (_, i) => `step ${step} line ${i} ok`);
    lines.splice(350, 0, `MARKER-${step} build artifact checksum ${step * 7919}`);
    prepared = await cm.prepare([
      { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "shell", arguments: `{"cmd":"make step${step}"}` } }] },
      { role: "tool", tool_call_id: id, content: lines.join("\n") },
    ]);
    assert.ok(prepared.inputTokens <= window, `step ${step}: ${prepared.inputTokens} > ${window}`);
    assert.ok(cm.countTokens() <= window, `step ${step}: counted ${cm.countTokens()} > ${window}`);
    events.push(...cm.events());
    cm.usage(cm.countTokens());
  }
  assert.ok(events.length > 0, "the engine announced what it did");
  const archived = await cm.archived();
  assert.ok(archived.length > 0, "big outputs were archived");
  const hits = await cm.search("MARKER-3 ");
  assert.ok(hits.length > 0, "an early output is found in the archive");
  const text = await cm.read(hits[0].reference);
  assert.match(text, /MARKER-3 build artifact checksum 23757/);
  await assert.rejects(cm.read("no/such/reference"), ck.CtxkeeperError);
});

test("onOverflow compacts below the provider's stated limit; other errors give null", async () => {
  // The manager was told a larger window than the provider enforces: the error states the
  // real limit (the case of tests/python/test_py_engine.py).
  const seen = [];
  const cm = await ck.ContextManager.open({ window: 6_000, onEvent: (event) => seen.push(event) });
  await cm.ingest({ role: "user", content: "start" });
  for (let i = 0; cm.countTokens() < 3_000; i++) {
    const words = Array.from({ length: 60 }, (_, w) => `word${(i * 60 + w) % 97}`).join(" ");
    await cm.ingest([
      { role: "user", content: `question ${i}: ${words}` },
      { role: "assistant", content: `answer ${i}: ${words}` },
    ]);
  }
  const prepared = await cm.prepare();
  assert.equal(prepared.compacted, false);
  const limit = 2_400;

  // Not an overflow: a rate limit.
  const limited = { error: { message: "Rate limit reached", type: "rate_limit_error" } };
  assert.equal(await cm.onOverflow(limited, { status: 429 }), null);

  const body = {
    error: {
      message: `This model's maximum context length is ${limit} tokens. However, your messages resulted in ${prepared.inputTokens} tokens. Please reduce the length of the messages.`,
      type: "invalid_request_error",
      code: "context_length_exceeded",
    },
  };
  const error = Object.assign(new Error("400 context length"), { status: 400, error: body.error });
  const smaller = await cm.onOverflow(error);
  assert.ok(smaller, "an overflow error gives a smaller request");
  assert.equal(smaller.compacted, true);
  assert.ok(cm.countTokens() <= limit, `${cm.countTokens()} > ${limit}`);
  assert.deepEqual(smaller.messages, cm._emitFull());
  assert.ok(seen.some((event) => typeof event.type === "string"), "onEvent received the engine's events");
  assert.deepEqual(cm.events(), [], "events went to the callback");

  // What must stay cannot fit a limit this small: a typed error with the figures.
  await assert.rejects(cm.onOverflow(null, { limit: 10 }), (err) => {
    assert.ok(err instanceof ck.NoRoomError && err instanceof ck.ContextOverflowError, err);
    assert.equal(err.limit, 10);
    assert.ok(err.needed > 10);
    return true;
  });
});

test("a stored session resumes where it was saved", async () => {
  const dir = mkdtempSync(join(tmpdir(), "ctxk-node-"));
  const store = `sqlite://${join(dir, "sessions.db")}`;
  const first = await ck.ContextManager.open({ window: 16_000, store, session: "resume-1" });
  await first.prepare([{ role: "user", content: "remember the number 41" }, { role: "assistant", content: "noted" }]);
  await first.save();
  const again = await ck.ContextManager.open({ window: 16_000, store, session: "resume-1" });
  assert.equal(again.session.session, "resume-1");
  assert.equal(again.session.stored, true);
  const next = await again.prepare([{ role: "user", content: "what was it?" }]);
  assert.deepEqual(next.messages.map((m) => m.content), ["remember the number 41", "noted", "what was it?"]);
  assert.equal(again.stats().ingested, 3);
});
