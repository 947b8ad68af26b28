"""Retrieval: indexes over every space and the staged pipeline that ranks memories."""
