"""The request path of a running proxy, in reading order: app, errors, middleware, auth, requests,
wire (OpenAI format), pipeline, upstream, metrics, sink and spool, background tasks, routes/.

See docs/architecture.md "Request flow".
"""
