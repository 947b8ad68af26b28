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


def test_every_field_of_the_public_api_is_commented(tmp_path):
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    from teleo_server.protogen import PROTO_ROOT, proto_files

    out = tmp_path / "set.pb"
    well_known = f"-I{__import__('pathlib').Path(grpc_tools.__file__).parent / '_proto'}"
    files = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    assert protoc.main(["protoc", f"-I{PROTO_ROOT}", well_known, "--include_source_info", f"--descriptor_set_out={out}", *files]) == 0
    fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    missing = []
    for f in fds.file:
        commented = {
            tuple(loc.path) for loc in f.source_code_info.location if loc.leading_comments.strip() or loc.trailing_comments.strip()
        }
        for mi, msg in enumerate(f.message_type):
            # A message comment may document all of its fields at once; otherwise each field needs one.
            if (4, mi) in commented:
                continue
            for fi, field in enumerate(msg.field):
                if (4, mi, 2, fi) not in commented:
                    missing.append(f"{msg.name}.{field.name}")
    assert not missing, f"uncommented fields: {missing}"
