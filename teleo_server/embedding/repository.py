"""Where the materialised model repository lives and what version it holds.

The repository is ``triton_models/`` at the project root, laid out for Triton and read directly
by the in-process embedder::

    triton_models/MANIFEST.json            sha256 of every materialised file + version string
    triton_models/minilm/1/model.onnx      all-MiniLM-L6-v2, int8
    triton_models/minilm/1/assets/tokenizer.json
    triton_models/splade/1/model.onnx      splade-tiny with SPLADE pooling (see splade_onnx)
    triton_models/splade/1/assets/tokenizer.json
    triton_models/teleo_embed/             the one entry point (chunking, both models)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from teleo_server.errors import Unavailable

DENSE_MODEL = "minilm"
SPARSE_MODEL = "splade"
ENTRY_MODEL = "teleo_embed"
MANIFEST = "MANIFEST.json"
SETUP_HINT = "run `make models` to materialise the model repository"


def default_model_dir() -> Path:
    """``triton_models/`` beside the ``teleo_server`` package (the project root)."""
    return Path(__file__).resolve().parents[2] / "triton_models"


@dataclass(frozen=True, slots=True)
class ModelFiles:
    dense_onnx: Path
    dense_tokenizer: Path
    sparse_onnx: Path
    sparse_tokenizer: Path

    @classmethod
    def in_dir(cls, model_dir: Path) -> ModelFiles:
        return cls(
            dense_onnx=model_dir / DENSE_MODEL / "1" / "model.onnx",
            dense_tokenizer=model_dir / DENSE_MODEL / "1" / "assets" / "tokenizer.json",
            sparse_onnx=model_dir / SPARSE_MODEL / "1" / "model.onnx",
            sparse_tokenizer=model_dir / SPARSE_MODEL / "1" / "assets" / "tokenizer.json",
        )

    def missing(self) -> list[Path]:
        return [p for p in (self.dense_onnx, self.dense_tokenizer, self.sparse_onnx,
                            self.sparse_tokenizer) if not p.is_file()]


def read_manifest(model_dir: Path) -> dict:
    """The manifest written by ``build_repo``; raises Unavailable when the repository is absent."""
    path = model_dir / MANIFEST
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise Unavailable(f"no {MANIFEST} in {model_dir}: {SETUP_HINT}") from exc


def manifest_version(model_dir: Path) -> str:
    return str(read_manifest(model_dir)["version"])


# MiniLM graphs (the first part of the model version) whose vectors depend on the batch a text is
# embedded in: "dynamic-int8" quantises each activation with one scale per call, padding included
# (a text embedded beside others moved by up to 0.02 a coordinate), so it embeds one text a call.
DYNAMIC_INT8_DENSE = "minilm-l6-v2-dynamic-int8"
PER_TEXT_DENSE = (DYNAMIC_INT8_DENSE,)


def dense_per_text(model_dir: Path) -> bool:
    """Whether the repository's MiniLM graph must embed one text per call (``PER_TEXT_DENSE``)."""
    return manifest_version(model_dir).split("+", 1)[0].split(".", 1)[0] in PER_TEXT_DENSE


def model_repository_dir_of(model_file: str | Path) -> Path:
    """The repository root for a ``<repo>/<model>/<version>/model.py`` path."""
    return Path(model_file).resolve().parents[2]


__all__ = [
    "DENSE_MODEL",
    "DYNAMIC_INT8_DENSE",
    "ENTRY_MODEL",
    "MANIFEST",
    "ModelFiles",
    "SETUP_HINT",
    "PER_TEXT_DENSE",
    "SPARSE_MODEL",
    "default_model_dir",
    "dense_per_text",
    "manifest_version",
    "model_repository_dir_of",
    "read_manifest",
]
