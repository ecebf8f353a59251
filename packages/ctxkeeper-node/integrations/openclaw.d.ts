// Types of ctxkeeper-engine/integrations/openclaw (openclaw.js): the OpenClaw plug-in and its
// context engine. OpenClaw's own types are not imported: the shapes below are the parts of its
// `ContextEngine` contract the engine uses.
import type { ContextManager, OpenClawEngineConfig, OpenClawMessage, WireMessage } from "../index";

export type { OpenClawEngineConfig, OpenClawMessage };

/** OpenClaw's session the engine keeps: `sessionId`, with its `sessionKey` (`agent:<id>:…`)
 * or `agentId`. */
export interface OpenClawSessionRef {
  sessionId: string;
  sessionKey?: string;
  agentId?: string;
}

export interface OpenClawEngineInfo {
  id: "ctxkeeper";
  name: string;
  version: string;
  ownsCompaction: true;
  transcriptSemantics: {
    currentTurnFence: "before-current-turn-entry-v1";
    turnAdvancementIdempotency: "atomic-idempotent-v1";
  };
  hostRequirements: Record<string, { requiredCapabilities: string[]; unsupportedMessage?: string }>;
}

export interface OpenClawAssembleResult {
  messages: OpenClawMessage[];
  estimatedTokens: number;
}

export interface OpenClawCompactResult {
  ok: boolean;
  compacted: boolean;
  reason?: string;
  result?: { summary?: string; tokensBefore: number; tokensAfter?: number };
}

/** OpenClaw's `ContextEngine` over ctxkeeper: one ContextManager (OpenAI Chat shape) per
 * OpenClaw session, saved in the store. */
export class CtxkeeperContextEngine {
  constructor(options?: OpenClawEngineConfig);
  readonly info: OpenClawEngineInfo;
  /** The session store URL (null with `store: "memory"`). */
  readonly store: string | null;
  /** The ContextManager of a session, opened from the store when it was saved: `search`,
   * `read`, `stats` of what the session archived. */
  manager(session: OpenClawSessionRef & { model?: string }): Promise<ContextManager>;
  ingest(params: OpenClawSessionRef & { message: OpenClawMessage }): Promise<{ ingested: boolean }>;
  ingestBatch(params: OpenClawSessionRef & { messages: OpenClawMessage[] }): Promise<{ ingestedCount: number }>;
  afterTurn(params: OpenClawSessionRef & { messages: OpenClawMessage[]; prePromptMessageCount?: number }): Promise<void>;
  /** Appends and saves an accepted turn once per `advancementKey`. */
  commitTurn(
    params: OpenClawSessionRef & { advancementKey: string; messages: OpenClawMessage[] },
  ): Promise<{ status: "committed" | "duplicate" }>;
  /** The managed history within OpenClaw's token budget. */
  assemble(
    params: OpenClawSessionRef & {
      messages: OpenClawMessage[];
      tokenBudget?: number;
      model?: string;
      runtimeSettings?: { limits?: { promptTokenBudget?: number | null } };
    },
  ): Promise<OpenClawAssembleResult>;
  /** Compacts now (`/compact`, recovery from a provider's overflow error). */
  compact(params: OpenClawSessionRef & { tokenBudget?: number; customInstructions?: string }): Promise<OpenClawCompactResult>;
  dispose(): Promise<void>;
}

/** The factory `api.registerContextEngine` takes. */
export function createContextEngineFactory(config?: OpenClawEngineConfig): () => CtxkeeperContextEngine;

/** The plug-in's entry, as OpenClaw loads it. */
export const id: "ctxkeeper";
export const name: string;
export const description: string;
export const kind: "context-engine";
export const configSchema: Record<string, unknown>;
export function register(api: {
  pluginConfig?: Record<string, unknown>;
  runtime?: { state?: { resolveStateDir?: () => string } };
  registerContextEngine(id: string, factory: () => unknown): void;
}): void;

/** The conversion state `toChat` and `fromChat` share. */
export interface OpenClawConversion {
  toolNames: Map<string, string>;
  originals: WeakMap<object, OpenClawMessage>;
  transcript: Map<string, OpenClawMessage> | null;
  assistant: OpenClawMessage | null;
}
export function toChat(messages: OpenClawMessage[], state: OpenClawConversion): WireMessage[];
export function fromChat(messages: WireMessage[], state: OpenClawConversion): OpenClawMessage[];
