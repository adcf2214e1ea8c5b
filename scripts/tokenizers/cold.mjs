// cold.mjs: the references' side of cold.sh. Encode throughput on text no tokenizer has seen
// (gentext.mjs), every measurement on a tokenizer object built afresh, so that its per-word cache
// starts empty, as kvgate's does in BenchmarkColdText (tokenize/coldtext_bench_test.go).
//
// Usage: node --expose-gc cold.mjs --text DIR --tokenizers llama3,gpt4o,o200k_base [--ids DIR]
//
// A tokenizer is measured with Hugging Face tokenizers' Node binding when
// tokenize/testdata/tokenizers/<name>/tokenizer.json exists (Tokenizer.fromFile, then one awaited
// encode(text, null, {addSpecialTokens: false})), and with npm tiktoken when <name> is
// o200k_base or cl100k_base (encoding_for_model("gpt-4o") or ("gpt-4"), then
// encode_ordinary(text)). The timer covers the encode call alone: the load, and a full GC after
// it, come before. Before a tokenizer's first measurement, a throwaway object of the same kind
// encodes tokenize/testdata/long-64k.txt, so that the process is warm (V8's tiers for tiktoken's
// WASM, the allocator) while every measured object's caches are empty: "cold" here means a
// long-running process meeting text it has not seen.
//
// Output: one JSON line per measurement:
//   {"side":"hf"|"tiktoken","tokenizer":"llama3","group":"english","bytes":...,"tokens":...,"ns":...,"cpu_ns":...}
// ns is wall time; cpu_ns the process's user+system CPU time over the same span (every thread:
// the binding encodes on libuv's pool while the main thread waits), which another process's load
// on the machine inflates much less than wall time.
// With --ids, also writes <side>-<tokenizer>-<group>.ids (decimal ids, space-separated).
//
// Threads: as bench.mjs, one encode at a time on one thread (RAYON_NUM_THREADS=1,
// TOKENIZERS_PARALLELISM=false, UV_THREADPOOL_SIZE=1 unless set); tiktoken's WASM build is
// single-threaded.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

process.env.RAYON_NUM_THREADS ??= '1'
process.env.TOKENIZERS_PARALLELISM ??= 'false'
process.env.UV_THREADPOOL_SIZE ??= '1'

const { Tokenizer } = await import('tokenizers')
const { encoding_for_model } = await import('tiktoken')

const HERE = dirname(fileURLToPath(import.meta.url))
const TOKENIZERS = resolve(HERE, '../../tokenize/testdata/tokenizers')
// tiktoken's encodings by kvgate's directory name; o200k_base is what tiktoken's
// encoding_for_model('gpt-4o') returns, cl100k_base gpt-4's.
const TIKTOKEN = { o200k_base: () => encoding_for_model('gpt-4o'), cl100k_base: () => encoding_for_model('gpt-4') }

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? process.argv[i + 1] : def
}
const textDir = arg('text')
const idsDir = arg('ids')
if (!textDir || typeof global.gc !== 'function') {
  console.error('usage: node --expose-gc cold.mjs --text DIR --tokenizers a,b [--ids DIR]')
  process.exit(2)
}
const groups = readdirSync(textDir).filter((f) => f.endsWith('.txt')).sort().map((f) => f.slice(0, -4))
const texts = Object.fromEntries(groups.map((g) => [g, readFileSync(join(textDir, `${g}.txt`), 'utf8')]))

// sides lists how a tokenizer name is measured: [side, load, encode(tok, text) → ids, free].
function sides(name) {
  const out = []
  const file = join(TOKENIZERS, name, 'tokenizer.json')
  if (existsSync(file)) {
    out.push(['hf', () => Tokenizer.fromFile(file), async (t, s) => (await t.encode(s, null, { addSpecialTokens: false })).getIds(), () => {}])
  }
  if (TIKTOKEN[name]) out.push(['tiktoken', TIKTOKEN[name], (t, s) => t.encode_ordinary(s), (t) => t.free()])
  if (out.length === 0) throw new Error(`${name}: no ${file} and not a tiktoken encoding; run cold.sh, which fetches it`)
  return out
}

// settle collects garbage and lets the finalizers it queued run before a measurement: the
// binding frees a dropped tokenizer (hundreds of thousands of strings) in a finalizer that Node
// runs on the main thread at a later turn of the event loop, which would otherwise land inside
// the next timed encode (measured: 30-90 ms of CPU on 16 KB texts).
async function settle() {
  for (let i = 0; i < 3; i++) {
    global.gc()
    await new Promise((r) => setImmediate(r))
  }
}

for (const name of arg('tokenizers', '').split(',')) {
  for (const [side, load, encode, free] of sides(name)) {
    const warm = load()
    await encode(warm, readFileSync(resolve(HERE, '../../tokenize/testdata/long-64k.txt'), 'utf8'))
    free(warm)
    for (const group of groups) {
      const text = texts[group]
      const tok = load()
      await settle()
      const cpu0 = process.cpuUsage()
      const t0 = process.hrtime.bigint()
      const ids = await encode(tok, text)
      const ns = Number(process.hrtime.bigint() - t0)
      const cpu = process.cpuUsage(cpu0)
      free(tok)
      const bytes = Buffer.byteLength(text)
      console.log(JSON.stringify({ side, tokenizer: name, group, bytes, tokens: ids.length, ns, cpu_ns: (cpu.user + cpu.system) * 1000 }))
      if (idsDir) writeFileSync(join(idsDir, `${side}-${name}-${group}.ids`), Array.from(ids).join(' ') + '\n')
    }
  }
}
