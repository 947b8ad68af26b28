"""Error messages a person can act on: the same mistake is worded the same wherever it is made, and
a name that does not exist comes with the names that do."""

from __future__ import annotations

import grpc
import pytest
from teleo.v1 import memory_pb2 as pb


def _details(fn) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code(), err.value.details()


def test_a_bad_namespace_is_worded_alike_in_store_and_query(stub, auth):
    bad = "no spaces allowed"
    store = _details(lambda: stub.Store(pb.StoreRequest(memory=pb.MemoryInput(content="x", namespace=bad)),
                                        metadata=auth, timeout=30))
    query = _details(lambda: list(stub.Retrieve(pb.RetrieveRequest(text="x", filters=pb.RetrieveFilters(namespaces=[bad])),
                                                metadata=auth, timeout=30)))
    reason = "'no spaces allowed' is not a valid namespace: use 1..128 of A-Z a-z 0-9 _ . : -"
    assert store == (grpc.StatusCode.INVALID_ARGUMENT, f"memory.namespace: {reason}")
    assert query == (grpc.StatusCode.INVALID_ARGUMENT, f"filters.namespaces: {reason}")


def test_an_unknown_space_lists_the_known_ones(stub, auth):
    req = pb.RetrieveRequest(text="x", overrides=pb.StageOverrides(space_weights={"E99_nowhere": 1.0}))
    code, details = _details(lambda: list(stub.Retrieve(req, metadata=auth, timeout=30)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("overrides.space_weights: unknown space 'E99_nowhere'")
    assert "E1_semantic" in details and "E13_splade" in details and "'semantic'" in details
