// ctxkeeper-engine for the Vercel AI SDK (`ai`): a `prepareStep` that hands every step of a
// generateText / streamText / ToolLoopAgent loop the managed context instead of the whole
// history.
//
//   const { ContextManager } = require("ctxkeeper-engine");
//   const { ctxkeeperPrepareStep } = require("ctxkeeper-engine/integrations/ai-sdk");
//
//   const cm = await ContextManager.open({ model: "gpt-4o", window: 128000 });
//   const result = await generateText({
//     model, tools, system, prompt,
//     stopWhen: stepCountIs(50),
//     prepareStep: ctxkeeperPrepareStep(cm),
//   });
//
// Each step, the messages the conversation gained since the previous step (the call's
// initial messages, then the model's and the tools' response messages) are converted to
// the OpenAI Chat shape and ingested; the step's previous usage report calibrates the count;
// the prepared request, converted back, is the step's `messages`. Messages the engine kept
// as they were come back as the AI SDK's own objects. Reasoning parts have no slot in the
// Chat shape and are not carried into managed requests. The package does not import `ai`.
"use strict";

/** A ModelMessage's content as text parts and other parts. */
function textOf(parts) {
  return parts
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("");
}

function resultText(output) {
  if (output === undefined || output === null) return "";
  switch (output.type) {
    case "text":
    case "error-text":
      return String(output.value);
    case "json":
    case "error-json":
      return JSON.stringify(output.value);
    case "execution-denied":
      return `Tool execution denied${output.reason ? `: ${output.reason}` : ""}`;
    case "content":
      return (output.value ?? []).map((part) => (part.type === "text" ? part.text : JSON.stringify(part))).join("\n");
    default:
      return JSON.stringify(output);
  }
}

/** Converts the AI SDK's ModelMessages to OpenAI Chat messages, remembering which Chat
 * message stands for which original (when one stands for exactly one). */
function toChat(messages, state) {
  const out = [];
  for (const message of messages) {
    const converted = [];
    const content = message.content;
    switch (message.role) {
      case "system":
        converted.push({ role: "system", content: typeof content === "string" ? content : textOf(content) });
        break;
      case "user":
        if (typeof content === "string") {
          converted.push({ role: "user", content });
        } else {
          const parts = content.map((part) =>
            part.type === "text"
              ? { type: "text", text: part.text }
              : part.type === "image" && (typeof part.image === "string" || part.image instanceof URL)
                ? { type: "image_url", image_url: { url: String(part.image) } }
                : { type: "text", text: `[${part.type} part]` },
          );
          converted.push({ role: "user", content: parts });
        }
        break;
      case "assistant": {
        const parts = typeof content === "string" ? [{ type: "text", text: content }] : content;
        const calls = parts
          .filter((part) => part.type === "tool-call")
          .map((part) => {
            state.toolNames.set(part.toolCallId, part.toolName);
            return {
              id: part.toolCallId,
              type: "function",
              function: { name: part.toolName, arguments: JSON.stringify(part.input ?? {}) },
            };
          });
        const text = textOf(parts);
        const chat = { role: "assistant", content: text === "" && calls.length ? null : text };
        if (calls.length) chat.tool_calls = calls;
        converted.push(chat);
        break;
      }
      case "tool":
        for (const part of content) {
          if (part.type !== "tool-result") continue;
          state.toolNames.set(part.toolCallId, part.toolName);
          converted.push({ role: "tool", tool_call_id: part.toolCallId, content: resultText(part.output) });
        }
        break;
      default:
        // The package refuses it with an InvalidInputError naming the role.
        converted.push({ role: message.role, content });
    }
    if (converted.length === 1) state.originals.set(converted[0], message);
    out.push(...converted);
  }
  return out;
}

function parseArguments(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Converts a prepared Chat request back to ModelMessages: the original object where the
 * engine kept a message as given. */
function fromChat(messages, state) {
  return messages.map((message) => {
    const original = state.originals.get(message);
    if (original) return original;
    const content = message.content;
    const text = typeof content === "string" ? content : Array.isArray(content) ? textOf(content) : "";
    switch (message.role) {
      case "system":
      case "developer":
        return { role: "system", content: text };
      case "user":
        return { role: "user", content: typeof content === "string" ? content : [{ type: "text", text }] };
      case "assistant": {
        const parts = [];
        if (text) parts.push({ type: "text", text });
        for (const call of message.tool_calls ?? []) {
          parts.push({
            type: "tool-call",
            toolCallId: call.id,
            toolName: call.function.name,
            input: parseArguments(call.function.arguments),
          });
        }
        return { role: "assistant", content: parts };
      }
      case "tool":
        return {
          role: "tool",
          content: [
            {
              type: "tool-result",
              toolCallId: message.tool_call_id,
              toolName: state.toolNames.get(message.tool_call_id) ?? "tool",
              output: { type: "text", value: text },
            },
          ],
        };
      default:
        return { role: "user", content: text };
    }
  });
}

/** The unmanaged conversation a step sees: the call's messages and every response since. */
function conversation(options) {
  if (Array.isArray(options.initialMessages) && Array.isArray(options.responseMessages)) {
    return [...options.initialMessages, ...options.responseMessages];
  }
  return options.messages;
}

/**
 * A `prepareStep` for generateText / streamText / ToolLoopAgent that manages each step's
 * messages with `manager` (a ContextManager opened with `wire: "openai-chat"`, the default).
 * `maxTokens` is the output budget the steps ask for.
 */
function ctxkeeperPrepareStep(manager, { maxTokens } = {}) {
  if (manager.wire !== "openai-chat") {
    throw new TypeError("ctxkeeperPrepareStep needs a ContextManager opened with wire: \"openai-chat\"");
  }
  const state = { seen: 0, toolNames: new Map(), originals: new WeakMap() };
  return async (options) => {
    const last = options.steps?.at?.(-1);
    const reported = last?.usage?.inputTokens;
    if (typeof reported === "number" && reported > 0) manager.usage(reported);
    const all = conversation(options);
    const fresh = all.slice(state.seen);
    state.seen = all.length;
    const prepared = await manager.prepare(toChat(fresh, state), { maxTokens });
    return { messages: fromChat(prepared.messages, state) };
  };
}

module.exports = { ctxkeeperPrepareStep, toChat, fromChat };
