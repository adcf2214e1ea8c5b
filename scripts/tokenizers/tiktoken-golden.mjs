// tiktoken-golden.mjs: golden files for kvgate's tiktoken tokenizers (tokenize/tiktoken.go).
//
// The reference is OpenAI's tiktoken core through npm `tiktoken` (dqbd's WASM build of the same
// Rust code the Python package runs; pinned in package.json / package-lock.json). golden.mjs
// imports tiktokenGolden and writes one file per entry of TIKTOKEN_NAMES next to the five Hugging
// Face goldens, so `make golden` and `make golden-check` cover both.
//
// Each tokenizer is built the way kvgate's loader builds it, from the files fetch.sh puts in
// tokenize/testdata/tokenizers/<name>/:
//
//   cl100k_base, o200k_base   <name>.tiktoken with the special tokens and pattern tiktoken
//                             registers for that encoding name (its encoders/<name>.json)
//   llama3_tiktoken           a tiktoken.model directory: the special tokens are
//                             tokenizer_config.json's added_tokens_decoder (ids from the number
//                             of ranks up to 256 more without an entry are named
//                             <|reserved_token_ID|>, as Kimi K2's tokenization_kimi.py does), and
//                             the pattern is DEFAULT_PATTERN (Meta's Llama 3 tokenizer.py,
//                             transformers' TikTokenConverter), or KIMI_PATTERN when
//                             auto_map names tokenization_kimi
//
// Fields (the golden format of golden.mjs; tiktoken has no post-processor adding BOS/EOS):
//
//   with_special        encode(text, allowed_special = "all"): special-token text is a token
//   without_special     encode_ordinary(text): special-token text is ordinary text
//   decode              decode(with_special), bytes to text as TextDecoder does (U+FFFD for
//                       each maximal invalid subpart)
//   decode_skip_special decode(with_special without the special tokens' ids)
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

import { Tiktoken } from 'tiktoken'

import { cases } from './golden.mjs'

const HERE = dirname(fileURLToPath(import.meta.url))
const TOKENIZERS = join(resolve(HERE, '../..'), 'tokenize/testdata/tokenizers')

export const TIKTOKEN_NAMES = ['cl100k_base', 'o200k_base', 'llama3_tiktoken', 'kimi_layout']

const require = createRequire(import.meta.url)
// The version actually loaded; the package does not export its package.json, so it is read
// from beside the resolved entry point.
const VERSION = JSON.parse(readFileSync(join(dirname(require.resolve('tiktoken')), 'package.json'), 'utf8')).version
const REFERENCE = `tiktoken@${VERSION} (npm, WASM build of OpenAI's tiktoken)`

// The pattern of cl100k_base, which Meta's Llama 3 tokenizer.py and transformers'
// TikTokenConverter use for a tiktoken.model that names none.
export const DEFAULT_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

// Kimi K2's pat_str (tokenization_kimi.py).
export const KIMI_PATTERN = [
  '[\\p{Han}]+',
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  '\\p{N}{1,3}',
  ' ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*',
  '\\s*[\\r\\n]+',
  '\\s+(?!\\S)',
  '\\s+',
].join('|')

const RESERVED_SPECIAL_TOKENS = 256

function need(path) {
  if (!existsSync(path)) {
    console.error(`golden: ${path} is missing; run \`make testdata\` first`)
    process.exit(2)
  }
  return path
}

// spec returns the rank file's path, the special tokens and the pattern of one tokenizer.
function spec(name) {
  const dir = join(TOKENIZERS, name)
  const single = join(dir, `${name}.tiktoken`)
  if (existsSync(single)) {
    const enc = require(`tiktoken/encoders/${name}.json`)
    return { ranks: single, special: enc.special_tokens, pattern: enc.pat_str }
  }
  const ranks = need(join(dir, 'tiktoken.model'))
  const config = JSON.parse(readFileSync(need(join(dir, 'tokenizer_config.json')), 'utf8'))
  const nRanks = readFileSync(ranks, 'utf8').split('\n').filter((l) => l.trim() !== '').length
  const special = {}
  for (const [id, tok] of Object.entries(config.added_tokens_decoder ?? {})) special[tok.content] = Number(id)
  const taken = new Set(Object.values(special))
  for (let id = nRanks; id < nRanks + RESERVED_SPECIAL_TOKENS; id++) {
    if (!taken.has(id)) special[`<|reserved_token_${id}|>`] = id
  }
  const kimi = JSON.stringify(config.auto_map ?? {}).includes('tokenization_kimi')
  return { ranks, special, pattern: kimi ? KIMI_PATTERN : DEFAULT_PATTERN }
}

// tiktokenGolden renders one tokenizer's golden file as text.
export async function tiktokenGolden(name) {
  const { ranks, special, pattern } = spec(name)
  const rankText = readFileSync(ranks)
  const enc = new Tiktoken(rankText.toString('utf8'), special, pattern)
  const specialIDs = new Set(Object.values(special))
  // ignoreBOM keeps a leading U+FEFF, as Python's bytes.decode does; TextDecoder would drop it.
  const utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true })
  const decode = (ids) => utf8.decode(enc.decode(Uint32Array.from(ids)))
  const lines = []
  try {
    for (const [caseName, text] of cases()) {
      const withSpecial = [...enc.encode(text, 'all')]
      const withoutSpecial = [...enc.encode_ordinary(text)]
      lines.push(
        JSON.stringify({
          name: caseName,
          text,
          with_special: withSpecial,
          without_special: withoutSpecial,
          decode: decode(withSpecial),
          decode_skip_special: decode(withSpecial.filter((id) => !specialIDs.has(id))),
        }),
      )
    }
  } finally {
    enc.free()
  }
  const sha = createHash('sha256').update(rankText).digest('hex')
  const header = JSON.stringify({ tokenizer: name, reference: REFERENCE, ranks_sha256: sha, pattern }).slice(0, -1)
  return `${header},"cases":[\n${lines.join(',\n')}\n]}\n`
}
