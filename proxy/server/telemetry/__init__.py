"""Telemetry: Prometheus metrics, tracing spans and structured logs."""
