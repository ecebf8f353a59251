// ctxkeeper-engine for the OpenAI Agents SDK for JavaScript (`@openai/agents`): a `Session`
// whose history is the managed context, and the `callModelInputFilter` that manages every
// model call inside a run (the twin of the Python wheel's `CtxkeeperSession`).
//
//   const { run } = require("@openai/agents");
//   const { CtxkeeperSession } = require("ctxkeeper-engine/integrations/openai-agents");
//
//   const session = new CtxkeeperSession("task-1", { model: "gpt-4o", window: 128000 });
//   const result = await run(agent, "Fix the failing test", {
//     session,
//     callModelInputFilter: session.modelInputFilter,
//   });
//   await session.manager.search("Traceback"); // what left the context is still there
//
// The SDK's items (`function_call` with `callId`, `function_call_result`, messages) are kept
// in a ContextManager of the Responses shape, converted on the way in and out; an item the
// engine kept as given comes back as the SDK's own object. Within one run the SDK sends
// every model call the run's whole input plus what the run generated, without asking the
// session again: the filter ingests whatever of it is new and hands the call the managed
// context. The package does not import `@openai/agents`.
"use strict";

const { ContextManager } = require("../index.js");

function outputText(output) {
  if (typeof output === "string") return output;
  if (Array.isArray(output)) {
    return output.map((part) => (part.type === "input_text" || part.type === "text" ? part.text : JSON.stringify(part))).join("\n");
  }
  if (output && output.type === "text") return output.text;
  return JSON.stringify(output ?? "");
}

/** An SDK item as a Responses input item. */
function toResponses(item) {
  switch (item.type) {
    case "function_call":
      return { type: "function_call", call_id: item.callId, name: item.name, arguments: item.arguments ?? "{}" };
    case "function_call_result":
      return { type: "function_call_output", call_id: item.callId, output: outputText(item.output) };
    case "reasoning":
      return null;
    default: {
      if (!item.role) return { ...item };
      const content = item.content;
      if (item.role === "assistant") {
        const parts = Array.isArray(content)
          ? content.map((part) =>
              part.type === "output_text" ? { type: "output_text", text: part.text } : { type: "output_text", text: part.refusal ?? part.text ?? "" },
            )
          : [{ type: "output_text", text: String(content ?? "") }];
        return { type: "message", role: "assistant", content: parts };
      }
      if (typeof content === "string") return { role: item.role, content };
      const parts = (content ?? []).map((part) =>
        part.type === "input_text" ? { type: "input_text", text: part.text } : { type: "input_text", text: `[${part.type}]` },
      );
      return { role: item.role, content: parts };
    }
  }
}

/** A Responses input item as an SDK item. */
function fromResponses(item, names) {
  switch (item.type) {
    case "function_call":
      return { type: "function_call", callId: item.call_id, name: item.name, arguments: item.arguments, status: "completed" };
    case "function_call_output":
      return {
        type: "function_call_result",
        callId: item.call_id,
        name: names.get(item.call_id) ?? "tool",
        status: "completed",
        output: { type: "text", text: outputText(item.output) },
      };
    default: {
      const content = item.content;
      if (item.role === "assistant") {
        const parts = Array.isArray(content)
          ? content.map((part) => ({ type: "output_text", text: part.text ?? "" }))
          : [{ type: "output_text", text: String(content ?? "") }];
        return { type: "message", role: "assistant", status: "completed", content: parts };
      }
      if (item.role === "system" || item.role === "developer") {
        const text = typeof content === "string" ? content : (content ?? []).map((p) => p.text ?? "").join("");
        return { type: "message", role: "system", content: text };
      }
      return { type: "message", role: item.role ?? "user", content };
    }
  }
}

/** The agent's function tools in the Responses shape (what each request declares). */
function toolSchemas(agent) {
  return (agent?.tools ?? [])
    .filter((tool) => tool.type === "function" && tool.parameters)
    .map((tool) => ({ type: "function", name: tool.name, description: tool.description ?? "", parameters: tool.parameters }));
}

/** A `Session` (the `@openai/agents` protocol) whose history is ctxkeeper's managed context.
 * `options` go to `ContextManager.open` (`store` persists the session under `sessionId`).
 * The manager is opened at the first model call or `getItems`: the agent's instructions and
 * tools are counted from its first model call on (they reach the session only then). */
class CtxkeeperSession {
  #options;
  #manager = null;
  #names = new Map();
  #originals = new WeakMap();
  #log = [];
  #pending = [];
  #history = 0;
  #sinceGet = 0;
  #absorbed = 0;
  #calls = 0;
  #queue = Promise.resolve();

  constructor(sessionId, options = {}) {
    this.sessionId = sessionId;
    this.#options = { ...options, wire: "responses" };
    if (this.#options.store !== undefined) this.#options.session ??= sessionId;
    /** `RunOptions.callModelInputFilter`: every model call of a run gets the managed context. */
    this.modelInputFilter = (args) => this.#locked(() => this.#filter(args));
  }

  /** The session's ContextManager (`search`, `read`, `stats`, `events`); null before the
   * first model call or `getItems`. */
  get manager() {
    return this.#manager;
  }

  #locked(work) {
    const next = this.#queue.then(work, work);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #ensure(instructions, tools) {
    if (!this.#manager) {
      const options = { ...this.#options };
      if (instructions && options.system === undefined) options.system = instructions;
      if (tools?.length && options.tools === undefined) options.tools = tools;
      this.#manager = await ContextManager.open(options);
    }
    return this.#manager;
  }

  #convert(items) {
    const out = [];
    for (const item of items) {
      if (item.type === "function_call" || item.type === "function_call_result") this.#names.set(item.callId, item.name);
      const converted = toResponses(item);
      if (converted === null) continue;
      this.#originals.set(converted, item);
      out.push(converted);
    }
    return out;
  }

  async #flush() {
    const manager = await this.#ensure();
    const pending = this.#pending;
    this.#pending = [];
    try {
      const prepared = await manager.prepare(this.#convert(pending));
      return prepared.messages.map((item) => this.#originals.get(item) ?? fromResponses(item, this.#names));
    } catch (err) {
      this.#pending = pending.concat(this.#pending);
      throw err;
    }
  }

  async getSessionId() {
    return this.sessionId;
  }

  async getItems(limit) {
    return this.#locked(async () => {
      let items = await this.#flush();
      if (limit !== undefined && limit !== null) items = limit > 0 ? items.slice(-limit) : [];
      this.#history = items.length;
      this.#sinceGet = 0;
      this.#absorbed = 0;
      return items;
    });
  }

  async addItems(items) {
    return this.#locked(async () => {
      this.#sinceGet += items.length;
      const skip = Math.min(this.#absorbed, items.length);
      this.#absorbed -= skip;
      this.#log.push(...items);
      this.#pending.push(...items.slice(skip));
    });
  }

  async popItem() {
    return this.#locked(async () => {
      if (this.#log.length === 0) return undefined;
      const item = this.#log.pop();
      if (this.#pending.length) {
        this.#pending.pop();
      } else {
        // Already in the manager, which takes nothing back: rebuild it from the log.
        this.#manager = null;
        this.#pending = this.#log.slice();
      }
      this.#sinceGet = Math.max(this.#sinceGet - 1, 0);
      return item;
    });
  }

  async clearSession() {
    return this.#locked(async () => {
      this.#manager = null;
      this.#log = [];
      this.#pending = [];
      this.#history = this.#sinceGet = this.#absorbed = 0;
    });
  }

  async #filter({ modelData, agent }) {
    if (!this.#manager) {
      const instructions = typeof modelData.instructions === "string" ? modelData.instructions : undefined;
      await this.#ensure(instructions, toolSchemas(agent));
    }
    const fresh = modelData.input.slice(this.#history);
    const extra = fresh.slice(this.#sinceGet);
    this.#absorbed += extra.length;
    this.#sinceGet += extra.length;
    this.#log.push(...extra);
    this.#pending.push(...extra);
    if (this.#calls > 0) {
      // The filter does not see the previous call's usage: anchor the count on that
      // request's exact size, so only what is new is estimated.
      this.#manager.usage(this.#manager.countTokens());
    }
    this.#calls += 1;
    const input = await this.#flush();
    return { input, instructions: modelData.instructions };
  }
}

module.exports = { CtxkeeperSession, toResponses, fromResponses };
