// The Vercel AI SDK plug-in: a generateText tool loop (the real `ai` and `@ai-sdk/openai`
// packages, the OpenAI Chat API of the mock upstream) whose tool outputs outgrow a small
// window. With ctxkeeperPrepareStep it finishes with no overflow and the early outputs are
// read back from the archive; the same loop without it gets the provider's overflow error.
import { test } from "node:test";
import assert from "node:assert/strict";

import { DONE, STEPS, SYSTEM, TASK, WINDOW, ck, load, runShell, scriptedMock } from "./support.mjs";

const { ctxkeeperPrepareStep } = await load("ctxkeeper-engine/integrations/ai-sdk");

async function agentLoop(mock, prepareStep) {
  const { generateText, tool, jsonSchema, stepCountIs } = await load("ai");
  const { createOpenAI } = await load("@ai-sdk/openai");
  const openai = createOpenAI({ baseURL: mock.openaiBaseUrl, apiKey: "sk-test" });
  const tools = {
    shell_command: tool({
      description: "Run a shell command and return its output",
      inputSchema: jsonSchema({
        type: "object",
        properties: { command: { type: "string" } },
        required: ["command"],
      }),
      execute: async ({ command }) => runShell(command),
    }),
  };
  return generateText({
    model: openai.chat("gpt-4o"),
    system: SYSTEM,
    prompt: TASK,
    tools,
    maxRetries: 0,
    stopWhen: stepCountIs(STEPS + 3),
    ...(prepareStep ? { prepareStep } : {}),
  });
}

test("ai sdk: prepareStep keeps a tool loop inside the window", async () => {
  const mock = await scriptedMock();
  try {
    const cm = await ck.ContextManager.open({ model: "gpt-4o", window: WINDOW, fixedTokens: 300 });
    const result = await agentLoop(mock, ctxkeeperPrepareStep(cm));
    assert.equal(result.text, DONE);
    assert.deepEqual(await mock.overflows(), []);
    assert.ok((await mock.modelCalls()).length >= STEPS + 1);
    assert.ok(cm.stats().compactions > 0, "the loop needed compactions");
    const hits = await cm.search("ctxkstep1out");
    assert.ok(hits.length > 0, "the first step's output is in the archive");
    assert.match(await cm.read(hits[0].reference), /ctxkstep1out/);
  } finally {
    mock.stop();
  }
});

test("ai sdk: the same loop without the plug-in overflows", async () => {
  const mock = await scriptedMock();
  try {
    await assert.rejects(agentLoop(mock, null), (err) => /context|token|length/i.test(String(err?.message ?? err)));
    assert.ok((await mock.overflows()).length > 0);
  } finally {
    mock.stop();
  }
});
