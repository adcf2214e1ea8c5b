"""Writes workers/testdata/kvzmq/*.msgpack: KV event batches encoded by msgspec
exactly as vLLM's ZMQ publisher encodes them, for kvzmq_golden_test.go.

The struct declarations below are ours; they declare the fields, their order,
their defaults and the msgspec options (omit_defaults, tag=True, array_like)
that vllm/distributed/kv_events.py gives its EventBatch, KVCacheEvent,
BlockStored, BlockRemoved and AllBlocksCleared: "current" as vLLM declares them
now (maps, tagged by a "type" key, hashes as digests), "array_like" as earlier
releases did (arrays, the tag first, integer hashes).

Usage: make kvzmq-golden (a virtual environment with the pinned msgspec).
"""

import pathlib
import sys

import msgspec

OUT = pathlib.Path(__file__).resolve().parent.parent / "workers" / "testdata" / "kvzmq"

Hash = bytes | int


def structs(array_like: bool):
    class Batch(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False):
        ts: float
        events: list
        data_parallel_rank: int | None = None

    class Event(msgspec.Struct, array_like=array_like, omit_defaults=True, gc=False, tag=True):
        pass

    class BlockStored(Event):
        block_hashes: list[Hash]
        parent_block_hash: Hash | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None = None
        extra_keys: list | None = None
        group_idx: int | None = None
        kv_cache_spec_kind: str | None = None
        kv_cache_spec_sliding_window: int | None = None

    class BlockRemoved(Event):
        block_hashes: list[Hash]
        medium: str | None
        group_idx: int | None = None

    class AllBlocksCleared(Event):
        pass

    return Batch, BlockStored, BlockRemoved, AllBlocksCleared


def digest(low: int) -> bytes:
    """A 32-byte hash whose low 64 bits, read big-endian, are low."""
    return bytes([0xAB]) + bytes(23) + low.to_bytes(8, "big")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    enc = msgspec.msgpack.Encoder()
    written = []
    for name, array_like, h in (("current", False, digest), ("array_like", True, int)):
        Batch, Stored, Removed, Cleared = structs(array_like)
        plain = Batch(
            ts=1767225600.5,
            events=[
                Stored(block_hashes=[h(11), h(12)], parent_block_hash=None, token_ids=[1, 2, 3, 4, 5, 6, 7, 8],
                       block_size=4, lora_id=None, medium="GPU"),
                Stored(block_hashes=[h(13)], parent_block_hash=h(12), token_ids=[9, 10, 11, 12],
                       block_size=4, lora_id=7, medium="GPU", lora_name="adapter", extra_keys=[None]),
                Removed(block_hashes=[h(11)], medium="GPU"),
                Cleared(),
            ],
            data_parallel_rank=0,
        )
        hybrid = Batch(
            ts=1767225601.0,
            events=[
                Stored(block_hashes=[h(21)], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=4,
                       lora_id=None, medium="GPU", group_idx=0, kv_cache_spec_kind="full_attention"),
                Stored(block_hashes=[h(31)], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=4,
                       lora_id=None, medium="GPU", group_idx=1, kv_cache_spec_kind="sliding_window",
                       kv_cache_spec_sliding_window=128),
                Removed(block_hashes=[h(31)], medium="GPU", group_idx=1),
                Stored(block_hashes=[h(41)], parent_block_hash=None, token_ids=[5, 6, 7, 8], block_size=4,
                       lora_id=None, medium="CPU"),
            ],
            data_parallel_rank=2,
        )
        for kind, batch in (("plain", plain), ("hybrid", hybrid)):
            path = OUT / f"{name}_{kind}.msgpack"
            path.write_bytes(enc.encode(batch))
            written.append(path.name)
    print(f"msgspec {msgspec.__version__}: wrote {', '.join(written)}", file=sys.stderr)


if __name__ == "__main__":
    main()
