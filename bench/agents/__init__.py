"""Benchmarks of Teleo's agent integrations (the Claude Code hooks)."""
