//! Follows a replay script that kvgate's indexer benchmark wrote
//! (bench/indexer_script_test.go) with one of Dynamo's indexers: the same
//! lookups in the same order, each followed by the KV events of serving it.
//! It times each lookup (find_matches given the prompt's block hashes, as
//! Dynamo's benchmark times it, and with the hashing of the prompt's tokens
//! that a router does first), the events applied per second, and checks
//! that the index matched each prompt as the engine did.
//!
//! usage: dynamo-indexer-replay <script> <block tokens> <radix|compressed>

use std::collections::HashMap;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dynamo_kv_router::indexer::{RadixTree, SyncIndexer, ThreadPoolIndexer};
use dynamo_kv_router::protocols::{
    compute_block_hash_for_seq, BlockHashOptions, ExternalSequenceBlockHash, KvCacheEvent,
    KvCacheEventData, KvCacheRemoveData, KvCacheStoreData, KvCacheStoredBlockData,
    LocalBlockHash, OverlapScores, RouterEvent, WorkerWithDpRank,
};
use dynamo_kv_router::ConcurrentRadixTreeCompressed;

/// One step of the script.
enum Step {
    Lookup { worker: u64, cached: u32, hashes: Vec<LocalBlockHash> },
    Event(RouterEvent),
}

/// The indexer under test.
enum Index {
    Radix(RadixTree),
    // One event thread; every lookup waits for the events before it.
    Pool(ThreadPoolIndexer<ConcurrentRadixTreeCompressed>, tokio::runtime::Runtime),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let block: u32 = match (args.len(), args.get(2).and_then(|b| b.parse().ok())) {
        (4, Some(b)) if b > 0 => b,
        _ => {
            eprintln!("usage: {} <script> <block tokens> <radix|compressed>", args[0]);
            return ExitCode::from(2);
        }
    };
    let steps = match read(&args[1]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: {e}", args[1]);
            return ExitCode::from(2);
        }
    };
    let mut index = match args[3].as_str() {
        "radix" => Index::Radix(RadixTree::new()),
        "compressed" => Index::Pool(
            ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), 1, block),
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap(),
        ),
        other => {
            eprintln!("unknown indexer {other}");
            return ExitCode::from(2);
        }
    };
    let (mut find, mut hashed) = (Vec::new(), Vec::new());
    let (mut ops, mut apply) = (0u64, Duration::ZERO);
    let (mut lookups, mut wrong) = (0u64, 0u64);
    let mut tokens: Vec<u32> = Vec::new();
    for step in steps {
        match step {
            Step::Lookup { worker, cached, hashes } => {
                // The prompt's tokens, for the hashing a router does before
                // its lookup: their values do not change its cost.
                tokens.clear();
                tokens.extend((0..hashes.len() as u32 * block).map(|i| i.wrapping_mul(2654435761)));
                if let Index::Pool(p, rt) = &index {
                    rt.block_on(p.flush_and_wait()).expect("flush");
                }
                // Hash first, as a router does: the lookup that follows is
                // timed on its own and with the hashing.
                let t0 = Instant::now();
                black_box(compute_block_hash_for_seq(&tokens, block, BlockHashOptions::default()));
                let t1 = Instant::now();
                let scores = lookup(&index, hashes);
                let t2 = Instant::now();
                find.push(t2 - t1);
                hashed.push(t2 - t0);
                lookups += 1;
                let got = scores.scores.get(&WorkerWithDpRank::new(worker, 0)).copied().unwrap_or(0);
                if got != cached {
                    wrong += 1;
                }
            }
            Step::Event(ev) => {
                ops += match &ev.event.data {
                    KvCacheEventData::Stored(s) => s.blocks.len() as u64,
                    KvCacheEventData::Removed(r) => r.block_hashes.len() as u64,
                    _ => 0,
                };
                let t = Instant::now();
                match &mut index {
                    Index::Radix(r) => r.apply_event(ev).expect("apply"),
                    Index::Pool(p, _) => p.enqueue_event(ev).expect("enqueue"),
                }
                apply += t.elapsed();
            }
        }
    }
    let q = |v: &mut Vec<Duration>, p: f64| {
        v.sort();
        v[(p * (v.len() - 1) as f64) as usize].as_nanos()
    };
    print!(
        "block={} indexer={} lookups={} find-p50-ns={} find-p99-ns={} hash+find-p50-ns={} hash+find-p99-ns={} wrong={}",
        block,
        args[3],
        lookups,
        q(&mut find, 0.50),
        q(&mut find, 0.99),
        q(&mut hashed, 0.50),
        q(&mut hashed, 0.99),
        wrong
    );
    if matches!(index, Index::Radix(_)) {
        // The thread pool applies events on its own thread: their time is
        // not this thread's.
        print!(" ops={} ops/s={:.0}", ops, ops as f64 / apply.as_secs_f64());
    }
    println!();
    if wrong > 0 {
        eprintln!("{wrong} lookups disagreed with the engine: the index did not follow the events");
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

fn lookup(index: &Index, hashes: Vec<LocalBlockHash>) -> OverlapScores {
    match index {
        Index::Radix(r) => r.find_matches(hashes, false),
        Index::Pool(p, _) => p.backend().find_matches(&hashes, false),
    }
}

/// read parses a script (its format: bench/indexer_script_test.go).
fn read(path: &str) -> std::io::Result<Vec<Step>> {
    let bad = |line: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad line {line:?}"));
    let mut steps = Vec::new();
    let mut ids: HashMap<u64, u64> = HashMap::new(); // next event id per worker
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        let f: Vec<&str> = line.split(' ').collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| bad(&line));
        let worker = num(1)?;
        let mut event = |data| {
            let id = ids.entry(worker).or_default();
            *id += 1;
            Step::Event(RouterEvent::new(worker, KvCacheEvent { event_id: *id, data, dp_rank: 0 }))
        };
        steps.push(match f[0] {
            "L" => {
                let n = num(3)? as usize;
                let hashes = (0..n).map(|i| num(4 + i).map(LocalBlockHash)).collect::<Result<_, _>>()?;
                Step::Lookup { worker, cached: num(2)? as u32, hashes }
            }
            "S" => {
                let parent = if f.get(2) == Some(&"-") { None } else { Some(ExternalSequenceBlockHash(num(2)?)) };
                event(KvCacheEventData::Stored(KvCacheStoreData {
                    parent_hash: parent,
                    start_position: None,
                    blocks: vec![KvCacheStoredBlockData {
                        block_hash: ExternalSequenceBlockHash(num(3)?),
                        tokens_hash: LocalBlockHash(num(4)?),
                        mm_extra_info: None,
                    }],
                }))
            }
            "R" => event(KvCacheEventData::Removed(KvCacheRemoveData {
                block_hashes: vec![ExternalSequenceBlockHash(num(2)?)],
            })),
            _ => return Err(bad(&line)),
        });
    }
    Ok(steps)
}
