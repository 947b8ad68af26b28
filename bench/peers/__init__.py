"""Peer systems measured beside Teleo on the same data and the same embeddings.

Each peer is optional: it is imported only when asked for, and a missing package yields a
skip record naming the install step (``make bench`` builds ``.venv-bench`` with all of them).
"""

from __future__ import annotations

from bench.peers.base import Peer, PeerCorpus, PeerQueries, PeerUnavailable, load_peer

__all__ = ["Peer", "PeerCorpus", "PeerQueries", "PeerUnavailable", "load_peer"]
