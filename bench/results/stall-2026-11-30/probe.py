"""Bursts of Generate calls straight to one vLLM engine: does a burst's
shape (how many requests, how many cold prefixes) decide how long its first
tokens take, and only the first time that shape is seen?

Usage (with the vLLM venv's python, which has grpcio and smg-grpc-proto):
  probe.py HOST:PORT SEED SHAPE...
Each SHAPE is one burst, flushed first: a digit per request, equal digits
sharing a new 1,024-token prefix, each request with its own 64 tokens.
"""
import grpc, random, sys, threading, time, uuid
from smg_grpc_proto import vllm_engine_pb2 as p, vllm_engine_pb2_grpc as g
from smg_grpc_proto.generated import common_pb2

addr = sys.argv[1]
ch = grpc.insecure_channel(addr)
stub = g.VllmEngineStub(ch)
rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 0)

def ids(n): return [rng.randrange(1000, 100000) for _ in range(n)]

def one(tokens, out, i):
    t0 = time.monotonic()
    req = p.GenerateRequest(request_id=uuid.uuid4().hex,
        tokenized=p.TokenizedInput(input_ids=tokens),
        sampling_params=p.SamplingParams(max_tokens=16, ignore_eos=True, temperature=1.0),
        stream=True)
    first = None
    for r in stub.Generate(req):
        if first is None:
            first = time.monotonic() - t0
    out[i] = (first, time.monotonic() - t0)

def burst(shape):
    """shape: list of prefix indexes, one per request; each distinct index a
    new 1024-token prefix, each request its own 64-token question."""
    pre = {k: ids(1024) for k in set(shape)}
    reqs = [pre[k] + ids(64) for k in shape]
    out = [None] * len(reqs)
    ts = [threading.Thread(target=one, args=(r, out, i)) for i, r in enumerate(reqs)]
    t0 = time.monotonic()
    for t in ts: t.start()
    for t in ts: t.join()
    return max(o[0] for o in out), time.monotonic() - t0

def flush():
    while not stub.FlushCache(common_pb2.FlushCacheRequest(), timeout=30).success:
        time.sleep(0.2)

for spec in sys.argv[3:]:
    shape = [int(c) for c in spec]
    flush()
    ttft, wall = burst(shape)
    print(f"{spec:10s} max TTFT {ttft*1000:7.0f} ms  wall {wall*1000:7.0f} ms", flush=True)
