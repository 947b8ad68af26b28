"""In-memory indexes: catalog, sparse inverted index, dense (exact/HNSW), token store, purpose."""


__all__: list[str] = []
