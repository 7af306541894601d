"""Concrete detectors behind the :class:`proxy.guardrails.detector.Detector` protocol; the
registry (:mod:`proxy.guardrails.registry`) builds them by policy kind.
"""
