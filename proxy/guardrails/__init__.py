"""Guardrails at request time: policies (schema), the Detector protocol and its registry by policy
kind, the engine that screens inputs and outputs, its typed decisions and plans, and the detectors."""
