"""Stress suite: crash loop, fuzzer, concurrency waves, access-control properties, fault injection.

``python -m bench.stress [--quick] [--only PART]`` (``make stress``) runs real server processes on
127.0.0.1, writes ``bench/results/stress.json`` (figures, targets met or not, offending examples
and the machine) and prints a markdown summary. Not part of ``make test``.
"""

__all__ = ["acl", "context", "crash", "faults", "fuzz", "report", "runner", "server", "waves"]
