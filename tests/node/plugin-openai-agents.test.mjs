// The OpenAI Agents SDK plug-in (ctxkeeper-engine/integrations/openai-agents) in a real
// `run` loop of `@openai/agents`: the SDK's own Responses model over an `openai` client
// pointed at the mock upstream, a function tool with big outputs, a window the history passes
// after a few steps. With the session (and its input filter) the run finishes with no request
// over the window and the outputs that left the context are read back from the archive;
// without it the same run overflows.
import { test } from "node:test";
import assert from "node:assert/strict";

import { DONE, STEPS, SYSTEM, TASK, WINDOW, load, runShell, scriptedMock } from "./support.mjs";

process.env.OPENAI_AGENTS_DISABLE_TRACING = "1";
const agents = await load("@openai/agents");
const OpenAI = (await load("openai")).default;
const { CtxkeeperSession } = await load("ctxkeeper-engine/integrations/openai-agents");

function agentFor(mock) {
  const client = new OpenAI({ baseURL: mock.openaiBaseUrl, apiKey: "sk-test", maxRetries: 0 });
  const shell = agents.tool({
    name: "shell_command",
    description: "Runs a shell command and returns its output.",
    parameters: {
      type: "object",
      properties: { command: { type: "string" } },
      required: ["command"],
      additionalProperties: false,
    },
    strict: true,
    execute: async ({ command }) => runShell(command),
  });
  const model = new agents.OpenAIResponsesModel(client, "gpt-4o");
  return new agents.Agent({ name: "builder", instructions: SYSTEM, model, tools: [shell] });
}

test("openai agents: the session keeps a run inside the window and every output readable", async () => {
  const mock = await scriptedMock();
  try {
    const session = new CtxkeeperSession("build-1", { model: "gpt-4o", window: WINDOW });
    const agent = agentFor(mock);
    const result = await agents.run(agent, TASK, {
      session,
      callModelInputFilter: session.modelInputFilter,
      maxTurns: STEPS + 5,
    });
    assert.equal(result.finalOutput, DONE);
    const items = await session.getItems();
    assert.ok(items.some((item) => item.type === "function_call_result"));
    assert.deepEqual(await mock.overflows(), []);
    const manager = session.manager;
    assert.ok(manager.stats().compactions >= 1, JSON.stringify(manager.stats()));
    const hits = await manager.search("ctxkstep1out");
    assert.ok(hits.length > 0, "the first step's output is in the archive");
    assert.match(await manager.read(hits[0].reference), /ctxkstep1out/);
  } finally {
    mock.stop();
  }
});

test("openai agents: the same run without the session overflows", async () => {
  const mock = await scriptedMock();
  try {
    await assert.rejects(agents.run(agentFor(mock), TASK, { maxTurns: STEPS + 5 }));
    assert.ok((await mock.overflows()).length > 0);
  } finally {
    mock.stop();
  }
});
