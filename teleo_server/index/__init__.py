"""In-memory indexes: catalog, sparse inverted index, dense (exact/HNSW), token store, purpose."""
