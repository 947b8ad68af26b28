"""The checked-in generated code must be exactly what protoc makes from protos/."""

from __future__ import annotations

from teleo_server.protogen import OUT_ROOT, generate


def test_generated_code_matches_protos(tmp_path):
    fresh = {p.relative_to(tmp_path): p.read_text() for p in generate(tmp_path)}
    checked_in = {p.relative_to(OUT_ROOT): p.read_text() for p in OUT_ROOT.rglob("*") if p.suffix in {".py", ".pyi"}}
    assert fresh.keys() == checked_in.keys()
    stale = [str(k) for k in fresh if fresh[k] != checked_in[k]]
    assert not stale, f"generated code is stale, run `make proto`: {stale}"


def test_generated_code_imports_without_path_patching():
    from teleo.v1 import memory_pb2, memory_pb2_grpc

    assert memory_pb2.DESCRIPTOR.package == "teleo.v1"
    assert hasattr(memory_pb2_grpc, "MemoryServiceStub")


def test_enum_zero_values_are_unspecified():
    from teleo.v1 import memory_pb2

    for enum in memory_pb2.DESCRIPTOR.enum_types_by_name.values():
        assert enum.values[0].number == 0 and enum.values[0].name.endswith("_UNSPECIFIED"), enum.name
