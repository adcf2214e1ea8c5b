// golden.mjs: expected token ids for kvgate's tokenizer parity tests, from the reference.
//
// The reference is Hugging Face tokenizers itself, through its official Node binding (npm
// `tokenizers`, pinned in package.json / package-lock.json). For each of the eight tokenizers in
// tokenize/testdata/tokenizers/<name>/tokenizer.json (fetched by fetch.sh / `make testdata`), and
// for every string of tokenize/testdata/corpus.json plus the two long documents, it records:
//
//   with_special        encode(text, addSpecialTokens = true).ids
//   without_special     encode(text, addSpecialTokens = false).ids
//   decode              decode(with_special, skipSpecialTokens = false)
//   decode_skip_special decode(with_special, skipSpecialTokens = true)
//
// into tokenize/testdata/golden/<name>.json: one header line, then one case per line (compact, so
// a change shows up as a one-line diff). The tiktoken goldens (tiktoken-golden.mjs, reference: npm
// `tiktoken`) are written in the same run and format.
//
// Usage (from this directory, after `npm ci`; or `make golden` / `make golden-check` from the root):
//   node golden.mjs            regenerate tokenize/testdata/golden/*.json
//   node golden.mjs --check    regenerate into a temporary directory and compare with the committed
//                              files; exits 1 and names the differing cases if anything differs
//   node golden.mjs --out DIR  write the files into DIR instead
import { createHash } from 'node:crypto'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

import { Tokenizer } from 'tokenizers'

import { TIKTOKEN_NAMES, tiktokenGolden } from './tiktoken-golden.mjs'

const HERE = dirname(fileURLToPath(import.meta.url))
const ROOT = resolve(HERE, '../..')
const TESTDATA = join(ROOT, 'tokenize/testdata')
const GOLDEN = join(TESTDATA, 'golden')

export const NAMES = ['llama3', 'qwen3', 'deepseek_v3', 'llama2', 'gemma3', 'bert_uncased', 'albert', 'albert_cased']
export const LONG_DOCS = [
  ['long-4k', 'long-4k.txt'],
  ['long-64k', 'long-64k.txt'],
]

// The version actually loaded, read from the installed package (not from package.json), so the
// header cannot claim a version that did not run.
const require = createRequire(import.meta.url)
const VERSION = require('tokenizers/package.json').version
const REFERENCE = `tokenizers@${VERSION} (npm, Hugging Face tokenizers' Node binding)`

// tokenizerPath returns the path of <name>'s tokenizer.json, or exits with a hint.
export function tokenizerPath(name) {
  const p = join(TESTDATA, 'tokenizers', name, 'tokenizer.json')
  if (!existsSync(p)) {
    console.error(`golden: ${p} is missing; run \`make testdata\` first`)
    process.exit(2)
  }
  return p
}

// cases returns [name, text] for every corpus string ("corpus/<index>") and long document.
export function cases() {
  const corpus = JSON.parse(readFileSync(join(TESTDATA, 'corpus.json'), 'utf8'))
  if (!Array.isArray(corpus) || corpus.some((s) => typeof s !== 'string')) {
    throw new Error('corpus.json must be a JSON array of strings')
  }
  const out = corpus.map((s, i) => [`corpus/${i}`, s])
  for (const [name, file] of LONG_DOCS) out.push([name, readFileSync(join(TESTDATA, file), 'utf8')])
  return out
}

// golden renders one tokenizer's golden file as text.
async function golden(name) {
  const path = tokenizerPath(name)
  const tok = Tokenizer.fromFile(path)
  const sha = createHash('sha256').update(readFileSync(path)).digest('hex')
  const lines = []
  for (const [caseName, text] of cases()) {
    // encode(sentence, pair, options) resolves to an Encoding; the work runs off the JS thread.
    const withSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds()
    const withoutSpecial = (await tok.encode(text, null, { addSpecialTokens: false })).getIds()
    const decode = await tok.decode(withSpecial, false)
    const decodeSkip = await tok.decode(withSpecial, true)
    lines.push(
      JSON.stringify({
        name: caseName,
        text,
        with_special: withSpecial,
        without_special: withoutSpecial,
        decode,
        decode_skip_special: decodeSkip,
      }),
    )
  }
  const header = JSON.stringify({ tokenizer: name, reference: REFERENCE, tokenizer_json_sha256: sha }).slice(0, -1)
  return `${header},"cases":[\n${lines.join(',\n')}\n]}\n`
}

// diffCases names the cases that differ between two golden files' texts.
function diffCases(want, got) {
  const index = (text) => {
    try {
      return new Map(JSON.parse(text).cases.map((c) => [c.name, JSON.stringify(c)]))
    } catch {
      return new Map()
    }
  }
  const a = index(want)
  const b = index(got)
  const names = new Set([...a.keys(), ...b.keys()])
  return [...names].filter((n) => a.get(n) !== b.get(n))
}

async function main() {
  const args = process.argv.slice(2)
  const check = args.includes('--check')
  const outIdx = args.indexOf('--out')
  let out = outIdx >= 0 ? resolve(args[outIdx + 1] ?? '') : GOLDEN
  if (check) out = mkdtempSync(join(tmpdir(), 'kvgate-golden-'))
  mkdirSync(out, { recursive: true })

  let failed = false
  const jobs = [...NAMES.map((n) => [n, golden]), ...TIKTOKEN_NAMES.map((n) => [n, tiktokenGolden])]
  for (const [name, render] of jobs) {
    const t0 = process.hrtime.bigint()
    const text = await render(name)
    const file = join(out, `${name}.json`)
    writeFileSync(file, text)
    const ms = Number(process.hrtime.bigint() - t0) / 1e6
    if (!check) {
      console.log(`golden: ${file} (${(Buffer.byteLength(text) / 1024).toFixed(0)} KiB, ${ms.toFixed(0)} ms)`)
      continue
    }
    const committed = join(GOLDEN, `${name}.json`)
    const want = existsSync(committed) ? readFileSync(committed, 'utf8') : ''
    if (want === text) {
      console.log(`golden: ${name} matches ${committed}`)
    } else {
      failed = true
      const names = want ? diffCases(want, text) : ['(committed file missing)']
      console.error(`golden: ${name} DIFFERS from ${committed}: ${names.length} case(s): ${names.slice(0, 20).join(', ')}`)
    }
  }
  if (check) {
    rmSync(out, { recursive: true, force: true })
    if (failed) process.exit(1)
    console.log('golden: all golden files reproduce')
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main()
}
