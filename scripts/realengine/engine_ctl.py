#!/usr/bin/env python3
"""Small gRPC chores on the real vLLM engines and the routers, for bench.sh.

Usage (with the venv's python, which has grpcio and smg-grpc-proto):
  engine_ctl.py wait-engines SECONDS HOST:PORT...  each engine's HealthCheck says healthy
  engine_ctl.py wait-serving SECONDS HOST:PORT     grpc.health.v1 answers SERVING (kvgate)
  engine_ctl.py flush HOST:PORT...                 FlushCache: empty each engine's prefix cache (a refusal asked again for a minute)

bench.sh runs each router against the same engines with the same workload;
flushing between runs keeps one router's prompts from warming the next one's
cache. Exits non-zero, saying why, when a deadline passes or an engine
refuses.
"""

import sys
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from smg_grpc_proto import vllm_engine_pb2, vllm_engine_pb2_grpc
from smg_grpc_proto.generated import common_pb2


def wait(seconds: float, ready, what: str) -> None:
    """Polls ready() once a second: the other side is another process whose
    state can only be asked."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except grpc.RpcError as e:
            last = f"{e.code().name}: {e.details()}"
        time.sleep(1)
    sys.exit(f"{what}: not ready after {seconds:.0f} s (last: {last})")


def engine_healthy(addr: str) -> bool:
    with grpc.insecure_channel(addr) as ch:
        r = vllm_engine_pb2_grpc.VllmEngineStub(ch).HealthCheck(
            vllm_engine_pb2.HealthCheckRequest(), timeout=5
        )
        return r.healthy


def serving(addr: str) -> bool:
    with grpc.insecure_channel(addr) as ch:
        r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return r.status == health_pb2.HealthCheckResponse.SERVING


def flush(addr: str, seconds: float = 60) -> None:
    """vLLM refuses to reset its prefix cache while a request runs, and an
    engine just started may still be finishing one of its own (one run of
    bench.sh stopped on "requests may be in flight" before any router had
    started), so a refusal is asked again once a second until the deadline."""
    deadline = time.monotonic() + seconds
    while True:
        with grpc.insecure_channel(addr) as ch:
            r = vllm_engine_pb2_grpc.VllmEngineStub(ch).FlushCache(
                common_pb2.FlushCacheRequest(), timeout=30
            )
        if r.success:
            return
        if time.monotonic() >= deadline:
            sys.exit(f"FlushCache on {addr} refused for {seconds:.0f} s: {r.message}")
        time.sleep(1)


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "wait-engines":
        for addr in args[1:]:
            wait(float(args[0]), lambda: engine_healthy(addr), f"engine {addr}")
    elif cmd == "wait-serving":
        wait(float(args[0]), lambda: serving(args[1]), f"router {args[1]}")
    elif cmd == "flush":
        for addr in args:
            flush(addr)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
