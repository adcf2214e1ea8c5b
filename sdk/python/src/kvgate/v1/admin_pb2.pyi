from kvgate.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_UNSPECIFIED: BreakerState
DESCRIPTOR: _descriptor.FileDescriptor
HEALTH_HEALTHY: Health
HEALTH_UNHEALTHY: Health
HEALTH_UNSPECIFIED: Health
PROTOCOL_SGLANG: Protocol
PROTOCOL_TRTLLM: Protocol
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_VLLM: Protocol
ROLE_DECODE: Role
ROLE_PREFILL: Role
ROLE_REGULAR: Role
ROLE_UNSPECIFIED: Role

class AddWorkerRequest(_message.Message):
    __slots__ = ["address", "bootstrap_port", "protocol", "role"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_PORT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    address: str
    bootstrap_port: int
    protocol: Protocol
    role: Role
    def __init__(self, address: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., bootstrap_port: _Optional[int] = ...) -> None: ...

class AddWorkerResponse(_message.Message):
    __slots__ = ["worker"]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ["chat", "generate", "metadata"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHAT_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    chat: _router_pb2.ChatRequest
    generate: _router_pb2.GenerateRequest
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, generate: _Optional[_Union[_router_pb2.GenerateRequest, _Mapping]] = ..., chat: _Optional[_Union[_router_pb2.ChatRequest, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ["branch", "policy", "predicted_cached_tokens", "prefill_branch", "prefill_worker", "prompt_tokens", "reason", "worker", "workers"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BRANCH_FIELD_NUMBER: _ClassVar[int]
    PREFILL_WORKER_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    branch: str
    policy: str
    predicted_cached_tokens: int
    prefill_branch: str
    prefill_worker: str
    prompt_tokens: int
    reason: str
    worker: str
    workers: _containers.RepeatedCompositeFieldContainer[WorkerView]
    def __init__(self, worker: _Optional[str] = ..., policy: _Optional[str] = ..., branch: _Optional[str] = ..., reason: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., predicted_cached_tokens: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerView, _Mapping]]] = ..., prefill_worker: _Optional[str] = ..., prefill_branch: _Optional[str] = ...) -> None: ...

class FlushCacheRequest(_message.Message):
    __slots__ = ["address", "timeout_secs"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECS_FIELD_NUMBER: _ClassVar[int]
    address: str
    timeout_secs: int
    def __init__(self, address: _Optional[str] = ..., timeout_secs: _Optional[int] = ...) -> None: ...

class FlushCacheResponse(_message.Message):
    __slots__ = ["message", "worker"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    message: str
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class KvEventStream(_message.Message):
    __slots__ = ["batches", "connected", "duplicates", "events", "failures", "gaps", "lag_seconds", "last_error", "last_sequence_number", "mode", "resets", "resyncs"]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    RESYNCS_FIELD_NUMBER: _ClassVar[int]
    batches: int
    connected: bool
    duplicates: int
    events: int
    failures: int
    gaps: int
    lag_seconds: float
    last_error: str
    last_sequence_number: int
    mode: str
    resets: int
    resyncs: int
    def __init__(self, mode: _Optional[str] = ..., connected: bool = ..., last_sequence_number: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., batches: _Optional[int] = ..., events: _Optional[int] = ..., gaps: _Optional[int] = ..., resets: _Optional[int] = ..., resyncs: _Optional[int] = ..., duplicates: _Optional[int] = ..., failures: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ["workers"]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ["chat_template", "decode_policy", "name", "page_size", "policy", "tokenizer", "tree_tokens", "vocab_size", "workers"]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    DECODE_POLICY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    chat_template: str
    decode_policy: str
    name: str
    page_size: int
    policy: str
    tokenizer: str
    tree_tokens: int
    vocab_size: int
    workers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., workers: _Optional[_Iterable[str]] = ..., policy: _Optional[str] = ..., decode_policy: _Optional[str] = ..., tokenizer: _Optional[str] = ..., vocab_size: _Optional[int] = ..., chat_template: _Optional[str] = ..., page_size: _Optional[int] = ..., tree_tokens: _Optional[int] = ...) -> None: ...

class RemoveWorkerRequest(_message.Message):
    __slots__ = ["address", "drain_timeout_secs"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_TIMEOUT_SECS_FIELD_NUMBER: _ClassVar[int]
    address: str
    drain_timeout_secs: int
    def __init__(self, address: _Optional[str] = ..., drain_timeout_secs: _Optional[int] = ...) -> None: ...

class RemoveWorkerResponse(_message.Message):
    __slots__ = ["aborted", "worker"]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    aborted: int
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., aborted: _Optional[int] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ["address", "breaker", "connecting", "draining", "engine_running", "engine_waiting", "health", "health_check", "in_flight", "kv_events", "kv_usage", "model", "page_size", "protocol", "role", "vocab_size"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CONNECTING_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    ENGINE_RUNNING_FIELD_NUMBER: _ClassVar[int]
    ENGINE_WAITING_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    KV_EVENTS_FIELD_NUMBER: _ClassVar[int]
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    address: str
    breaker: BreakerState
    connecting: bool
    draining: bool
    engine_running: int
    engine_waiting: int
    health: Health
    health_check: str
    in_flight: int
    kv_events: KvEventStream
    kv_usage: float
    model: str
    page_size: int
    protocol: Protocol
    role: Role
    vocab_size: int
    def __init__(self, address: _Optional[str] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., role: _Optional[_Union[Role, str]] = ..., health: _Optional[_Union[Health, str]] = ..., in_flight: _Optional[int] = ..., model: _Optional[str] = ..., engine_running: _Optional[int] = ..., engine_waiting: _Optional[int] = ..., kv_usage: _Optional[float] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., draining: bool = ..., connecting: bool = ..., kv_events: _Optional[_Union[KvEventStream, _Mapping]] = ..., health_check: _Optional[str] = ..., vocab_size: _Optional[int] = ..., page_size: _Optional[int] = ...) -> None: ...

class WorkerView(_message.Message):
    __slots__ = ["address", "breaker", "confirmed_tokens", "draining", "health", "in_flight", "load", "matched_tokens", "speculative_tokens"]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    address: str
    breaker: BreakerState
    confirmed_tokens: int
    draining: bool
    health: Health
    in_flight: int
    load: int
    matched_tokens: int
    speculative_tokens: int
    def __init__(self, address: _Optional[str] = ..., health: _Optional[_Union[Health, str]] = ..., load: _Optional[int] = ..., in_flight: _Optional[int] = ..., matched_tokens: _Optional[int] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., draining: bool = ..., confirmed_tokens: _Optional[int] = ..., speculative_tokens: _Optional[int] = ...) -> None: ...

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Health(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
