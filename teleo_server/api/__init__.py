"""The gRPC layer: the only code that touches protobuf messages."""


__all__: list[str] = []
