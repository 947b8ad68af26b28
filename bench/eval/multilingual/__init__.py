"""A multilingual retrieval test set (English, Spanish, Portuguese, Chinese, Japanese, Korean, Arabic)
generated from templates (``build``) and its evaluation of the text analyser (``run``)."""
