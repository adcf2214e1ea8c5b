from kvgate.v1 import router_pb2 as _router_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPECIFIED: _ClassVar[Protocol]
    PROTOCOL_SGLANG: _ClassVar[Protocol]
    PROTOCOL_VLLM: _ClassVar[Protocol]
    PROTOCOL_TRTLLM: _ClassVar[Protocol]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_REGULAR: _ClassVar[Role]
    ROLE_PREFILL: _ClassVar[Role]
    ROLE_DECODE: _ClassVar[Role]

class Health(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HEALTH_UNSPECIFIED: _ClassVar[Health]
    HEALTH_HEALTHY: _ClassVar[Health]
    HEALTH_UNHEALTHY: _ClassVar[Health]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_SGLANG: Protocol
PROTOCOL_VLLM: Protocol
PROTOCOL_TRTLLM: Protocol
ROLE_UNSPECIFIED: Role
ROLE_REGULAR: Role
ROLE_PREFILL: Role
ROLE_DECODE: Role
HEALTH_UNSPECIFIED: Health
HEALTH_HEALTHY: Health
HEALTH_UNHEALTHY: Health
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState

class FlushCacheRequest(_message.Message):
    __slots__ = ("address", "timeout_secs")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECS_FIELD_NUMBER: _ClassVar[int]
    address: str
    timeout_secs: int
    def __init__(self, address: _Optional[str] = ..., timeout_secs: _Optional[int] = ...) -> None: ...

class FlushCacheResponse(_message.Message):
    __slots__ = ("worker", "message")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    message: str
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "workers", "policy", "decode_policy", "tokenizer", "vocab_size", "chat_template", "page_size", "tree_tokens")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    DECODE_POLICY_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    TREE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    name: str
    workers: _containers.RepeatedScalarFieldContainer[str]
    policy: str
    decode_policy: str
    tokenizer: str
    vocab_size: int
    chat_template: str
    page_size: int
    tree_tokens: int
    def __init__(self, name: _Optional[str] = ..., workers: _Optional[_Iterable[str]] = ..., policy: _Optional[str] = ..., decode_policy: _Optional[str] = ..., tokenizer: _Optional[str] = ..., vocab_size: _Optional[int] = ..., chat_template: _Optional[str] = ..., page_size: _Optional[int] = ..., tree_tokens: _Optional[int] = ...) -> None: ...

class AddWorkerRequest(_message.Message):
    __slots__ = ("address", "role", "protocol", "bootstrap_port")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    BOOTSTRAP_PORT_FIELD_NUMBER: _ClassVar[int]
    address: str
    role: Role
    protocol: Protocol
    bootstrap_port: int
    def __init__(self, address: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., bootstrap_port: _Optional[int] = ...) -> None: ...

class AddWorkerResponse(_message.Message):
    __slots__ = ("worker",)
    WORKER_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ...) -> None: ...

class RemoveWorkerRequest(_message.Message):
    __slots__ = ("address", "drain_timeout_secs")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_TIMEOUT_SECS_FIELD_NUMBER: _ClassVar[int]
    address: str
    drain_timeout_secs: int
    def __init__(self, address: _Optional[str] = ..., drain_timeout_secs: _Optional[int] = ...) -> None: ...

class RemoveWorkerResponse(_message.Message):
    __slots__ = ("worker", "aborted")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    worker: Worker
    aborted: int
    def __init__(self, worker: _Optional[_Union[Worker, _Mapping]] = ..., aborted: _Optional[int] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("generate", "chat", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    generate: _router_pb2.GenerateRequest
    chat: _router_pb2.ChatRequest
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, generate: _Optional[_Union[_router_pb2.GenerateRequest, _Mapping]] = ..., chat: _Optional[_Union[_router_pb2.ChatRequest, _Mapping]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("worker", "policy", "branch", "reason", "prompt_tokens", "predicted_cached_tokens", "workers", "prefill_worker", "prefill_branch")
    WORKER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_WORKER_FIELD_NUMBER: _ClassVar[int]
    PREFILL_BRANCH_FIELD_NUMBER: _ClassVar[int]
    worker: str
    policy: str
    branch: str
    reason: str
    prompt_tokens: int
    predicted_cached_tokens: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerView]
    prefill_worker: str
    prefill_branch: str
    def __init__(self, worker: _Optional[str] = ..., policy: _Optional[str] = ..., branch: _Optional[str] = ..., reason: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., predicted_cached_tokens: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerView, _Mapping]]] = ..., prefill_worker: _Optional[str] = ..., prefill_branch: _Optional[str] = ...) -> None: ...

class WorkerView(_message.Message):
    __slots__ = ("address", "health", "load", "in_flight", "matched_tokens", "breaker", "draining", "confirmed_tokens", "speculative_tokens")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    address: str
    health: Health
    load: int
    in_flight: int
    matched_tokens: int
    breaker: BreakerState
    draining: bool
    confirmed_tokens: int
    speculative_tokens: int
    def __init__(self, address: _Optional[str] = ..., health: _Optional[_Union[Health, str]] = ..., load: _Optional[int] = ..., in_flight: _Optional[int] = ..., matched_tokens: _Optional[int] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., draining: bool = ..., confirmed_tokens: _Optional[int] = ..., speculative_tokens: _Optional[int] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[Worker]
    def __init__(self, workers: _Optional[_Iterable[_Union[Worker, _Mapping]]] = ...) -> None: ...

class Worker(_message.Message):
    __slots__ = ("address", "protocol", "role", "health", "in_flight", "model", "engine_running", "engine_waiting", "kv_usage", "breaker", "draining", "connecting", "kv_events", "health_check", "vocab_size", "page_size", "max_context_length", "max_input_tokens", "truncates_prompts", "kv_capacity_tokens", "max_running_requests")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_RUNNING_FIELD_NUMBER: _ClassVar[int]
    ENGINE_WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_USAGE_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    CONNECTING_FIELD_NUMBER: _ClassVar[int]
    KV_EVENTS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_CHECK_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATES_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    KV_CAPACITY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    address: str
    protocol: Protocol
    role: Role
    health: Health
    in_flight: int
    model: str
    engine_running: int
    engine_waiting: int
    kv_usage: float
    breaker: BreakerState
    draining: bool
    connecting: bool
    kv_events: KvEventStream
    health_check: str
    vocab_size: int
    page_size: int
    max_context_length: int
    max_input_tokens: int
    truncates_prompts: bool
    kv_capacity_tokens: int
    max_running_requests: int
    def __init__(self, address: _Optional[str] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., role: _Optional[_Union[Role, str]] = ..., health: _Optional[_Union[Health, str]] = ..., in_flight: _Optional[int] = ..., model: _Optional[str] = ..., engine_running: _Optional[int] = ..., engine_waiting: _Optional[int] = ..., kv_usage: _Optional[float] = ..., breaker: _Optional[_Union[BreakerState, str]] = ..., draining: bool = ..., connecting: bool = ..., kv_events: _Optional[_Union[KvEventStream, _Mapping]] = ..., health_check: _Optional[str] = ..., vocab_size: _Optional[int] = ..., page_size: _Optional[int] = ..., max_context_length: _Optional[int] = ..., max_input_tokens: _Optional[int] = ..., truncates_prompts: bool = ..., kv_capacity_tokens: _Optional[int] = ..., max_running_requests: _Optional[int] = ...) -> None: ...

class KvEventStream(_message.Message):
    __slots__ = ("mode", "connected", "last_sequence_number", "lag_seconds", "batches", "events", "gaps", "resets", "resyncs", "duplicates", "failures", "last_error")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    GAPS_FIELD_NUMBER: _ClassVar[int]
    RESETS_FIELD_NUMBER: _ClassVar[int]
    RESYNCS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    mode: str
    connected: bool
    last_sequence_number: int
    lag_seconds: float
    batches: int
    events: int
    gaps: int
    resets: int
    resyncs: int
    duplicates: int
    failures: int
    last_error: str
    def __init__(self, mode: _Optional[str] = ..., connected: bool = ..., last_sequence_number: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., batches: _Optional[int] = ..., events: _Optional[int] = ..., gaps: _Optional[int] = ..., resets: _Optional[int] = ..., resyncs: _Optional[int] = ..., duplicates: _Optional[int] = ..., failures: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...
