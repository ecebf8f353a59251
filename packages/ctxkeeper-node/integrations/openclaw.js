// ctxkeeper-engine as an OpenClaw context engine: a native OpenClaw plug-in (the package root
// carries `openclaw.plugin.json`, and package.json's `openclaw.extensions` names this file)
// that registers the engine `ctxkeeper` for the `plugins.slots.contextEngine` slot.
//
//   // openclaw.json
//   {
//     plugins: {
//       load: { paths: ["./node_modules/ctxkeeper-engine"] },
//       slots: { contextEngine: "ctxkeeper" },
//       entries: { ctxkeeper: { enabled: true, config: { policy: "default" } } },
//     },
//   }
//
// The engine owns compaction (`info.ownsCompaction`: OpenClaw's own auto-compaction and its
// pre-prompt overflow check stay off while it is selected):
//
// - `commitTurn` (OpenClaw's durable turns) and `ingest` / `ingestBatch` / `afterTurn` (other
//   hosts) append the turn's messages to a ContextManager of the OpenAI Chat shape, one per
//   OpenClaw session, saved in a session store (default: `ctxkeeper/sessions.sqlite` in
//   OpenClaw's state directory), so a turn resumes where the last one left off, and what a
//   compaction archived stays readable after OpenClaw exits;
// - `assemble` hands OpenClaw the managed history, within the token budget OpenClaw gives
//   the turn (shrunk by what the turn itself added since), compacting when it must;
// - `compact` compacts now (`/compact`, and OpenClaw's provider-overflow recovery).
//
// In a durable turn (OpenClaw's embedded agent) OpenClaw appends the turn's own messages (its
// tool calls and their results) to the history the engine assembled and commits them only
// when the turn is accepted: the engine shrinks the history to make room for them, not them.
//
// OpenClaw's messages (`user`, `assistant` with `toolCall` blocks, `toolResult`, and its own
// summary and shell-transcript roles) are none of the three wire shapes the manager takes:
// they are converted to Chat messages on the way in and back on the way out, and a message
// the engine kept as it was comes back as OpenClaw's own object (thinking blocks included,
// which a message the engine rewrote loses: the Chat shape has no slot for them). The
// package does not import `openclaw`.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const { ContextManager } = require("../index.js");

const ENGINE_ID = "ctxkeeper";
const COMMITTED_KEYS_KEPT = 512;

// ---------------------------------------------------------------------------------------
// OpenClaw's AgentMessage <-> OpenAI Chat

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter((part) => part && part.type === "text" && typeof part.text === "string")
    .map((part) => part.text)
    .join("");
}

/** The text of a tool result's content blocks (an image is named, not carried). */
function resultText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => (part?.type === "text" ? part.text : part?.type === "image" ? `[image ${part.mimeType ?? ""}]`.trim() : ""))
    .filter((text) => text !== "")
    .join("\n");
}

function userParts(content) {
  return content.map((part) =>
    part?.type === "image" && typeof part.data === "string"
      ? { type: "image_url", image_url: { url: `data:${part.mimeType ?? "image/png"};base64,${part.data}` } }
      : { type: "text", text: part?.type === "text" ? part.text : `[${part?.type ?? "part"}]` },
  );
}

/** One OpenClaw message as one Chat message; null for what never reaches the model. */
function toChatMessage(message, state) {
  switch (message?.role) {
    case "user":
      return {
        role: "user",
        content: typeof message.content === "string" ? message.content : userParts(message.content ?? []),
      };
    case "assistant": {
      const blocks = Array.isArray(message.content) ? message.content : [{ type: "text", text: String(message.content ?? "") }];
      const calls = blocks
        .filter((block) => block?.type === "toolCall")
        .map((block) => {
          state.toolNames.set(block.id, block.name);
          return {
            id: block.id,
            type: "function",
            function: {
              name: block.name,
              arguments: typeof block.arguments === "string" ? block.arguments : JSON.stringify(block.arguments ?? {}),
            },
          };
        });
      state.assistant = message;
      const text = textOf(blocks);
      const chat = { role: "assistant", content: text === "" && calls.length ? null : text };
      if (calls.length) chat.tool_calls = calls;
      return chat;
    }
    case "toolResult":
      state.toolNames.set(message.toolCallId, message.toolName);
      return { role: "tool", tool_call_id: message.toolCallId, content: resultText(message.content) };
    case "compactionSummary":
    case "branchSummary":
      return { role: "user", content: `Summary of the conversation so far:\n${message.summary ?? ""}` };
    case "bashExecution":
      if (message.excludeFromContext) return null;
      return { role: "user", content: `Ran \`${message.command}\`:\n${message.output ?? ""}` };
    case "custom":
      if (message.excludeFromContext) return null;
      return {
        role: "user",
        content: typeof message.content === "string" ? message.content : userParts(message.content ?? []),
      };
    default:
      // The manager refuses it with an InvalidInputError naming the role.
      return { role: String(message?.role), content: textOf(message?.content) };
  }
}

/** OpenClaw's messages as Chat messages, remembering which Chat message stands for which. */
function toChat(messages, state) {
  const out = [];
  for (const message of messages) {
    const chat = toChatMessage(message, state);
    if (chat === null) continue;
    state.originals.set(chat, message);
    out.push(chat);
  }
  return out;
}

function parseArguments(text) {
  if (typeof text !== "string") return text ?? {};
  try {
    const value = JSON.parse(text);
    return value && typeof value === "object" ? value : { value };
  } catch {
    return { input: text };
  }
}

function chatText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (part?.type === "text" ? part.text : "")).join("");
  return "";
}

/** Chat messages (a managed request) back as OpenClaw messages: OpenClaw's own object where
 * the engine kept a message as given. */
function fromChat(messages, state) {
  const now = Date.now();
  return messages.map((message) => {
    const original = state.originals.get(message) ?? state.transcript?.get(canonical(message));
    if (original) return original;
    const text = chatText(message.content);
    switch (message.role) {
      case "system":
      case "developer":
        // What the engine writes in place of what it compacted (its summary, its notes).
        return { role: "user", content: text, timestamp: now };
      case "user":
        return {
          role: "user",
          content:
            typeof message.content === "string"
              ? message.content
              : (message.content ?? []).map((part) =>
                  part?.type === "image_url"
                    ? imageBlock(part.image_url?.url) ?? { type: "text", text: "[image]" }
                    : { type: "text", text: part?.text ?? "" },
                ),
          timestamp: now,
        };
      case "assistant": {
        const content = [];
        if (text) content.push({ type: "text", text });
        for (const call of message.tool_calls ?? []) {
          content.push({ type: "toolCall", id: call.id, name: call.function.name, arguments: parseArguments(call.function.arguments) });
        }
        const like = state.assistant ?? {};
        return {
          role: "assistant",
          content,
          api: like.api ?? "openai-completions",
          provider: like.provider ?? "ctxkeeper",
          model: like.model ?? "ctxkeeper",
          usage: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
          stopReason: message.tool_calls?.length ? "toolUse" : "stop",
          timestamp: now,
        };
      }
      case "tool":
        return {
          role: "toolResult",
          toolCallId: message.tool_call_id,
          toolName: state.toolNames.get(message.tool_call_id) ?? "tool",
          content: [{ type: "text", text }],
          isError: false,
          timestamp: now,
        };
      default:
        return { role: "user", content: text, timestamp: now };
    }
  });
}

/** Remembers the transcript OpenClaw shows (the history before a turn): a message the engine
 * hands back unchanged, even from a session resumed from the store, comes back as OpenClaw's
 * own object (its timestamp, its metadata), and a tool result rebuilt from the Chat shape gets
 * its tool's name back. */
function learnTranscript(messages, state) {
  if (!Array.isArray(messages)) return;
  state.transcript = new Map();
  for (const message of messages) {
    const chat = toChatMessage(message, state);
    if (chat !== null) state.transcript.set(canonical(chat), message);
  }
}

/** A JSON text of `value` with every object's keys in order. */
function canonical(value) {
  return JSON.stringify(value, (_key, item) =>
    item && typeof item === "object" && !Array.isArray(item)
      ? Object.fromEntries(Object.keys(item).sort().map((key) => [key, item[key]]))
      : item,
  );
}

function imageBlock(url) {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url ?? "");
  return match ? { type: "image", mimeType: match[1], data: match[2] } : null;
}

// ---------------------------------------------------------------------------------------
// The turn ledger: which of OpenClaw's accepted turns the stored session holds (commitTurn
// must be atomic and idempotent per advancement key), and how many of the transcript's
// messages it covers. A commit is written ahead as `pending`, then the session is saved, then
// the key is recorded: a commit found pending at the next open is complete when the stored
// session holds more messages than before it.

function readLedger(file) {
  try {
    const ledger = JSON.parse(fs.readFileSync(file, "utf8"));
    return { committed: ledger.committed ?? [], transcript: ledger.transcript ?? 0, pending: ledger.pending ?? null };
  } catch {
    return { committed: [], transcript: 0, pending: null };
  }
}

function writeLedger(file, ledger) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const next = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(next, JSON.stringify(ledger));
  fs.renameSync(next, file);
}

// ---------------------------------------------------------------------------------------

/** The agent of an OpenClaw session key (`agent:<id>:…`). */
function agentOf(sessionKey) {
  const match = /^agent:([^:]+):/.exec(sessionKey ?? "");
  return match ? match[1] : undefined;
}

/**
 * OpenClaw's `ContextEngine` over ctxkeeper. `options`: the plug-in's config
 * (`plugins.entries.ctxkeeper.config`) and where its state lives:
 *
 * - `store`: a session store URL (`sqlite:///…`, `postgres://…`, …); default
 *   `sqlite://<stateDir>/ctxkeeper/sessions.sqlite`; `"memory"` keeps nothing between turns
 *   (each turn then rebuilds the managed context from the transcript OpenClaw hands it);
 * - `workspace`: the archive (default: the store's own);
 * - `policy`, `summarizer`, `summarizerUrl`, `summarizerModel`, `tenant`: as `ContextManager.open`;
 * - `model`: the tokenizer's model when OpenClaw names none (default: the model of the run);
 * - `window`: the window assumed before OpenClaw states a budget (default 128000);
 * - `reserveTokens`: tokens kept free beyond OpenClaw's budget (default 0: the first budget
 *   OpenClaw states for a turn already leaves out its system prompt and its compaction reserve,
 *   16,384 tokens or a quarter of the window);
 * - `stateDir`: where the default store and the turn ledger live.
 */
class CtxkeeperContextEngine {
  #options;
  #sessions = new Map();

  constructor(options = {}) {
    this.#options = { ...options };
    this.#options.stateDir ??= path.join(os.homedir(), ".openclaw");
    this.info = {
      id: ENGINE_ID,
      name: "ctxkeeper",
      version: require("../package.json").version,
      ownsCompaction: true,
      transcriptSemantics: {
        currentTurnFence: "before-current-turn-entry-v1",
        turnAdvancementIdempotency: "atomic-idempotent-v1",
      },
      hostRequirements: {
        "agent-run": {
          requiredCapabilities: ["assemble-before-prompt"],
          unsupportedMessage:
            "ctxkeeper owns compaction and must assemble the prompt: use OpenClaw's embedded runtime, or select the legacy context engine.",
        },
      },
    };
  }

  /** The session store URL (null: none). */
  get store() {
    const configured = this.#options.store;
    if (configured === "memory" || configured === null) return null;
    return configured ?? `sqlite://${path.join(this.#options.stateDir, "ctxkeeper", "sessions.sqlite")}`;
  }

  /** The ContextManager of an OpenClaw session (`sessionId`, and its `sessionKey` or
   * `agentId`), opened from the store when it was saved: `search`, `read`, `stats` of what
   * OpenClaw's session archived, after OpenClaw is gone too. */
  async manager({ sessionId, sessionKey, agentId, model } = {}) {
    return (await this.#session({ sessionId, sessionKey, agentId, model })).manager;
  }

  #ledgerFile(name) {
    const digest = crypto.createHash("sha256").update(name).digest("hex").slice(0, 32);
    return path.join(this.#options.stateDir, "ctxkeeper", "turns", `${digest}.json`);
  }

  #session({ sessionId, sessionKey, agentId, model, window }) {
    const name = sessionId ?? sessionKey;
    if (!name) return Promise.reject(new TypeError("ctxkeeper: OpenClaw named no session"));
    let opening = this.#sessions.get(name);
    if (!opening) {
      opening = this.#open(name, agentId ?? agentOf(sessionKey), model, window);
      this.#sessions.set(name, opening);
      opening.catch(() => this.#sessions.delete(name));
    }
    return opening;
  }

  async #open(name, agent, model, window) {
    const store = this.store;
    const spec = this.#spec(name, agent, model);
    const opened = window ?? this.#options.window ?? 128000;
    const manager = await ContextManager.open({ ...spec, window: opened });
    const ledgerFile = store ? this.#ledgerFile(`${store}\n${name}`) : null;
    const ledger = ledgerFile ? readLedger(ledgerFile) : { committed: [], transcript: 0, pending: null };
    if (ledger.pending) {
      // The commit written ahead either reached the stored session or it did not.
      if (manager.stats().ingested > ledger.pending.ingested) {
        ledger.committed.push(ledger.pending.key);
        ledger.transcript = ledger.pending.transcript;
      }
      ledger.pending = null;
      writeLedger(ledgerFile, ledger);
    }
    return {
      name,
      spec,
      manager,
      window: opened,
      ledger,
      ledgerFile,
      convert: { toolNames: new Map(), originals: new WeakMap(), transcript: null, assistant: null },
      budget: null,
      queue: Promise.resolve(),
    };
  }

  /** The `ContextManager.open` options of a session, less its window. */
  #spec(name, agent, model) {
    const options = this.#options;
    const store = this.store;
    const spec = { model: options.model ?? model ?? "gpt-4o", wire: "openai-chat" };
    for (const key of ["policy", "workspace", "summarizer", "summarizerUrl", "summarizerModel", "tenant"]) {
      if (options[key] !== undefined) spec[key] = options[key];
    }
    if (store) {
      spec.store = store;
      spec.session = name;
      if (agent) spec.agent = agent;
    }
    return spec;
  }

  /** Budgets the session's history to `window` tokens: the manager is reopened at that window
   * (from the store; without one, rebuilt from the transcript OpenClaw shows next). */
  async #rebudget(session, window) {
    if (session.window === window) return;
    if (session.ledgerFile) await session.manager.save();
    session.manager = await ContextManager.open({ ...session.spec, window });
    session.window = window;
    session.convert.originals = new WeakMap();
    if (!session.ledgerFile) session.ledger = { committed: [], transcript: 0, pending: null };
  }

  /** Runs `work` on the session's queue (OpenClaw may call lifecycle methods concurrently). */
  async #locked(params, work) {
    const session = await this.#session(params);
    const run = session.queue.then(() => work(session));
    session.queue = run.catch(() => undefined);
    return run;
  }

  async #append(session, messages) {
    const chat = toChat(messages, session.convert);
    if (chat.length) await session.manager.ingest(chat);
    return chat.length;
  }

  /** Takes in the transcript OpenClaw shows when the session holds none of it yet: a session
   * that started before the engine was selected, or every turn with `store: "memory"`. */
  async #catchUp(session, messages) {
    const ledger = session.ledger;
    if (session.manager.stats().ingested > 0 || ledger.committed.length > 0) return;
    if (!Array.isArray(messages) || messages.length === 0) return;
    await this.#append(session, messages);
    ledger.transcript = messages.length;
    if (session.ledgerFile) {
      await session.manager.save();
      writeLedger(session.ledgerFile, ledger);
    }
  }

  async ingest({ sessionId, sessionKey, message }) {
    return this.#locked({ sessionId, sessionKey }, async (session) => {
      const count = await this.#append(session, [message]);
      session.ledger.transcript += 1;
      if (session.ledgerFile) writeLedger(session.ledgerFile, session.ledger);
      return { ingested: count > 0 };
    });
  }

  async ingestBatch({ sessionId, sessionKey, messages }) {
    return this.#locked({ sessionId, sessionKey }, async (session) => {
      const count = await this.#append(session, messages);
      session.ledger.transcript += messages.length;
      if (session.ledgerFile) writeLedger(session.ledgerFile, session.ledger);
      return { ingestedCount: count };
    });
  }

  /** Non-durable hosts: the turn's new messages (after `prePromptMessageCount`), then save. */
  async afterTurn({ sessionId, sessionKey, messages, prePromptMessageCount }) {
    return this.#locked({ sessionId, sessionKey }, async (session) => {
      const start = Math.max(prePromptMessageCount ?? 0, session.ledger.transcript);
      if (messages.length > start) {
        await this.#append(session, messages.slice(start));
        session.ledger.transcript = messages.length;
      }
      if (session.ledgerFile) {
        await session.manager.save();
        writeLedger(session.ledgerFile, session.ledger);
      }
    });
  }

  /** OpenClaw's durable turns: the accepted turn (its user message through its last message),
   * appended and saved once per `advancementKey`. */
  async commitTurn({ advancementKey, messages, sessionId, sessionKey }) {
    return this.#locked({ sessionId, sessionKey }, async (session) => {
      const { ledger, ledgerFile, manager } = session;
      if (ledger.committed.includes(advancementKey)) return { status: "duplicate" };
      const transcript = ledger.transcript + messages.length;
      if (ledgerFile) {
        ledger.pending = { key: advancementKey, ingested: manager.stats().ingested, transcript };
        writeLedger(ledgerFile, ledger);
      }
      await this.#append(session, messages);
      if (ledgerFile) await manager.save();
      ledger.pending = null;
      ledger.committed.push(advancementKey);
      if (ledger.committed.length > COMMITTED_KEYS_KEPT) ledger.committed.splice(0, ledger.committed.length - COMMITTED_KEYS_KEPT);
      ledger.transcript = transcript;
      if (ledgerFile) writeLedger(ledgerFile, ledger);
      return { status: "committed" };
    });
  }

  /**
   * The managed history within OpenClaw's budget. A turn's first call (OpenClaw's budget for
   * the history: its prompt budget less its compaction reserve and its estimate of the
   * system prompt) sets the turn's budget; each later call, before each model call of the
   * turn, states the context window (`runtimeSettings.limits.promptTokenBudget`) less what the
   * turn has added since (OpenClaw appends that itself), and the history's budget shrinks by
   * as much.
   */
  async assemble({ sessionId, sessionKey, messages, tokenBudget, model, runtimeSettings }) {
    const reserve = this.#options.reserveTokens ?? 0;
    const stated = Number.isFinite(tokenBudget) && tokenBudget > 0 ? tokenBudget : null;
    const window = runtimeSettings?.limits?.promptTokenBudget;
    const within = stated !== null && Number.isFinite(window) && window > stated;
    const fresh = Math.max(1, (stated ?? this.#options.window ?? 128000) - reserve);
    return this.#locked({ sessionId, sessionKey, model, window: fresh }, async (session) => {
      let budget;
      if (within && session.budget !== null) {
        budget = session.budget - (window - stated);
      } else {
        await this.#rebudget(session, fresh);
        if (!within) {
          await this.#catchUp(session, messages);
          learnTranscript(messages, session.convert);
        }
        budget = fresh;
        session.budget = budget;
      }
      budget = Math.max(1, budget);
      const manager = session.manager;
      const prepared = await manager.prepare(null, { maxTokens: Math.max(0, session.window - budget) });
      return {
        messages: fromChat(prepared.messages, session.convert),
        estimatedTokens: prepared.inputTokens,
      };
    });
  }

  /** Compacts now: OpenClaw's `/compact` (`customInstructions` is the summary's focus) and its
   * recovery from a provider's context-overflow error. */
  async compact({ sessionId, sessionKey, tokenBudget, customInstructions }) {
    const window = Number.isFinite(tokenBudget) && tokenBudget > 0 ? tokenBudget : undefined;
    return this.#locked({ sessionId, sessionKey, window }, async (session) => {
      const manager = session.manager;
      const tokensBefore = manager.countTokens();
      const compacted = await manager.compact({ focus: customInstructions || undefined });
      const tokensAfter = manager.countTokens();
      const summary = manager.stats().summary ?? undefined;
      return compacted
        ? { ok: true, compacted: true, result: { summary, tokensBefore, tokensAfter } }
        : { ok: true, compacted: false, reason: "nothing to compact", result: { tokensBefore, tokensAfter } };
    });
  }

  async dispose() {
    const opening = [...this.#sessions.values()];
    this.#sessions.clear();
    const sessions = await Promise.allSettled(opening);
    await Promise.allSettled(sessions.filter((s) => s.status === "fulfilled").map((s) => s.value.queue));
  }
}

/** The engine factory OpenClaw calls for each operation (`ctx`: `config`, `agentDir`,
 * `workspaceDir`). */
function createContextEngineFactory(options = {}) {
  return () => new CtxkeeperContextEngine(options);
}

const configSchema = {
  type: "object",
  additionalProperties: false,
  properties: {
    store: { type: "string" },
    workspace: { type: "string" },
    policy: { type: ["string", "object"] },
    model: { type: "string" },
    window: { type: "integer", minimum: 1 },
    reserveTokens: { type: "integer", minimum: 0 },
    summarizer: { type: "string" },
    summarizerUrl: { type: "string" },
    summarizerModel: { type: "string" },
    tenant: { type: "string" },
  },
};

/** The plug-in's entry: OpenClaw calls `register(api)` when it loads the plug-in. */
function register(api) {
  const config = { ...(api.pluginConfig ?? {}) };
  if (config.stateDir === undefined) {
    try {
      config.stateDir = api.runtime?.state?.resolveStateDir?.();
    } catch {
      // The default below.
    }
  }
  api.registerContextEngine(ENGINE_ID, createContextEngineFactory(config));
}

module.exports = {
  id: ENGINE_ID,
  name: "ctxkeeper",
  description: "ctxkeeper's context engine: compaction with archives that stay readable",
  kind: "context-engine",
  configSchema,
  register,
  CtxkeeperContextEngine,
  createContextEngineFactory,
  toChat,
  fromChat,
};
