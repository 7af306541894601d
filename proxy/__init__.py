"""Sonate Trust Proxy: a guardrail gateway between applications and LLM providers."""

__version__ = "0.1.0"
