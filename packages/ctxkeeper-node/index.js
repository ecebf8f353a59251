// ctxkeeper-engine: ctxkeeper's context engine inside a Node.js agent.
//
// The addon (ctxkeeper_engine.node, built from crates/ctxkeeper-node by scripts/nodepkg)
// runs one session per ContextManager; this file gives it the API shape every face of
// ctxkeeper keeps (the Python wheel's, in camelCase): messages are plain objects in the
// caller's own wire shape, work that touches a store or an archive returns a promise, and
// errors are instances of the classes below.
//
//   const { ContextManager } = require("ctxkeeper-engine");
//   const cm = await ContextManager.open({ model: "gpt-4o", window: 16000 });
//   const prepared = await cm.prepare([{ role: "user", content: "Summarize the logs" }]);
//   const reply = await client.chat.completions.create({ model: "gpt-4o", ...prepared.params });
//   cm.usage(reply.usage);
//   await cm.ingest(reply.choices[0].message);
"use strict";

const path = require("node:path");

// One addon a process, shared by every copy of the same version of this package: a host may
// load a package from several copies of its directory (OpenClaw loads a plug-in from a fresh
// copy at each registration pass), and the addon's thread-local storage is static (its
// allocator's), which the dynamic loader has room for only a few times in one process.
const ADDON = Symbol.for(`ctxkeeper-engine.addon@${require("./package.json").version}`);

function loadAddon() {
  if (globalThis[ADDON]) return globalThis[ADDON];
  const file = process.env.CTXKEEPER_ENGINE_ADDON || path.join(__dirname, "ctxkeeper_engine.node");
  try {
    globalThis[ADDON] = require(file);
    return globalThis[ADDON];
  } catch (err) {
    const wrapped = new Error(
      `ctxkeeper-engine: cannot load the native addon ${file} (build it with scripts/nodepkg): ${err.message}`,
    );
    wrapped.cause = err;
    throw wrapped;
  }
}

const native = loadAddon();

/** Base class of every ctxkeeper-engine error; `cause` is the error beneath it. */
class CtxkeeperError extends Error {
  constructor(message, fields = {}) {
    super(message);
    this.name = new.target.name;
    for (const [key, value] of Object.entries(fields)) {
      if (value !== undefined) this[key] = value;
    }
  }
}
/** Messages, tools or arguments the engine refuses; nothing was ingested or stored.
 * `path` names the place (`messages[2].role`), `index` the message of the batch,
 * `kind` the rule (`tool_pairing`, `hostile_id`, `invalid_message`). */
class InvalidInputError extends CtxkeeperError {}
/** An unknown preset, an invalid policy override, an unknown option. */
class ConfigError extends CtxkeeperError {}
/** The session store or the archive failed. */
class StoreError extends CtxkeeperError {}
/** Another writer saved the same session first. */
class ConflictError extends StoreError {}
/** Archiving failed: nothing left the context. */
class ArchiveError extends StoreError {}
/** An archive reference or a session that does not exist. */
class NotFoundError extends CtxkeeperError {}
/** The context cannot be made to fit. */
class ContextOverflowError extends CtxkeeperError {}
/** What must stay alone needs `needed` tokens, over `limit`. */
class NoRoomError extends ContextOverflowError {}
/** Overflow recovery gave up after `attempts` (the context still had `tokens`). */
class UnrecoverableError extends ContextOverflowError {}

const CLASSES = {
  CtxkeeperError,
  InvalidInputError,
  ConfigError,
  StoreError,
  ConflictError,
  ArchiveError,
  NotFoundError,
  ContextOverflowError,
  NoRoomError,
  UnrecoverableError,
};

function toError(fields) {
  const { class: name, message, cause, ...rest } = fields;
  const Class = CLASSES[name] || CtxkeeperError;
  const err = new Class(message, rest);
  if (cause) err.cause = toError(cause);
  return err;
}

function unwrap(text) {
  const answer = JSON.parse(text);
  if (answer.error) throw toError(answer.error);
  return answer.ok;
}

function json(args) {
  try {
    return JSON.stringify(args ?? {});
  } catch (err) {
    throw new InvalidInputError(`arguments are not JSON data: ${err.message}`);
  }
}

const FIELDS = {
  "openai-chat": { messages: "messages", system: null },
  responses: { messages: "input", system: "instructions" },
  anthropic: { messages: "messages", system: "system" },
};

/** What `prepare` and `onOverflow` return: the request's messages in the manager's wire
 * shape and what the step did. */
class Prepared {
  constructor(wire, messages, system, tools, figures) {
    /** The wire shape of the messages. */
    this.wire = wire;
    /** The messages to send (Responses: the `input` items). */
    this.messages = messages;
    /** The instruction field (Anthropic `system`, Responses `instructions`), or null. */
    this.system = system ?? null;
    this.tools = tools;
    /** Estimated input tokens of the request (context + fixed tokens). */
    this.inputTokens = figures.inputTokens;
    /** Whether a compaction ran for this request. */
    this.compacted = figures.compacted;
    /** Whether these messages differ from the previous request plus the messages ingested since. */
    this.changed = figures.changed;
    /** Share of the window the request uses, in percent. */
    this.budgetUsedPct = figures.budgetUsedPct;
    /** The budget notice added to the last message, if the policy asks for one. */
    this.budgetNotice = figures.budgetNotice ?? null;
    /** The window the request was budgeted to (the model's, less `maxTokens`). */
    this.window = figures.window;
  }

  /** The request fields to spread into the client call: `messages` (Responses: `input`)
   * and the instruction field when there is one. */
  get params() {
    const fields = FIELDS[this.wire];
    const params = {};
    if (fields.system && this.system !== null) params[fields.system] = this.system;
    params[fields.messages] = this.messages;
    return params;
  }

  /** A whole request body: `model`, the conversation fields, the manager's tools and any
   * other fields given. */
  request(model, extra = {}) {
    const body = {};
    if (model) body.model = model;
    Object.assign(body, this.params);
    if (this.tools) body.tools = this.tools;
    return Object.assign(body, extra);
  }

  get length() {
    return this.messages.length;
  }
}

/** The status and body text of a provider error: a string (the body), a parsed body, or an
 * SDK error (openai's `status` and `error`, the AI SDK's `statusCode` and `responseBody`). */
function errorText(error, status) {
  if (typeof error === "string") return [status ?? 400, error];
  if (error instanceof Error) {
    const code = status ?? error.status ?? error.statusCode ?? error.response?.status ?? 400;
    let body = error.responseBody ?? error.body ?? error.error;
    if (body !== undefined && body !== null && typeof body !== "string") body = JSON.stringify(body);
    return [code, body ?? error.message];
  }
  return [status ?? 400, JSON.stringify(error)];
}

/** The input tokens a usage report states: a number, OpenAI Chat `prompt_tokens`, Responses
 * or Anthropic `input_tokens` (with Anthropic's cache reads and writes), or the AI SDK's
 * `inputTokens` / `promptTokens`. */
function usageReport(report) {
  if (typeof report === "number") return report;
  if (report && typeof report === "object") {
    if (typeof report.inputTokens === "number") return report.inputTokens;
    if (typeof report.promptTokens === "number") return report.promptTokens;
  }
  return report;
}

/** One session's managed context, in the caller's wire shape. Open one with
 * `await ContextManager.open(options)`. */
class ContextManager {
  #native;
  #wire;
  #tools;
  #onEvent;
  #list = [];
  #system = null;
  #originals = new Map();
  #seq = 0;
  #session;
  #ioFree;

  constructor(token, nativeSession, opened, onEvent) {
    if (token !== OPEN) throw new TypeError("use `await ContextManager.open(options)`");
    this.#native = nativeSession;
    this.#wire = opened.wire;
    this.#tools = opened.tools ?? null;
    this.#session = opened.session;
    // No store, an in-process archive, the extractive summarizer: no step can wait for IO,
    // so steps run on this thread (the promise is resolved already) instead of a worker's.
    this.#ioFree = opened.ioFree === true;
    this.#onEvent = onEvent ?? null;
  }

  /** Opens one session. `policy` is a preset name, a config file path or an object of
   * `[policy]` overrides; `store` a session store URL (`sqlite:///…`): the session is
   * resumed when stored and saved at every step. */
  static async open(options = {}) {
    const { onEvent, ...rest } = options;
    if (onEvent !== undefined && typeof onEvent !== "function") {
      throw new ConfigError("onEvent must be a function");
    }
    const nativeSession = new native.NativeSession();
    const opened = unwrap(await nativeSession.run("open", json(rest)));
    return new ContextManager(OPEN, nativeSession, opened, onEvent);
  }

  async #run(op, args) {
    try {
      if (this.#ioFree) return unwrap(this.#native.runSync(op, json(args)));
      return unwrap(await this.#native.run(op, json(args)));
    } finally {
      this.#dispatch();
    }
  }

  #runSync(op, args) {
    return unwrap(this.#native.runSync(op, json(args)));
  }

  #dispatch() {
    if (!this.#onEvent) return;
    for (const event of this.#runSync("events")) {
      try {
        this.#onEvent(event);
      } catch (err) {
        process.emitWarning(`ctxkeeper-engine: onEvent threw: ${err?.message ?? err}`);
      }
    }
  }

  #batch(messages) {
    if (messages === undefined || messages === null) return {};
    const list = Array.isArray(messages) ? messages : [messages];
    const seqs = list.map((message) => {
      const seq = this.#seq++;
      this.#originals.set(seq, message);
      return seq;
    });
    return { messages: list, seqs };
  }

  #request(answer) {
    if (answer.kind === "full") {
      this.#list = answer.messages;
      this.#system = answer.system ?? null;
    } else {
      for (const item of answer.messages) {
        this.#list.push(typeof item === "number" ? this.#originals.get(item) : item);
      }
    }
    this.#originals.clear();
    return new Prepared(this.#wire, this.#list.slice(), this.#system, this.#tools, answer.figures);
  }

  /** Appends messages (an array in the manager's wire shape, or one message). Bad input
   * throws `InvalidInputError` and ingests nothing. */
  async ingest(messages) {
    await this.#run("ingest", this.#batch(messages));
  }

  /** Compacts when a trigger fires and returns the request's messages. `messages`, when
   * given, are ingested first; `maxTokens` is the output budget the request asks for. */
  async prepare(messages, { maxTokens } = {}) {
    const answer = await this.#run("prepare", { ...this.#batch(messages), maxTokens });
    return this.#request(answer);
  }

  /** Handles a provider's context-overflow error: compacts harder so the retry fits, and
   * returns the smaller request; null when `error` is not a context-overflow error. */
  async onOverflow(error, { status, tokens, limit, attempt } = {}) {
    const args = { tokens, limit, attempt };
    if (error !== undefined && error !== null) {
      [args.status, args.body] = errorText(error, status);
    }
    const answer = await this.#run("onOverflow", args);
    return answer === null ? null : this.#request(answer);
  }

  /** Records the provider's usage report for the last request (a number or a usage
   * object); returns the input tokens it read. */
  usage(report) {
    const tokens = this.#runSync("usage", { report: usageReport(report) });
    this.#dispatch();
    return tokens;
  }

  /** Compacts now (optionally under a one-off policy override, a TOML fragment, and with
   * focus instructions for the summary). Resolves to whether anything changed. */
  async compact({ focus, overrides } = {}) {
    return this.#run("compact", { focus, overrides });
  }

  /** The events emitted since the last call, oldest first (`type` names the event). With an
   * `onEvent` callback they go to the callback instead. */
  events() {
    return this.#runSync("events");
  }

  /** Lines of this session's archived content containing `query` (case-insensitive; a
   * regular expression with `regex: true`): `{reference, line, text}`. */
  async search(query, { regex = false, limit = 50 } = {}) {
    return this.#run("search", { query, regex, limit });
  }

  /** The whole text of an archived item, or at most `limit` bytes of it from `offset`. */
  async read(reference, { offset = 0, limit } = {}) {
    return this.#run("read", { reference, offset, limit });
  }

  /** This session's archived items: `{reference, bytes}`. */
  async archived() {
    return this.#run("archived");
  }

  /** Exact tokens of the current context plus the fixed tokens (tool schemas). */
  countTokens() {
    return this.#runSync("countTokens");
  }

  /** Saves the session now (a manager with a store also saves at every `prepare`). */
  async save() {
    await this.#run("save");
  }

  /** Figures of the managed context: messages, compactions, archived bytes, the summary. */
  stats() {
    return this.#runSync("stats");
  }

  /** The session's key: tenant, session id, and with a store its user, agent and whether
   * it was saved. */
  get session() {
    return this.#runSync("session");
  }

  /** The wire shape: `openai-chat`, `responses` or `anthropic`. */
  get wire() {
    return this.#wire;
  }

  /** The request's messages emitted whole from the context (for tests of the copy
   * `prepare` keeps). */
  _emitFull() {
    return this.#runSync("emitFull");
  }
}

const OPEN = Symbol("ContextManager.open");

module.exports = {
  ContextManager,
  Prepared,
  // Every error class, from the one table `toError` maps the addon's errors with.
  ...CLASSES,
  presets: () => native.presets(),
  version: () => native.version(),
};
