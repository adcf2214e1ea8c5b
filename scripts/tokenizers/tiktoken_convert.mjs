// tiktoken_convert.mjs: writes tiktoken rank files in the standard text format, one
// "<base64 of the token's bytes> <rank>" line per token in rank order, which is what
// OpenAI's *.tiktoken files and the tiktoken.model files of Llama 3 and Kimi K2 hold.
// fetch.sh calls it; the output is pinned by sha256 there.
//
//   node tiktoken_convert.mjs encoder IN.json OUT
//       IN is one of the npm tiktoken package's encoders/<name>.json, whose bpe_ranks field
//       is a compressed form: "! <first rank> <base64> <base64> ...", the tokens in rank
//       order from the first rank on (a new "!" group would restart the count after a gap).
//
//   node tiktoken_convert.mjs bytelevel IN/tokenizer.json OUT LIMIT
//       IN is a Hugging Face tokenizer.json converted from a tiktoken file (Llama 3's): every
//       vocabulary entry with an id below LIMIT is turned back from its GPT-2 byte-level
//       spelling into raw bytes, and its id is its rank.
import { readFileSync, writeFileSync } from 'node:fs'

function fromEncoder(file) {
  const { bpe_ranks: packed } = JSON.parse(readFileSync(file, 'utf8'))
  const words = packed.split(/\s+/).filter((w) => w !== '')
  const lines = []
  let rank = -1
  for (let i = 0; i < words.length; i++) {
    if (words[i] === '!') {
      rank = Number.parseInt(words[++i], 10)
      if (!Number.isInteger(rank) || rank < 0) throw new Error(`${file}: bad group start ${words[i]}`)
      continue
    }
    if (rank < 0) throw new Error(`${file}: token before the first "!" group`)
    lines.push(`${words[i]} ${rank++}`)
  }
  return lines
}

// byteDecoder inverts GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
// themselves, the others are shifted to U+0100 and up in byte order.
function byteDecoder() {
  const keep = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)
  const dec = new Map()
  let n = 0
  for (let b = 0; b < 256; b++) {
    dec.set(String.fromCodePoint(keep(b) ? b : 256 + n++), b)
  }
  return dec
}

function fromByteLevel(file, limit) {
  const { model } = JSON.parse(readFileSync(file, 'utf8'))
  const dec = byteDecoder()
  const byRank = []
  for (const [tok, id] of Object.entries(model.vocab)) {
    if (id >= limit) continue
    const bytes = [...tok].map((ch) => {
      const b = dec.get(ch)
      if (b === undefined) throw new Error(`${file}: token ${JSON.stringify(tok)} is not byte-level`)
      return b
    })
    if (byRank[id] !== undefined) throw new Error(`${file}: id ${id} twice`)
    byRank[id] = Buffer.from(bytes).toString('base64')
  }
  const lines = []
  for (let id = 0; id < limit; id++) {
    if (byRank[id] === undefined) throw new Error(`${file}: no token with id ${id}`)
    lines.push(`${byRank[id]} ${id}`)
  }
  return lines
}

const [mode, input, output, limit] = process.argv.slice(2)
let lines
if (mode === 'encoder') lines = fromEncoder(input)
else if (mode === 'bytelevel') lines = fromByteLevel(input, Number.parseInt(limit, 10))
else {
  console.error('usage: tiktoken_convert.mjs encoder IN.json OUT | bytelevel IN.json OUT LIMIT')
  process.exit(2)
}
writeFileSync(output, lines.join('\n') + '\n')
