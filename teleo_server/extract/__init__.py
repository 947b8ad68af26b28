"""Spans of a text that the perspectives beyond meaning and words are made from, without a model:
cause and effect (:mod:`.causal`), code and its tokens (:mod:`.code`), and stated intents
(:mod:`.intent`). Entities are :mod:`teleo_server.entities`. Pure text functions, below every index
and space."""

__all__: list[str] = []  # the modules are imported by name
