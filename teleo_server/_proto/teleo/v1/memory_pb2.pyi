import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MemoryType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEMORY_TYPE_UNSPECIFIED: _ClassVar[MemoryType]
    MEMORY_TYPE_EPISODIC: _ClassVar[MemoryType]
    MEMORY_TYPE_SEMANTIC: _ClassVar[MemoryType]
    MEMORY_TYPE_PROCEDURAL: _ClassVar[MemoryType]
    MEMORY_TYPE_WORKING: _ClassVar[MemoryType]
    MEMORY_TYPE_REFLECTIVE: _ClassVar[MemoryType]

class AccessLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_LEVEL_UNSPECIFIED: _ClassVar[AccessLevel]
    ACCESS_LEVEL_PUBLIC: _ClassVar[AccessLevel]
    ACCESS_LEVEL_INTERNAL: _ClassVar[AccessLevel]
    ACCESS_LEVEL_CONFIDENTIAL: _ClassVar[AccessLevel]
    ACCESS_LEVEL_RESTRICTED: _ClassVar[AccessLevel]

class LinkType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LINK_TYPE_UNSPECIFIED: _ClassVar[LinkType]
    LINK_TYPE_RELATES_TO: _ClassVar[LinkType]
    LINK_TYPE_CONTRADICTS: _ClassVar[LinkType]
    LINK_TYPE_SUPERSEDES: _ClassVar[LinkType]
    LINK_TYPE_CAUSES: _ClassVar[LinkType]

class JohariQuadrant(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOHARI_QUADRANT_UNSPECIFIED: _ClassVar[JohariQuadrant]
    JOHARI_QUADRANT_OPEN: _ClassVar[JohariQuadrant]
    JOHARI_QUADRANT_BLIND: _ClassVar[JohariQuadrant]
    JOHARI_QUADRANT_HIDDEN: _ClassVar[JohariQuadrant]
    JOHARI_QUADRANT_UNKNOWN: _ClassVar[JohariQuadrant]

class Aggregation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGGREGATION_UNSPECIFIED: _ClassVar[Aggregation]
    AGGREGATION_WEIGHTED_AVERAGE: _ClassVar[Aggregation]
    AGGREGATION_RRF: _ClassVar[Aggregation]
    AGGREGATION_MAX: _ClassVar[Aggregation]
    AGGREGATION_MIN: _ClassVar[Aggregation]
    AGGREGATION_GEOMETRIC_MEAN: _ClassVar[Aggregation]
MEMORY_TYPE_UNSPECIFIED: MemoryType
MEMORY_TYPE_EPISODIC: MemoryType
MEMORY_TYPE_SEMANTIC: MemoryType
MEMORY_TYPE_PROCEDURAL: MemoryType
MEMORY_TYPE_WORKING: MemoryType
MEMORY_TYPE_REFLECTIVE: MemoryType
ACCESS_LEVEL_UNSPECIFIED: AccessLevel
ACCESS_LEVEL_PUBLIC: AccessLevel
ACCESS_LEVEL_INTERNAL: AccessLevel
ACCESS_LEVEL_CONFIDENTIAL: AccessLevel
ACCESS_LEVEL_RESTRICTED: AccessLevel
LINK_TYPE_UNSPECIFIED: LinkType
LINK_TYPE_RELATES_TO: LinkType
LINK_TYPE_CONTRADICTS: LinkType
LINK_TYPE_SUPERSEDES: LinkType
LINK_TYPE_CAUSES: LinkType
JOHARI_QUADRANT_UNSPECIFIED: JohariQuadrant
JOHARI_QUADRANT_OPEN: JohariQuadrant
JOHARI_QUADRANT_BLIND: JohariQuadrant
JOHARI_QUADRANT_HIDDEN: JohariQuadrant
JOHARI_QUADRANT_UNKNOWN: JohariQuadrant
AGGREGATION_UNSPECIFIED: Aggregation
AGGREGATION_WEIGHTED_AVERAGE: Aggregation
AGGREGATION_RRF: Aggregation
AGGREGATION_MAX: Aggregation
AGGREGATION_MIN: Aggregation
AGGREGATION_GEOMETRIC_MEAN: Aggregation

class Link(_message.Message):
    __slots__ = ("target_id", "type", "weight")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    type: LinkType
    weight: float
    def __init__(self, target_id: _Optional[str] = ..., type: _Optional[_Union[LinkType, str]] = ..., weight: _Optional[float] = ...) -> None: ...

class MemoryInput(_message.Message):
    __slots__ = ("content", "namespace", "access_level", "memory_type", "source", "confidence", "importance", "event_time", "session_id", "session_position", "links", "metadata", "evergreen")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ACCESS_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TYPE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_POSITION_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    EVERGREEN_FIELD_NUMBER: _ClassVar[int]
    content: str
    namespace: str
    access_level: AccessLevel
    memory_type: MemoryType
    source: str
    confidence: float
    importance: float
    event_time: _timestamp_pb2.Timestamp
    session_id: str
    session_position: int
    links: _containers.RepeatedCompositeFieldContainer[Link]
    metadata: _containers.ScalarMap[str, str]
    evergreen: bool
    def __init__(self, content: _Optional[str] = ..., namespace: _Optional[str] = ..., access_level: _Optional[_Union[AccessLevel, str]] = ..., memory_type: _Optional[_Union[MemoryType, str]] = ..., source: _Optional[str] = ..., confidence: _Optional[float] = ..., importance: _Optional[float] = ..., event_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ..., session_position: _Optional[int] = ..., links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, str]] = ..., evergreen: _Optional[bool] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "input", "content_hash", "ingestion_time", "model_version", "chunk_count", "retrieved_count", "used_count", "helpful_count", "misled_count", "sufficient_count", "insufficient_count", "purpose")
    ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    INGESTION_TIME_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    RETRIEVED_COUNT_FIELD_NUMBER: _ClassVar[int]
    USED_COUNT_FIELD_NUMBER: _ClassVar[int]
    HELPFUL_COUNT_FIELD_NUMBER: _ClassVar[int]
    MISLED_COUNT_FIELD_NUMBER: _ClassVar[int]
    SUFFICIENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSUFFICIENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    id: str
    input: MemoryInput
    content_hash: str
    ingestion_time: _timestamp_pb2.Timestamp
    model_version: str
    chunk_count: int
    retrieved_count: int
    used_count: int
    helpful_count: int
    misled_count: int
    sufficient_count: int
    insufficient_count: int
    purpose: MemoryPurpose
    def __init__(self, id: _Optional[str] = ..., input: _Optional[_Union[MemoryInput, _Mapping]] = ..., content_hash: _Optional[str] = ..., ingestion_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_version: _Optional[str] = ..., chunk_count: _Optional[int] = ..., retrieved_count: _Optional[int] = ..., used_count: _Optional[int] = ..., helpful_count: _Optional[int] = ..., misled_count: _Optional[int] = ..., sufficient_count: _Optional[int] = ..., insufficient_count: _Optional[int] = ..., purpose: _Optional[_Union[MemoryPurpose, _Mapping]] = ...) -> None: ...

class MemoryPurpose(_message.Message):
    __slots__ = ("goal_id", "goal_label", "alignment", "goal_alignment", "space_alignment", "members_compared")
    class GoalAlignmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class SpaceAlignmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    GOAL_ID_FIELD_NUMBER: _ClassVar[int]
    GOAL_LABEL_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    GOAL_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    SPACE_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_COMPARED_FIELD_NUMBER: _ClassVar[int]
    goal_id: str
    goal_label: str
    alignment: float
    goal_alignment: _containers.ScalarMap[str, float]
    space_alignment: _containers.ScalarMap[str, float]
    members_compared: int
    def __init__(self, goal_id: _Optional[str] = ..., goal_label: _Optional[str] = ..., alignment: _Optional[float] = ..., goal_alignment: _Optional[_Mapping[str, float]] = ..., space_alignment: _Optional[_Mapping[str, float]] = ..., members_compared: _Optional[int] = ...) -> None: ...

class StoreRequest(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: MemoryInput
    def __init__(self, memory: _Optional[_Union[MemoryInput, _Mapping]] = ...) -> None: ...

class StoreResponse(_message.Message):
    __slots__ = ("id", "content_hash", "duplicate", "possible_updates")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    POSSIBLE_UPDATES_FIELD_NUMBER: _ClassVar[int]
    id: str
    content_hash: str
    duplicate: bool
    possible_updates: _containers.RepeatedCompositeFieldContainer[UpdateHint]
    def __init__(self, id: _Optional[str] = ..., content_hash: _Optional[str] = ..., duplicate: _Optional[bool] = ..., possible_updates: _Optional[_Iterable[_Union[UpdateHint, _Mapping]]] = ...) -> None: ...

class UpdateHint(_message.Message):
    __slots__ = ("id", "similarity", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    similarity: float
    content: str
    def __init__(self, id: _Optional[str] = ..., similarity: _Optional[float] = ..., content: _Optional[str] = ...) -> None: ...

class StoreBatchRequest(_message.Message):
    __slots__ = ("memory", "client_ref", "update_hints")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REF_FIELD_NUMBER: _ClassVar[int]
    UPDATE_HINTS_FIELD_NUMBER: _ClassVar[int]
    memory: MemoryInput
    client_ref: str
    update_hints: bool
    def __init__(self, memory: _Optional[_Union[MemoryInput, _Mapping]] = ..., client_ref: _Optional[str] = ..., update_hints: _Optional[bool] = ...) -> None: ...

class StoreBatchItem(_message.Message):
    __slots__ = ("index", "client_ref", "id", "content_hash", "duplicate", "error", "error_code", "possible_updates")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CLIENT_REF_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    POSSIBLE_UPDATES_FIELD_NUMBER: _ClassVar[int]
    index: int
    client_ref: str
    id: str
    content_hash: str
    duplicate: bool
    error: str
    error_code: str
    possible_updates: _containers.RepeatedCompositeFieldContainer[UpdateHint]
    def __init__(self, index: _Optional[int] = ..., client_ref: _Optional[str] = ..., id: _Optional[str] = ..., content_hash: _Optional[str] = ..., duplicate: _Optional[bool] = ..., error: _Optional[str] = ..., error_code: _Optional[str] = ..., possible_updates: _Optional[_Iterable[_Union[UpdateHint, _Mapping]]] = ...) -> None: ...

class StoreBatchResponse(_message.Message):
    __slots__ = ("items", "stored", "duplicates", "failed")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[StoreBatchItem]
    stored: int
    duplicates: int
    failed: int
    def __init__(self, items: _Optional[_Iterable[_Union[StoreBatchItem, _Mapping]]] = ..., stored: _Optional[int] = ..., duplicates: _Optional[int] = ..., failed: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("ids", "include_purpose")
    IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PURPOSE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    include_purpose: bool
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., include_purpose: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    def __init__(self, deleted: _Optional[int] = ...) -> None: ...

class UpdateRequest(_message.Message):
    __slots__ = ("id", "memory", "fields", "keep_previous", "add_links")
    ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    KEEP_PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    ADD_LINKS_FIELD_NUMBER: _ClassVar[int]
    id: str
    memory: MemoryInput
    fields: _containers.RepeatedScalarFieldContainer[str]
    keep_previous: bool
    add_links: _containers.RepeatedCompositeFieldContainer[Link]
    def __init__(self, id: _Optional[str] = ..., memory: _Optional[_Union[MemoryInput, _Mapping]] = ..., fields: _Optional[_Iterable[str]] = ..., keep_previous: _Optional[bool] = ..., add_links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ...) -> None: ...

class UpdateResponse(_message.Message):
    __slots__ = ("memory", "previous_id")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ID_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    previous_id: str
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., previous_id: _Optional[str] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("filters", "with_embeddings")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    WITH_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    filters: RetrieveFilters
    with_embeddings: bool
    def __init__(self, filters: _Optional[_Union[RetrieveFilters, _Mapping]] = ..., with_embeddings: _Optional[bool] = ...) -> None: ...

class ExportedChunk(_message.Message):
    __slots__ = ("start", "end", "heads")
    class HeadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: HeadVector
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[HeadVector, _Mapping]] = ...) -> None: ...
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    heads: _containers.MessageMap[str, HeadVector]
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ..., heads: _Optional[_Mapping[str, HeadVector]] = ...) -> None: ...

class ExportedMemory(_message.Message):
    __slots__ = ("memory", "chunks")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    chunks: _containers.RepeatedCompositeFieldContainer[ExportedChunk]
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., chunks: _Optional[_Iterable[_Union[ExportedChunk, _Mapping]]] = ...) -> None: ...

class ImportRequest(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: ExportedMemory
    def __init__(self, item: _Optional[_Union[ExportedMemory, _Mapping]] = ...) -> None: ...

class ImportResponse(_message.Message):
    __slots__ = ("items", "stored", "duplicates", "failed", "vectors_reused")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    VECTORS_REUSED_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[StoreBatchItem]
    stored: int
    duplicates: int
    failed: int
    vectors_reused: int
    def __init__(self, items: _Optional[_Iterable[_Union[StoreBatchItem, _Mapping]]] = ..., stored: _Optional[int] = ..., duplicates: _Optional[int] = ..., failed: _Optional[int] = ..., vectors_reused: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("filters", "page_size", "cursor")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    filters: RetrieveFilters
    page_size: int
    cursor: str
    def __init__(self, filters: _Optional[_Union[RetrieveFilters, _Mapping]] = ..., page_size: _Optional[int] = ..., cursor: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("memories", "next_cursor")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    next_cursor: str
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., next_cursor: _Optional[str] = ...) -> None: ...

class DeleteWhereRequest(_message.Message):
    __slots__ = ("filters", "dry_run")
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    filters: RetrieveFilters
    dry_run: bool
    def __init__(self, filters: _Optional[_Union[RetrieveFilters, _Mapping]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class DeleteWhereResponse(_message.Message):
    __slots__ = ("matched", "deleted")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    matched: int
    deleted: int
    def __init__(self, matched: _Optional[int] = ..., deleted: _Optional[int] = ...) -> None: ...

class HeadVector(_message.Message):
    __slots__ = ("values", "rows", "ids", "weights", "codes", "codec")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    rows: int
    ids: _containers.RepeatedScalarFieldContainer[int]
    weights: _containers.RepeatedScalarFieldContainer[float]
    codes: bytes
    codec: str
    def __init__(self, values: _Optional[_Iterable[float]] = ..., rows: _Optional[int] = ..., ids: _Optional[_Iterable[int]] = ..., weights: _Optional[_Iterable[float]] = ..., codes: _Optional[bytes] = ..., codec: _Optional[str] = ...) -> None: ...

class QueryVectors(_message.Message):
    __slots__ = ("dense", "sparse_ids", "sparse_weights", "model_version", "heads")
    class HeadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: HeadVector
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[HeadVector, _Mapping]] = ...) -> None: ...
    DENSE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_IDS_FIELD_NUMBER: _ClassVar[int]
    SPARSE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    dense: _containers.RepeatedScalarFieldContainer[float]
    sparse_ids: _containers.RepeatedScalarFieldContainer[int]
    sparse_weights: _containers.RepeatedScalarFieldContainer[float]
    model_version: str
    heads: _containers.MessageMap[str, HeadVector]
    def __init__(self, dense: _Optional[_Iterable[float]] = ..., sparse_ids: _Optional[_Iterable[int]] = ..., sparse_weights: _Optional[_Iterable[float]] = ..., model_version: _Optional[str] = ..., heads: _Optional[_Mapping[str, HeadVector]] = ...) -> None: ...

class TimeRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: _timestamp_pb2.Timestamp
    end: _timestamp_pb2.Timestamp
    def __init__(self, start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetrieveFilters(_message.Message):
    __slots__ = ("namespaces", "memory_types", "event_time", "min_confidence", "session_id", "metadata", "languages")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TYPES_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    MIN_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LANGUAGES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    memory_types: _containers.RepeatedScalarFieldContainer[MemoryType]
    event_time: TimeRange
    min_confidence: float
    session_id: str
    metadata: _containers.ScalarMap[str, str]
    languages: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ..., memory_types: _Optional[_Iterable[_Union[MemoryType, str]]] = ..., event_time: _Optional[_Union[TimeRange, _Mapping]] = ..., min_confidence: _Optional[float] = ..., session_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., languages: _Optional[_Iterable[str]] = ...) -> None: ...

class StageOverrides(_message.Message):
    __slots__ = ("sparse_weight", "max_candidates", "dense_dimension", "fusion", "rrf_k", "late_interaction_weight", "decay_half_life_days", "mmr_lambda", "min_score", "misalignment_threshold", "filter_misaligned", "space_weights", "disable_stages", "min_relevance", "search_matrix", "query_type", "space_mask")
    class SpaceWeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SPARSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    DENSE_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    RRF_K_FIELD_NUMBER: _ClassVar[int]
    LATE_INTERACTION_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    DECAY_HALF_LIFE_DAYS_FIELD_NUMBER: _ClassVar[int]
    MMR_LAMBDA_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    MISALIGNMENT_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    FILTER_MISALIGNED_FIELD_NUMBER: _ClassVar[int]
    SPACE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    DISABLE_STAGES_FIELD_NUMBER: _ClassVar[int]
    MIN_RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MATRIX_FIELD_NUMBER: _ClassVar[int]
    QUERY_TYPE_FIELD_NUMBER: _ClassVar[int]
    SPACE_MASK_FIELD_NUMBER: _ClassVar[int]
    sparse_weight: float
    max_candidates: int
    dense_dimension: int
    fusion: str
    rrf_k: float
    late_interaction_weight: float
    decay_half_life_days: float
    mmr_lambda: float
    min_score: float
    misalignment_threshold: float
    filter_misaligned: bool
    space_weights: _containers.ScalarMap[str, float]
    disable_stages: _containers.RepeatedScalarFieldContainer[str]
    min_relevance: float
    search_matrix: str
    query_type: str
    space_mask: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sparse_weight: _Optional[float] = ..., max_candidates: _Optional[int] = ..., dense_dimension: _Optional[int] = ..., fusion: _Optional[str] = ..., rrf_k: _Optional[float] = ..., late_interaction_weight: _Optional[float] = ..., decay_half_life_days: _Optional[float] = ..., mmr_lambda: _Optional[float] = ..., min_score: _Optional[float] = ..., misalignment_threshold: _Optional[float] = ..., filter_misaligned: _Optional[bool] = ..., space_weights: _Optional[_Mapping[str, float]] = ..., disable_stages: _Optional[_Iterable[str]] = ..., min_relevance: _Optional[float] = ..., search_matrix: _Optional[str] = ..., query_type: _Optional[str] = ..., space_mask: _Optional[_Iterable[str]] = ...) -> None: ...

class TimeBoosts(_message.Message):
    __slots__ = ("recency_curve", "recency_scale", "recency_weight", "target_hour", "target_weekday", "periodic_weight", "session_id", "session_position", "sequence_window", "sequence_weight")
    RECENCY_CURVE_FIELD_NUMBER: _ClassVar[int]
    RECENCY_SCALE_FIELD_NUMBER: _ClassVar[int]
    RECENCY_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    TARGET_HOUR_FIELD_NUMBER: _ClassVar[int]
    TARGET_WEEKDAY_FIELD_NUMBER: _ClassVar[int]
    PERIODIC_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_POSITION_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_WINDOW_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    recency_curve: str
    recency_scale: str
    recency_weight: float
    target_hour: int
    target_weekday: int
    periodic_weight: float
    session_id: str
    session_position: int
    sequence_window: int
    sequence_weight: float
    def __init__(self, recency_curve: _Optional[str] = ..., recency_scale: _Optional[str] = ..., recency_weight: _Optional[float] = ..., target_hour: _Optional[int] = ..., target_weekday: _Optional[int] = ..., periodic_weight: _Optional[float] = ..., session_id: _Optional[str] = ..., session_position: _Optional[int] = ..., sequence_window: _Optional[int] = ..., sequence_weight: _Optional[float] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("text", "vectors", "top_k", "profile", "filters", "target_goals", "johari", "overrides", "include_breakdown", "explain", "snippets", "omit_content", "include_historical", "as_of_event", "as_of_ingestion", "time_boosts", "batched")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    TARGET_GOALS_FIELD_NUMBER: _ClassVar[int]
    JOHARI_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    SNIPPETS_FIELD_NUMBER: _ClassVar[int]
    OMIT_CONTENT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HISTORICAL_FIELD_NUMBER: _ClassVar[int]
    AS_OF_EVENT_FIELD_NUMBER: _ClassVar[int]
    AS_OF_INGESTION_FIELD_NUMBER: _ClassVar[int]
    TIME_BOOSTS_FIELD_NUMBER: _ClassVar[int]
    BATCHED_FIELD_NUMBER: _ClassVar[int]
    text: str
    vectors: QueryVectors
    top_k: int
    profile: str
    filters: RetrieveFilters
    target_goals: _containers.RepeatedScalarFieldContainer[str]
    johari: _containers.RepeatedScalarFieldContainer[JohariQuadrant]
    overrides: StageOverrides
    include_breakdown: bool
    explain: bool
    snippets: bool
    omit_content: bool
    include_historical: bool
    as_of_event: _timestamp_pb2.Timestamp
    as_of_ingestion: _timestamp_pb2.Timestamp
    time_boosts: TimeBoosts
    batched: bool
    def __init__(self, text: _Optional[str] = ..., vectors: _Optional[_Union[QueryVectors, _Mapping]] = ..., top_k: _Optional[int] = ..., profile: _Optional[str] = ..., filters: _Optional[_Union[RetrieveFilters, _Mapping]] = ..., target_goals: _Optional[_Iterable[str]] = ..., johari: _Optional[_Iterable[_Union[JohariQuadrant, str]]] = ..., overrides: _Optional[_Union[StageOverrides, _Mapping]] = ..., include_breakdown: _Optional[bool] = ..., explain: _Optional[bool] = ..., snippets: _Optional[bool] = ..., omit_content: _Optional[bool] = ..., include_historical: _Optional[bool] = ..., as_of_event: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., as_of_ingestion: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., time_boosts: _Optional[_Union[TimeBoosts, _Mapping]] = ..., batched: _Optional[bool] = ...) -> None: ...

class StageEvent(_message.Message):
    __slots__ = ("stage", "elapsed_ms", "candidates_in", "candidates_out", "backend", "detail", "skipped")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_IN_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_OUT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    stage: str
    elapsed_ms: float
    candidates_in: int
    candidates_out: int
    backend: str
    detail: str
    skipped: bool
    def __init__(self, stage: _Optional[str] = ..., elapsed_ms: _Optional[float] = ..., candidates_in: _Optional[int] = ..., candidates_out: _Optional[int] = ..., backend: _Optional[str] = ..., detail: _Optional[str] = ..., skipped: _Optional[bool] = ...) -> None: ...

class ScoreBreakdown(_message.Message):
    __slots__ = ("content", "purpose_alignment", "goal_alignment", "late_interaction", "temporal", "spaces", "space_ranks")
    class SpacesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class SpaceRanksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    GOAL_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    LATE_INTERACTION_FIELD_NUMBER: _ClassVar[int]
    TEMPORAL_FIELD_NUMBER: _ClassVar[int]
    SPACES_FIELD_NUMBER: _ClassVar[int]
    SPACE_RANKS_FIELD_NUMBER: _ClassVar[int]
    content: float
    purpose_alignment: float
    goal_alignment: float
    late_interaction: float
    temporal: float
    spaces: _containers.ScalarMap[str, float]
    space_ranks: _containers.ScalarMap[str, int]
    def __init__(self, content: _Optional[float] = ..., purpose_alignment: _Optional[float] = ..., goal_alignment: _Optional[float] = ..., late_interaction: _Optional[float] = ..., temporal: _Optional[float] = ..., spaces: _Optional[_Mapping[str, float]] = ..., space_ranks: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ("rank", "memory", "score", "breakdown", "found_by", "misaligned", "johari", "explanation", "chunk_index", "unique_contribution", "relevance", "snippet", "snippet_start", "snippet_end", "provenance", "primary_space")
    RANK_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    FOUND_BY_FIELD_NUMBER: _ClassVar[int]
    MISALIGNED_FIELD_NUMBER: _ClassVar[int]
    JOHARI_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_CONTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_START_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_END_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_SPACE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    memory: Memory
    score: float
    breakdown: ScoreBreakdown
    found_by: _containers.RepeatedScalarFieldContainer[str]
    misaligned: bool
    johari: JohariQuadrant
    explanation: str
    chunk_index: int
    unique_contribution: str
    relevance: float
    snippet: str
    snippet_start: int
    snippet_end: int
    provenance: Provenance
    primary_space: str
    def __init__(self, rank: _Optional[int] = ..., memory: _Optional[_Union[Memory, _Mapping]] = ..., score: _Optional[float] = ..., breakdown: _Optional[_Union[ScoreBreakdown, _Mapping]] = ..., found_by: _Optional[_Iterable[str]] = ..., misaligned: _Optional[bool] = ..., johari: _Optional[_Union[JohariQuadrant, str]] = ..., explanation: _Optional[str] = ..., chunk_index: _Optional[int] = ..., unique_contribution: _Optional[str] = ..., relevance: _Optional[float] = ..., snippet: _Optional[str] = ..., snippet_start: _Optional[int] = ..., snippet_end: _Optional[int] = ..., provenance: _Optional[_Union[Provenance, _Mapping]] = ..., primary_space: _Optional[str] = ...) -> None: ...

class Provenance(_message.Message):
    __slots__ = ("strategies", "fused_score", "validation_passed", "confidence", "citation", "conflicts_with")
    STRATEGIES_FIELD_NUMBER: _ClassVar[int]
    FUSED_SCORE_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_PASSED_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CITATION_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_WITH_FIELD_NUMBER: _ClassVar[int]
    strategies: _containers.RepeatedScalarFieldContainer[str]
    fused_score: float
    validation_passed: _containers.RepeatedScalarFieldContainer[str]
    confidence: float
    citation: str
    conflicts_with: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, strategies: _Optional[_Iterable[str]] = ..., fused_score: _Optional[float] = ..., validation_passed: _Optional[_Iterable[str]] = ..., confidence: _Optional[float] = ..., citation: _Optional[str] = ..., conflicts_with: _Optional[_Iterable[str]] = ...) -> None: ...

class ConflictPair(_message.Message):
    __slots__ = ("id_a", "id_b", "edge_type", "resolution", "winner")
    ID_A_FIELD_NUMBER: _ClassVar[int]
    ID_B_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    WINNER_FIELD_NUMBER: _ClassVar[int]
    id_a: str
    id_b: str
    edge_type: str
    resolution: str
    winner: str
    def __init__(self, id_a: _Optional[str] = ..., id_b: _Optional[str] = ..., edge_type: _Optional[str] = ..., resolution: _Optional[str] = ..., winner: _Optional[str] = ...) -> None: ...

class RetrieveSummary(_message.Message):
    __slots__ = ("returned", "total_ms", "embed_ms", "stages", "degraded", "degraded_reason", "profile", "request_id", "corpus_size", "route", "skip_reason", "retry_count", "retrieval_confidence", "conflicts", "query_types", "space_weights", "found_by_space", "unique_by_space")
    class SpaceWeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class FoundBySpaceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class UniqueBySpaceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    RETURNED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    EMBED_MS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CORPUS_SIZE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    SKIP_REASON_FIELD_NUMBER: _ClassVar[int]
    RETRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TYPES_FIELD_NUMBER: _ClassVar[int]
    SPACE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    FOUND_BY_SPACE_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_BY_SPACE_FIELD_NUMBER: _ClassVar[int]
    returned: int
    total_ms: float
    embed_ms: float
    stages: _containers.RepeatedCompositeFieldContainer[StageEvent]
    degraded: bool
    degraded_reason: str
    profile: str
    request_id: str
    corpus_size: int
    route: str
    skip_reason: str
    retry_count: int
    retrieval_confidence: float
    conflicts: _containers.RepeatedCompositeFieldContainer[ConflictPair]
    query_types: _containers.RepeatedScalarFieldContainer[str]
    space_weights: _containers.ScalarMap[str, float]
    found_by_space: _containers.ScalarMap[str, int]
    unique_by_space: _containers.ScalarMap[str, int]
    def __init__(self, returned: _Optional[int] = ..., total_ms: _Optional[float] = ..., embed_ms: _Optional[float] = ..., stages: _Optional[_Iterable[_Union[StageEvent, _Mapping]]] = ..., degraded: _Optional[bool] = ..., degraded_reason: _Optional[str] = ..., profile: _Optional[str] = ..., request_id: _Optional[str] = ..., corpus_size: _Optional[int] = ..., route: _Optional[str] = ..., skip_reason: _Optional[str] = ..., retry_count: _Optional[int] = ..., retrieval_confidence: _Optional[float] = ..., conflicts: _Optional[_Iterable[_Union[ConflictPair, _Mapping]]] = ..., query_types: _Optional[_Iterable[str]] = ..., space_weights: _Optional[_Mapping[str, float]] = ..., found_by_space: _Optional[_Mapping[str, int]] = ..., unique_by_space: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("stage", "result", "summary", "results")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    stage: StageEvent
    result: Result
    summary: RetrieveSummary
    results: ResultBatch
    def __init__(self, stage: _Optional[_Union[StageEvent, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., summary: _Optional[_Union[RetrieveSummary, _Mapping]] = ..., results: _Optional[_Union[ResultBatch, _Mapping]] = ...) -> None: ...

class ResultBatch(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[Result]
    def __init__(self, results: _Optional[_Iterable[_Union[Result, _Mapping]]] = ...) -> None: ...

class CompareRequest(_message.Message):
    __slots__ = ("id_a", "id_b", "aggregation", "space_weights", "search_matrix")
    class SpaceWeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_A_FIELD_NUMBER: _ClassVar[int]
    ID_B_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    SPACE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MATRIX_FIELD_NUMBER: _ClassVar[int]
    id_a: str
    id_b: str
    aggregation: Aggregation
    space_weights: _containers.ScalarMap[str, float]
    search_matrix: str
    def __init__(self, id_a: _Optional[str] = ..., id_b: _Optional[str] = ..., aggregation: _Optional[_Union[Aggregation, str]] = ..., space_weights: _Optional[_Mapping[str, float]] = ..., search_matrix: _Optional[str] = ...) -> None: ...

class CompareResponse(_message.Message):
    __slots__ = ("spaces", "aggregate", "aggregation", "purpose_similarity")
    class SpacesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SPACES_FIELD_NUMBER: _ClassVar[int]
    AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    spaces: _containers.ScalarMap[str, float]
    aggregate: float
    aggregation: Aggregation
    purpose_similarity: float
    def __init__(self, spaces: _Optional[_Mapping[str, float]] = ..., aggregate: _Optional[float] = ..., aggregation: _Optional[_Union[Aggregation, str]] = ..., purpose_similarity: _Optional[float] = ...) -> None: ...

class DiscoverEntryPointsRequest(_message.Message):
    __slots__ = ("text", "vectors", "filters", "min_similarity")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VECTORS_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    MIN_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    text: str
    vectors: QueryVectors
    filters: RetrieveFilters
    min_similarity: float
    def __init__(self, text: _Optional[str] = ..., vectors: _Optional[_Union[QueryVectors, _Mapping]] = ..., filters: _Optional[_Union[RetrieveFilters, _Mapping]] = ..., min_similarity: _Optional[float] = ...) -> None: ...

class EntryPoint(_message.Message):
    __slots__ = ("space", "memory_id", "similarity", "score")
    SPACE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    space: str
    memory_id: str
    similarity: float
    score: float
    def __init__(self, space: _Optional[str] = ..., memory_id: _Optional[str] = ..., similarity: _Optional[float] = ..., score: _Optional[float] = ...) -> None: ...

class DiscoverEntryPointsResponse(_message.Message):
    __slots__ = ("entry_points",)
    ENTRY_POINTS_FIELD_NUMBER: _ClassVar[int]
    entry_points: _containers.RepeatedCompositeFieldContainer[EntryPoint]
    def __init__(self, entry_points: _Optional[_Iterable[_Union[EntryPoint, _Mapping]]] = ...) -> None: ...

class ListGoalsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GoalSnapshot(_message.Message):
    __slots__ = ("time", "label", "size", "drift")
    TIME_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    label: str
    size: int
    drift: float
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., label: _Optional[str] = ..., size: _Optional[int] = ..., drift: _Optional[float] = ...) -> None: ...

class Goal(_message.Message):
    __slots__ = ("id", "label", "size", "drift", "history")
    ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    id: str
    label: str
    size: int
    drift: float
    history: _containers.RepeatedCompositeFieldContainer[GoalSnapshot]
    def __init__(self, id: _Optional[str] = ..., label: _Optional[str] = ..., size: _Optional[int] = ..., drift: _Optional[float] = ..., history: _Optional[_Iterable[_Union[GoalSnapshot, _Mapping]]] = ...) -> None: ...

class ListGoalsResponse(_message.Message):
    __slots__ = ("goals",)
    GOALS_FIELD_NUMBER: _ClassVar[int]
    goals: _containers.RepeatedCompositeFieldContainer[Goal]
    def __init__(self, goals: _Optional[_Iterable[_Union[Goal, _Mapping]]] = ...) -> None: ...

class FeedbackRequest(_message.Message):
    __slots__ = ("id", "used", "helpful", "request_id", "sufficient")
    ID_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    HELPFUL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUFFICIENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    used: bool
    helpful: bool
    request_id: str
    sufficient: bool
    def __init__(self, id: _Optional[str] = ..., used: _Optional[bool] = ..., helpful: _Optional[bool] = ..., request_id: _Optional[str] = ..., sufficient: _Optional[bool] = ...) -> None: ...

class FeedbackResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("namespaces",)
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    namespaces: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, namespaces: _Optional[_Iterable[str]] = ...) -> None: ...

class NamespaceStats(_message.Message):
    __slots__ = ("namespace", "memories", "chunks")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    memories: int
    chunks: int
    def __init__(self, namespace: _Optional[str] = ..., memories: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("memories", "namespaces", "model_version", "backend", "embedder", "embedder_ready", "goals", "server_version", "heads")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NAMESPACES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    EMBEDDER_READY_FIELD_NUMBER: _ClassVar[int]
    GOALS_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    memories: int
    namespaces: _containers.RepeatedCompositeFieldContainer[NamespaceStats]
    model_version: str
    backend: str
    embedder: str
    embedder_ready: bool
    goals: int
    server_version: str
    heads: _containers.RepeatedCompositeFieldContainer[EmbeddingHead]
    def __init__(self, memories: _Optional[int] = ..., namespaces: _Optional[_Iterable[_Union[NamespaceStats, _Mapping]]] = ..., model_version: _Optional[str] = ..., backend: _Optional[str] = ..., embedder: _Optional[str] = ..., embedder_ready: _Optional[bool] = ..., goals: _Optional[int] = ..., server_version: _Optional[str] = ..., heads: _Optional[_Iterable[_Union[EmbeddingHead, _Mapping]]] = ...) -> None: ...

class EmbeddingHead(_message.Message):
    __slots__ = ("name", "kind", "dimension", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    dimension: int
    dtype: str
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., dimension: _Optional[int] = ..., dtype: _Optional[str] = ...) -> None: ...
