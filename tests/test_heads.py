"""Named embedding heads: the registry, the wire format and config that follow it, and a head and
space added in one module (``tests/plugins/letters.py``) served end to end over gRPC."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
from teleo.v1 import memory_pb2 as pb
from teleo.v1 import memory_pb2_grpc

from teleo_server.domain import ChunkEmbedding, EmbeddingSet
from teleo_server.embedding import build_repo, wire
from teleo_server.errors import InvalidArgument
from teleo_server.heads import Head, HeadKind, SparseVector, get_head, heads, register_head, unregister_head
from tests._server import REPO

MODEL_DIR = REPO / "triton_models"


@pytest.fixture
def extra_heads():
    added: list[str] = []

    def add(head: Head) -> Head:
        register_head(head)
        added.append(head.name)
        return head

    yield add
    for name in added:
        unregister_head(name)


def test_the_model_heads_are_declared_once_with_kind_dim_and_dtype():
    got = {h.name: (h.kind, h.dim, h.dtype) for h in heads().values()}
    assert got == {"dense": (HeadKind.DENSE, 384, "float32"), "tokens": (HeadKind.TOKENS, 384, "float16"),
                   "splade": (HeadKind.SPARSE, 30522, "float32")}


def test_names_that_would_collide_on_the_wire_are_refused(extra_heads):
    for name in ("dense", "model_version", "splade_ids", "tokens_count"):
        with pytest.raises(ValueError):
            register_head(Head(name, HeadKind.DENSE, 4))
    with pytest.raises(ValueError):
        Head("Bad-Name", HeadKind.DENSE, 4)
    with pytest.raises(InvalidArgument, match="unknown embedding head 'nope'"):
        get_head("nope")


@pytest.mark.parametrize("name, value, message", [
    ("dense", np.ones(3), "takes (dim,) with dim = 384"),
    ("dense", np.full(384, np.nan), "must be finite"),
    ("tokens", np.ones(384), "takes (n, dim)"),
    ("splade", SparseVector(np.array([1, 2]), np.array([1.0])), "differ in length"),
    ("splade", SparseVector(np.array([30522]), np.array([1.0])), "ids must be in [0, 30522)"),
    ("splade", SparseVector(np.array([4, 4]), np.array([1.0, 2.0])), "must not repeat"),
    ("splade", SparseVector(np.array([4]), np.array([-1.0])), ">= 0"),
])
def test_a_vector_that_does_not_fit_its_head_is_refused_naming_the_field(name, value, message):
    with pytest.raises(InvalidArgument) as err:
        get_head(name).coerce(value, "vectors.x")
    assert err.value.field == "vectors.x" and message in str(err.value)


def test_sparse_vectors_are_sorted_by_id():
    v = get_head("splade").coerce(SparseVector(np.array([9, 2, 5]), np.array([0.9, 0.2, 0.5])), "x")
    assert v.ids.tolist() == [2, 5, 9] and v.weights.tolist() == pytest.approx([0.2, 0.5, 0.9])


def _set(rng, heads_: dict[str, Head], chunks: int) -> EmbeddingSet:
    out = []
    for i in range(chunks):
        vectors = {}
        for h in heads_.values():
            if h.kind is HeadKind.DENSE:
                vectors[h.name] = rng.standard_normal(h.dim).astype(h.dtype)
            elif h.kind is HeadKind.TOKENS:
                vectors[h.name] = rng.standard_normal((int(rng.integers(0, 6)), h.dim)).astype(h.dtype)
            else:
                n = int(rng.integers(0, 9))
                vectors[h.name] = SparseVector.of(np.sort(rng.choice(h.dim or 1000, n, replace=False)), rng.random(n))
        out.append(ChunkEmbedding(vectors, i * 5, i * 5 + 9))
    return EmbeddingSet("v", out)


def test_the_wire_format_carries_every_registered_head(extra_heads):
    extra_heads(Head("toy_dense", HeadKind.DENSE, 8, "float16"))
    extra_heads(Head("toy_tokens", HeadKind.TOKENS, 4))
    extra_heads(Head("toy_sparse", HeadKind.SPARSE, 0))
    names = wire.outputs()
    assert {"TOY_DENSE", "TOY_TOKENS", "TOY_TOKENS_COUNT", "TOY_SPARSE_IDS", "TOY_SPARSE_WEIGHTS",
            "TOY_SPARSE_COUNT"} <= set(names)
    assert 'name: "TOY_TOKENS" data_type: TYPE_FP32 dims: [ -1, -1, 4 ]' in wire.output_config()
    rng = np.random.default_rng(0)
    sets = [_set(rng, heads(), n) for n in (2, 0, 3)]
    back = wire.unpack(wire.pack(sets))
    assert [len(s.chunks) for s in back] == [2, 0, 3]
    for a, b in zip(back, sets):
        for x, y in zip(a.chunks, b.chunks):
            assert x.vectors.keys() == y.vectors.keys() and (x.start, x.end) == (y.start, y.end)
            for name, u in x.vectors.items():
                v = y.vectors[name]
                if isinstance(u, SparseVector):
                    assert u.ids.tolist() == v.ids.tolist() and u.weights.tolist() == v.weights.tolist()
                else:
                    assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)


def test_the_committed_triton_config_follows_the_registry():
    """``make models`` writes teleo_embed's outputs from the registry; the committed files match it."""
    for path in build_repo.entry_configs(MODEL_DIR):
        text = path.read_text()
        assert build_repo.with_outputs(text) == text, f"{path} is out of step: run make models"


def test_a_registered_head_changes_the_triton_config_it_is_written_to(tmp_path: Path, extra_heads):
    import shutil

    shutil.copytree(MODEL_DIR / "teleo_embed", tmp_path / "teleo_embed", ignore=shutil.ignore_patterns("1"))
    extra_heads(Head("toy", HeadKind.DENSE, 12))
    changed = build_repo.write_entry_outputs(tmp_path)
    assert len(changed) == 2
    assert all('{ name: "TOY" data_type: TYPE_FP32 dims: [ -1, 12 ] }' in p.read_text() for p in changed)


# -- a head and a space from one module, end to end ------------------------------------------------

TOML = """
plugins = ["tests.plugins.letters"]

[pipeline.profiles.letters]
stages = ["entry", "fusion", "finalize"]
settings = { space_weights = { E20_letters = 1.0 } }
description = "the toy letters space alone"
"""
TEXTS = ["zebras fizz in the jazz bazaar", "a banana and an alpaca", "quick quiet quokkas queue"]


def letter_vector(text: str) -> np.ndarray:
    """The toy head, computed here independently (importing the plugin would register it in this
    process too)."""
    v = np.array([text.lower().count(c) for c in "abcdefghijklmnopqrstuvwxyz"], np.float32)
    return v / np.linalg.norm(v)


def test_a_head_and_space_added_in_one_module_serve_over_grpc(server_process, tmp_path):
    config = tmp_path / "teleo.toml"
    config.write_text(TOML)
    srv = server_process(env={"TELEO_CONFIG": str(config)})
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(srv.address))
    auth = [("authorization", f"Bearer {srv.token}")]
    ids = [stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content=t)), metadata=auth, timeout=60).id for t in TEXTS]

    stats = stub.Stats(pb.StatsRequest(), metadata=auth, timeout=30)
    assert ("letters", "dense", 26) in [(h.name, h.kind, h.dimension) for h in stats.heads]
    assert stats.model_version.endswith("+letters.1")  # a Python head is part of the model version

    # the caller computes the toy head itself and sends only that head
    query = letter_vector("queue of quokkas")
    vectors = pb.QueryVectors(model_version=stats.model_version,
                              heads={"letters": pb.HeadVector(values=query.tolist())})
    events = list(stub.Retrieve(pb.RetrieveRequest(vectors=vectors, profile="letters", top_k=3),
                                metadata=auth, timeout=60))
    results = [e.result for e in events if e.WhichOneof("event") == "result"]
    assert [r.memory.id for r in results][0] == ids[2]
    assert all("E20_letters" in r.found_by for r in results)
    expected = [float(letter_vector(t) @ query) for t in TEXTS]
    assert [r.memory.id for r in results] == [ids[i] for i in np.argsort(expected)[::-1]]

    cmp = stub.Compare(pb.CompareRequest(id_a=ids[0], id_b=ids[2]), metadata=auth, timeout=30)
    cos = float(letter_vector(TEXTS[0]) @ letter_vector(TEXTS[2]))
    assert cmp.spaces["E20_letters"] == pytest.approx((1 + cos) / 2, abs=1e-4)

    # a wrong-sized vector of the toy head is refused naming it; so is a head nobody registered
    for heads_, field in (({"letters": pb.HeadVector(values=[1.0] * 5)}, "vectors.heads['letters']"),
                          ({"nope": pb.HeadVector(values=[1.0])}, "vectors.heads['nope']")):
        bad = pb.QueryVectors(model_version=stats.model_version, heads=heads_)
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Retrieve(pb.RetrieveRequest(vectors=bad, profile="letters"), metadata=auth, timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.value.details().startswith(field)

    # a clean stop writes the plugin's space into the index snapshot, and the next start reads it
    # back (the plugin's classes are allowed beside Teleo's) and answers the same
    import signal

    srv.signal(signal.SIGTERM)
    assert srv.wait(60) == 0
    again = server_process(data_dir=srv.data_dir, env={"TELEO_CONFIG": str(config)})
    assert '"source": "snapshot"' in again.logs()
    stub = memory_pb2_grpc.MemoryServiceStub(grpc.insecure_channel(again.address))
    events = list(stub.Retrieve(pb.RetrieveRequest(vectors=vectors, profile="letters", top_k=3), metadata=auth, timeout=60))
    assert [e.result.memory.id for e in events if e.WhichOneof("event") == "result"] == [r.memory.id for r in results]
