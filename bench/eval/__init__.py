"""Retrieval quality evaluation (SciFact, LoCoMo): ``make eval``."""
