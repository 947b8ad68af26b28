"""A knowledge-update test set: facts later superseded or contradicted, asked about "now" and "as of"
an earlier moment (``build``), and its evaluation of the retrieval profiles (``run``)."""
