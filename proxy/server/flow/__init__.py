"""The request flow: the exchange, the chat and embeddings pipelines, streaming, the upstream call and receipting."""
