"""ctxkeeper inside agent frameworks, in-process: one module per framework.

- :mod:`ctxkeeper_engine.integrations.langchain`: :class:`CtxkeeperMiddleware`, an
  ``AgentMiddleware`` for LangChain v1's ``create_agent`` (``wrap_model_call``);
- :mod:`ctxkeeper_engine.integrations.openai_agents`: :class:`CtxkeeperSession`, a ``Session``
  for the OpenAI Agents SDK, with the per-call input filter its runs take;
- :mod:`ctxkeeper_engine.integrations.agentscope`: :class:`CtxkeeperMiddleware`, an AgentScope
  2.x agent middleware (``on_model_call``).

Each module imports its framework only when imported itself: installing ``ctxkeeper-engine``
pulls in none of them.
"""
