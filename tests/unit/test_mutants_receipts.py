"""Tests that kill surviving mutants in the trust core (see mutation/baseline.md)."""
