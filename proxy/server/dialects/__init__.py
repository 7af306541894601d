"""API dialects served over the chat flow: OpenAI Responses and Anthropic Messages (parsing,
rendering, error bodies)."""
