"""The serving process, one subpackage per concern, in the order a request meets them:
``http`` (app, middleware, auth, request parsing, routes) → ``dialects`` (OpenAI Responses and
Anthropic Messages over the chat flow) → ``flow`` (the exchange, pipelines, streaming, upstream,
receipting) → ``admission`` (limits, lanes, sink, spool, workers, checkpoint publication) →
``telemetry`` (metrics, traces, logs); ``errors`` is shared by all.

See docs/architecture.md "Request flow".
"""
