// bench.mjs: single-threaded encode throughput of the reference tokenizer (Hugging Face tokenizers'
// Node binding), on the two long documents, for comparison with kvgate's Go tokenizer on the
// same machine.
//
// Usage (after `npm ci` in this directory and `make testdata` at the root):
//   node bench.mjs [--tokenizers llama3,qwen3] [--docs long-4k,long-64k] [--min-ms 2000] [--warmup-ms 500]
//
// Output: one JSON line per (tokenizer, document):
//   {"tokenizer":"llama3","doc":"long-4k","tokens":921,"iterations":...,"ns_per_op":...,
//    "tokens_per_sec":...,"cpu_per_wall":...}
// `tokens` counts encode(text, addSpecialTokens=false); ns_per_op is the mean wall time of one
// awaited encode over the timed loop (after a warm-up), which includes the binding's cost of
// handing the string to Rust and the ids back (a few microseconds per call).
//
// Threads. The binding runs each encode() as an N-API async task on libuv's thread pool; encoding
// ONE string does not use rayon (only encodeBatch does, through Rust's maybe_parallel iterators),
// and the loop below awaits each call before starting the next, so exactly one encode runs at a
// time on one thread. To rule out any helper threads, this script sets, unless already set:
//   RAYON_NUM_THREADS=1         rayon's global pool gets one thread
//   TOKENIZERS_PARALLELISM=false tokenizers' own switch for its parallel paths
//   UV_THREADPOOL_SIZE=1        libuv's pool, where the async encode tasks run, gets one thread
// and it reports cpu_per_wall = (process user+system CPU time) / wall time over the timed loop: about
// 1.0 means one busy thread (the JS thread mostly waits on the promise); a value well above 1
// would reveal parallel work. Pin to one core as well with `taskset -c 2 node bench.mjs` if you like.
import { readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

process.env.RAYON_NUM_THREADS ??= '1'
process.env.TOKENIZERS_PARALLELISM ??= 'false'
process.env.UV_THREADPOOL_SIZE ??= '1'

// Imported after the environment is set, so the native module and libuv see it.
const { Tokenizer } = await import('tokenizers')

const HERE = dirname(fileURLToPath(import.meta.url))
const TESTDATA = resolve(HERE, '../../tokenize/testdata')

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? process.argv[i + 1] : def
}
const tokenizers = arg('tokenizers', 'llama3,qwen3,deepseek_v3,llama2,gemma3,bert_uncased,albert,albert_cased').split(',')
const docs = arg('docs', 'long-4k,long-64k').split(',')
const minMs = Number(arg('min-ms', '2000'))
const warmupMs = Number(arg('warmup-ms', '500'))

// run calls encode repeatedly for at least ms milliseconds (and at least 5 times).
async function run(tok, text, ms) {
  const budget = BigInt(Math.round(ms * 1e6))
  const cpu0 = process.cpuUsage()
  const t0 = process.hrtime.bigint()
  let n = 0
  let elapsed = 0n
  while (n < 5 || elapsed < budget) {
    await tok.encode(text, null, { addSpecialTokens: false })
    n++
    elapsed = process.hrtime.bigint() - t0
  }
  const cpu = process.cpuUsage(cpu0)
  return { n, ns: Number(elapsed), cpuNs: (cpu.user + cpu.system) * 1000 }
}

for (const name of tokenizers) {
  const tok = Tokenizer.fromFile(join(TESTDATA, 'tokenizers', name, 'tokenizer.json'))
  for (const doc of docs) {
    const text = readFileSync(join(TESTDATA, `${doc}.txt`), 'utf8')
    const tokens = (await tok.encode(text, null, { addSpecialTokens: false })).getLength()
    await run(tok, text, warmupMs)
    const { n, ns, cpuNs } = await run(tok, text, minMs)
    const nsPerOp = ns / n
    console.log(
      JSON.stringify({
        tokenizer: name,
        doc,
        tokens,
        iterations: n,
        ns_per_op: Math.round(nsPerOp),
        tokens_per_sec: Math.round((tokens * 1e9) / nsPerOp),
        cpu_per_wall: Number((cpuNs / ns).toFixed(2)),
      }),
    )
  }
}
