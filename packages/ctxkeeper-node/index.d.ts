// Types of ctxkeeper-engine (index.js): the API shape every face of ctxkeeper keeps, in
// TypeScript's idiom. Messages are plain objects in the caller's own wire shape.

/** The caller's wire shape. */
export type Wire = "openai-chat" | "responses" | "anthropic";

/** A message (Responses: an input item) in the manager's wire shape. */
export type WireMessage = Record<string, unknown>;

/** An engine event (`type`: `context_compaction_end`, `tool_result_truncated`, …). */
export interface EngineEvent {
  type: string;
  [field: string]: unknown;
}

export interface OpenOptions {
  /** A preset name, the path of a TOML config file, or an object of `[policy]` overrides
   * (`preset` names the base). Default: `"default"`. */
  policy?: string | Record<string, unknown>;
  /** The model (its tokenizer and, without `window`, its window). Default `gpt-4o`. */
  model?: string;
  /** The model's context window in tokens. */
  window?: number;
  /** Default `openai-chat`. */
  wire?: Wire;
  /** The instruction field (Anthropic `system`, Responses `instructions`; Chat: a string). */
  system?: unknown;
  /** The tools of every request, in the wire shape (their schemas count as fixed tokens). */
  tools?: unknown[];
  fixedTokens?: number;
  /** A session store URL (`sqlite:///path`, `postgres://…`, `file:///dir`, …): the
   * session is resumed when stored and saved at every step. */
  store?: string;
  session?: string;
  tenant?: string;
  user?: string;
  agent?: string;
  /** The archive: a directory or an archive URL (default: the store's own, else memory). */
  workspace?: string;
  /** `extractive` (default), `openai` or `anthropic`. */
  summarizer?: string;
  summarizerUrl?: string;
  summarizerModel?: string;
  /** Receives every engine event as it happens (instead of `events()`). */
  onEvent?: (event: EngineEvent) => void;
}

export class Prepared {
  readonly wire: Wire;
  /** The messages to send (Responses: the `input` items). */
  readonly messages: WireMessage[];
  /** The instruction field (Anthropic `system`, Responses `instructions`), or null. */
  readonly system: unknown;
  readonly tools: unknown[] | null;
  /** Estimated input tokens of the request (context + fixed tokens). */
  readonly inputTokens: number;
  /** Whether a compaction ran for this request. */
  readonly compacted: boolean;
  /** Whether these messages differ from the previous request plus the messages ingested
   * since, as they were given. */
  readonly changed: boolean;
  readonly budgetUsedPct: number;
  readonly budgetNotice: string | null;
  /** The window the request was budgeted to (the model's, less `maxTokens`). */
  readonly window: number;
  /** The fields to spread into the client call: `messages` (Responses: `input`) and the
   * instruction field when there is one. */
  readonly params: Record<string, unknown>;
  readonly length: number;
  /** A whole request body: `model`, the conversation fields, the tools, and `extra`. */
  request(model?: string, extra?: Record<string, unknown>): Record<string, unknown>;
}

export interface SearchHit {
  reference: string;
  line: number;
  text: string;
}

export interface ArchivedItem {
  reference: string;
  bytes: number;
}

export interface Stats {
  messages: number;
  ingested: number;
  compactions: number;
  archivedBytes: number;
  window: number;
  fixedTokens: number;
  policy: string;
  model: string;
  droppedEvents: number;
  engineSeconds: number;
  summary: string | null;
}

export interface SessionKey {
  tenant: string;
  session: string;
  user?: string;
  agent?: string;
  stored?: boolean;
}

/** One session's managed context, in the caller's wire shape. */
export class ContextManager {
  private constructor();
  static open(options?: OpenOptions): Promise<ContextManager>;
  /** Appends messages; bad input rejects with `InvalidInputError` and ingests nothing. */
  ingest(messages: WireMessage | WireMessage[]): Promise<void>;
  /** Compacts when a trigger fires; `messages`, when given, are ingested first. */
  prepare(messages?: WireMessage | WireMessage[] | null, options?: { maxTokens?: number }): Promise<Prepared>;
  /** The provider said the context is too long: compacts harder so the retry fits; null
   * when `error` is not a context-overflow error. */
  onOverflow(
    error?: unknown,
    options?: { status?: number; tokens?: number; limit?: number; attempt?: number },
  ): Promise<Prepared | null>;
  /** The provider's usage report (or input tokens) for the last request. */
  usage(report: number | Record<string, unknown>): number;
  compact(options?: { focus?: string; overrides?: string }): Promise<boolean>;
  events(): EngineEvent[];
  search(query: string, options?: { regex?: boolean; limit?: number }): Promise<SearchHit[]>;
  read(reference: string, options?: { offset?: number; limit?: number }): Promise<string>;
  archived(): Promise<ArchivedItem[]>;
  countTokens(): number;
  save(): Promise<void>;
  stats(): Stats;
  readonly session: SessionKey;
  readonly wire: Wire;
}

export class CtxkeeperError extends Error {
  cause?: CtxkeeperError;
}
/** Refused input; nothing was ingested or stored. */
export class InvalidInputError extends CtxkeeperError {
  /** The place (`messages[2].role`). */
  path?: string | null;
  /** The message of the batch to blame. */
  index?: number | null;
  /** The rule: `tool_pairing`, `hostile_id`, `invalid_message`; null for a parse error. */
  kind?: string | null;
}
export class ConfigError extends CtxkeeperError {}
export class StoreError extends CtxkeeperError {}
export class ConflictError extends StoreError {}
export class ArchiveError extends StoreError {}
export class NotFoundError extends CtxkeeperError {}
export class ContextOverflowError extends CtxkeeperError {}
export class NoRoomError extends ContextOverflowError {
  needed: number;
  limit: number;
}
export class UnrecoverableError extends ContextOverflowError {
  attempts: number;
  tokens: number;
}

/** A message in OpenClaw's own shape (its `AgentMessage`: `user`, `assistant` with `text`,
 * `thinking` and `toolCall` blocks, `toolResult`, and its `compactionSummary`, `branchSummary`,
 * `bashExecution` and `custom` roles), as the OpenClaw plug-in takes and returns it. */
export interface OpenClawMessage {
  role: string;
  [field: string]: unknown;
}

/** The OpenClaw plug-in's config (`plugins.entries.ctxkeeper.config` in openclaw.json), the
 * options of `CtxkeeperContextEngine` (ctxkeeper-engine/integrations/openclaw). */
export interface OpenClawEngineConfig {
  /** A session store URL; default `sqlite://<stateDir>/ctxkeeper/sessions.sqlite`; `"memory"`
   * keeps nothing between turns (each turn rebuilds from OpenClaw's transcript). */
  store?: string;
  /** The archive (default: the store's own). */
  workspace?: string;
  policy?: string | Record<string, unknown>;
  /** The tokenizer's model when OpenClaw names none (default: the run's model). */
  model?: string;
  /** The window assumed before OpenClaw states a budget (default 128000). */
  window?: number;
  /** Tokens kept free beyond the budget OpenClaw states (default 0). */
  reserveTokens?: number;
  summarizer?: string;
  summarizerUrl?: string;
  summarizerModel?: string;
  tenant?: string;
  /** Where the default store and the turn ledger live (default: OpenClaw's state directory,
   * else `~/.openclaw`). */
  stateDir?: string;
}

/** The presets `policy` accepts by name. */
export function presets(): string[];
/** The version of the engine the addon was built from. */
export function version(): string;
