// gentext.mjs: text no tokenizer has seen, for the cold comparison (cold.sh).
//
// Every run draws a new vocabulary per language from a seeded generator, so no word of one run's
// text is in a per-word cache of an earlier one, nor in the fixed documents the warm benchmarks
// use. Words are built from syllables (alphabetic scripts) or drawn from Unicode blocks (CJK);
// a document samples them with a Zipf-like law, as real text repeats its common words, and wraps
// them in the script's own punctuation, numbers, and paragraphs. Code and JSON take their
// identifiers, keys and strings from the same generated vocabulary.
//
// Usage: node gentext.mjs --out DIR [--seed N] [--kb 64] [--groups english,...]
//   --seed  uint32; default: a fresh one from the clock and crypto, printed, so a run repeats
//           with --seed N
//   --kb    size of each group's text in KiB (the text ends at a word boundary just past it)
// Writes DIR/<group>.txt (UTF-8) and DIR/seed; prints "seed N" to stdout.
import { randomInt } from 'node:crypto'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

// mulberry32: a small, fast, seedable 32-bit generator; quality is ample for text.
function rng(seed) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// Gen wraps the generator with the draws the languages need.
class Gen {
  constructor(seed) {
    this.r = rng(seed)
  }
  int(lo, hi) {
    return lo + Math.floor(this.r() * (hi - lo + 1))
  }
  pick(a) {
    return a[Math.floor(this.r() * a.length)]
  }
  chance(p) {
    return this.r() < p
  }
  // zipf draws an index in [0, n) with P(i) ∝ 1/(i+1): the head of the vocabulary recurs
  // (articles, particles), the tail appears once or twice, as in running text.
  zipf(n) {
    const h = Math.log(n + 1)
    return Math.min(n - 1, Math.floor(Math.exp(this.r() * h)) - 1)
  }
  // length draws a word length around mean (geometric tail, at least min).
  length(min, mean, max) {
    let n = min
    while (n < max && this.r() > 1 / (mean - min + 1)) n++
    return n
  }
}

// vocab builds n distinct words with make(), shortest first: the Zipf head, the words a text
// repeats most, is short, as a language's function words are.
function vocab(g, n, make) {
  const seen = new Set()
  const out = []
  for (let tries = 0; out.length < n && tries < n * 20; tries++) {
    const w = make(g)
    if (!seen.has(w)) {
      seen.add(w)
      out.push(w)
    }
  }
  return out.sort((a, b) => a.length - b.length)
}

// syllabic returns a word maker from onsets, vowels and codas: length in syllables.
function syllabic({ onsets, vowels, codas, min = 1, mean = 2, max = 6, codaP = 0.3 }) {
  return (g) => {
    let w = ''
    const n = g.length(min, mean, max)
    for (let i = 0; i < n; i++) {
      w += g.pick(onsets) + g.pick(vowels)
      if (g.chance(codaP)) w += g.pick(codas)
    }
    return w
  }
}

const cap = (w) => w.charAt(0).toUpperCase() + w.slice(1)
const range = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, i) => String.fromCodePoint(lo + i))

// prose writes sentences of words until bytes is reached. opts: space between words, sentence
// ends, inner punctuation, capitalize, number and quote rates, paragraph length.
function prose(g, words, bytes, o) {
  const sp = o.space ?? ' '
  let out = ''
  let para = 0
  while (Buffer.byteLength(out) < bytes) {
    const n = g.length(3, 12, 40)
    const parts = []
    for (let i = 0; i < n; i++) {
      let w = words[g.zipf(words.length)]
      if (i === 0 && o.capitalize) w = cap(w)
      else if (o.capitalize && g.chance(0.04)) w = cap(w) // names
      if (o.number && g.chance(o.number)) w = g.chance(0.5) ? String(g.int(0, 2100)) : `${g.int(1, 999)}${o.decimal ?? '.'}${g.int(0, 99)}`
      if (o.quote && g.chance(o.quote)) w = `${o.quotes[0]}${w}${o.quotes[1]}`
      if (o.elide && g.chance(o.elide.p)) w = g.pick(o.elide.forms) + w
      if (o.suffix && g.chance(o.suffix.p)) w += g.pick(o.suffix.forms)
      parts.push(w)
      if (i < n - 1 && g.chance(o.innerP ?? 0.08)) parts.push(g.pick(o.inner))
    }
    let s = ''
    for (const p of parts) {
      if (o.inner.includes(p)) s += p
      else s += (s === '' ? '' : sp) + p
    }
    out += s + g.pick(o.ends)
    if (++para >= g.int(3, 8)) {
      out += '\n\n'
      para = 0
    } else out += o.after ?? ' '
  }
  return out
}

const LANGS = {
  english(g, bytes) {
    const words = vocab(g, 3000, syllabic({
      onsets: ['', 'b', 'c', 'd', 'f', 'g', 'h', 'l', 'm', 'n', 'p', 'r', 's', 't', 'w', 'th', 'sh', 'ch', 'st', 'tr', 'pl', 'gr', 'br', 'wh'],
      vowels: ['a', 'e', 'i', 'o', 'u', 'ea', 'ou', 'ai', 'ee', 'oo', 'y'],
      codas: ['n', 'r', 't', 's', 'l', 'nd', 'ng', 'st', 'ck', 'th', 'rt', 'ght'],
      mean: 2, max: 5,
    }))
    return prose(g, words, bytes, {
      capitalize: true, number: 0.01, quote: 0.01, quotes: ['"', '"'],
      suffix: { p: 0.03, forms: ["'s", "n't", "'ll", "'re"] },
      inner: [',', ';', ':', ' -'], ends: ['.', '.', '.', '?', '!'],
    })
  },
  // German and French: accented Latin, German's long compounds and French elision.
  german_french(g, bytes) {
    const de = vocab(g, 1500, syllabic({
      onsets: ['', 'b', 'd', 'f', 'g', 'h', 'k', 'l', 'm', 'n', 'r', 's', 't', 'w', 'z', 'sch', 'st', 'pf', 'kr', 'gr', 'spr'],
      vowels: ['a', 'e', 'i', 'o', 'u', 'ä', 'ö', 'ü', 'ei', 'au', 'ie', 'eu', 'äu'],
      codas: ['n', 'r', 't', 'ß', 'ch', 'ng', 'tz', 'ck', 'lt', 'nd', 'rg', 'st'],
      mean: 3, max: 8, codaP: 0.45,
    }))
    const fr = vocab(g, 1500, syllabic({
      onsets: ['', 'b', 'c', 'd', 'f', 'g', 'j', 'l', 'm', 'n', 'p', 'qu', 'r', 's', 't', 'v', 'ch', 'pr', 'tr'],
      vowels: ['a', 'e', 'i', 'o', 'u', 'é', 'è', 'ê', 'à', 'â', 'î', 'ô', 'û', 'ou', 'oi', 'eau', 'ai', 'œu', 'ça'],
      codas: ['n', 'r', 's', 'x', 'nt', 'rs', 'ille', 'tion'],
      mean: 2, max: 5, codaP: 0.25,
    }))
    const half = Math.floor(bytes / 2)
    return prose(g, de, half, {
      capitalize: true, number: 0.01, decimal: ',', quote: 0.01, quotes: ['„', '“'],
      inner: [',', ';', ':', ' –'], ends: ['.', '.', '?', '!'],
    }) + '\n\n' + prose(g, fr, bytes - half, {
      capitalize: true, number: 0.01, decimal: ',', quote: 0.01, quotes: ['« ', ' »'],
      elide: { p: 0.06, forms: ["l'", "d'", "qu'", "n'", "j'", 'l’', 'd’'] },
      inner: [',', ' ;', ' :'], ends: ['.', '.', ' ?', ' !'],
    })
  },
  russian(g, bytes) {
    const words = vocab(g, 3000, syllabic({
      onsets: ['', 'б', 'в', 'г', 'д', 'ж', 'з', 'к', 'л', 'м', 'н', 'п', 'р', 'с', 'т', 'х', 'ц', 'ч', 'ш', 'щ', 'ст', 'пр', 'кр', 'вз'],
      vowels: ['а', 'е', 'и', 'о', 'у', 'ы', 'э', 'ю', 'я', 'ё'],
      codas: ['н', 'р', 'т', 'л', 'й', 'ь', 'ст', 'ск', 'вь', 'м'],
      mean: 3, max: 6,
    }))
    return prose(g, words, bytes, {
      capitalize: true, number: 0.01, decimal: ',', quote: 0.01, quotes: ['«', '»'],
      inner: [',', ';', ':', ' —'], ends: ['.', '.', '?', '!', '…'],
    })
  },
  // Arabic: consonant skeletons with long vowels, the article ال, and a few diacritics.
  arabic(g, bytes) {
    const cons = range(0x628, 0x63a).concat(range(0x641, 0x64a)).filter((c) => !'ةىا'.includes(c))
    const words = vocab(g, 3000, (g) => {
      let w = g.chance(0.25) ? 'ال' : ''
      const n = g.length(2, 4, 8)
      for (let i = 0; i < n; i++) {
        w += g.pick(cons)
        if (g.chance(0.3)) w += g.pick(['ا', 'و', 'ي'])
        if (g.chance(0.03)) w += g.pick(['\u064e', '\u064f', '\u0650', '\u0651', '\u0652'])
      }
      if (g.chance(0.15)) w += 'ة'
      return w
    })
    return prose(g, words, bytes, {
      number: 0.01, decimal: '٫', quote: 0.01, quotes: ['«', '»'],
      inner: ['،', '؛', ':'], ends: ['.', '.', '؟', '!'],
    })
  },
  // Chinese: words of 1-4 ideographs from a per-run set of 3,000 common-for-this-run characters of
  // the CJK Unified Ideographs block, no spaces, full-width punctuation.
  chinese(g, bytes) {
    const block = range(0x4e00, 0x9fff)
    const chars = vocab(g, 3000, (g) => g.pick(block))
    const words = vocab(g, 4000, (g) => {
      let w = ''
      for (let n = g.length(1, 2, 4); n > 0; n--) w += chars[g.zipf(chars.length)]
      return w
    })
    return prose(g, words, bytes, {
      space: '', number: 0.01, quote: 0.01, quotes: ['「', '」'],
      inner: ['，', '、', '；', '：'], innerP: 0.12, ends: ['。', '。', '？', '！'], after: '',
    })
  },
  // Japanese: kanji stems, hiragana particles and endings, katakana loanwords; no spaces.
  japanese(g, bytes) {
    const block = range(0x4e00, 0x9fff)
    const kanji = vocab(g, 2000, (g) => g.pick(block))
    const hira = range(0x3041, 0x3093)
    const kata = range(0x30a1, 0x30f3)
    const words = vocab(g, 4000, (g) => {
      if (g.chance(0.2)) {
        let w = ''
        for (let n = g.length(2, 4, 8); n > 0; n--) w += g.pick(kata)
        return g.chance(0.3) ? w + 'ー' : w
      }
      let w = ''
      for (let n = g.length(1, 2, 3); n > 0; n--) w += kanji[g.zipf(kanji.length)]
      for (let n = g.length(0, 1, 3); n > 0; n--) w += g.pick(hira)
      return w
    })
    const particles = ['は', 'が', 'を', 'に', 'で', 'と', 'の', 'も', 'から', 'まで', 'です', 'ました']
    const withParticles = words.map((w, i) => (i % 2 ? w + particles[i % particles.length] : w))
    return prose(g, withParticles, bytes, {
      space: '', number: 0.01, quote: 0.01, quotes: ['「', '」'],
      inner: ['、'], innerP: 0.15, ends: ['。', '。', '？'], after: '',
    })
  },
  // Source code: Go and Python in turn, identifiers from a generated English-like vocabulary.
  code(g, bytes) {
    const parts = vocab(g, 800, syllabic({
      onsets: ['', 'b', 'c', 'd', 'f', 'g', 'h', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v', 'w', 'st', 'tr', 'pr'],
      vowels: ['a', 'e', 'i', 'o', 'u', 'ea', 'ou'],
      codas: ['n', 'r', 't', 's', 'l', 'x', 'ck', 'nd'],
      mean: 2, max: 3,
    }))
    const part = () => parts[g.zipf(parts.length)]
    const camel = (exported) => {
      let s = ''
      for (let n = g.length(1, 2, 4); n > 0; n--) s += s === '' && !exported ? part() : cap(part())
      return s
    }
    const snake = () => Array.from({ length: g.length(1, 2, 4) }, part).join('_')
    const comment = () => Array.from({ length: g.length(3, 8, 16) }, part).join(' ')
    const num = () => (g.chance(0.2) ? `0x${g.int(0, 0xffff).toString(16)}` : String(g.int(0, 5000)))
    const goExpr = () => g.pick([
      () => `${camel()} ${g.pick(['+', '-', '*', '/', '%', '<<', '&', '|'])} ${num()}`,
      () => `${camel()}.${camel(true)}(${camel()}, ${num()})`,
      () => `len(${camel()})`,
      () => `"${comment()}"`,
      () => `fmt.Errorf("${part()} %s: %w", ${camel()}, err)`,
      () => `${camel()}[${g.chance(0.5) ? num() : camel()}]`,
    ])()
    const goFunc = () => {
      const args = Array.from({ length: g.int(0, 3) }, () => `${camel()} ${g.pick(['int', 'string', '[]byte', 'error', 'context.Context', `*${camel(true)}`, 'map[string]int'])}`)
      let s = `// ${camel(true)} ${comment()}.\nfunc ${g.chance(0.4) ? `(${part().charAt(0)} *${camel(true)}) ` : ''}${camel(g.chance(0.5))}(${args.join(', ')}) (${g.pick(['int', 'string', 'error', `*${camel(true)}, error`, 'bool'])}) {\n`
      for (let n = g.int(2, 10); n > 0; n--) {
        s += g.pick([
          () => `\t${camel()} := ${goExpr()}\n`,
          () => `\tif ${camel()} ${g.pick(['==', '!=', '<', '>='])} ${num()} {\n\t\treturn ${goExpr()}\n\t}\n`,
          () => `\tfor ${part().charAt(0)}, ${camel()} := range ${camel()} {\n\t\t${camel()} += ${goExpr()}\n\t}\n`,
          () => `\tif err != nil {\n\t\treturn nil, ${goExpr()}\n\t}\n`,
          () => `\t// ${comment()}\n`,
        ])()
      }
      return s + `\treturn ${goExpr()}\n}\n\n`
    }
    const pyExpr = () => g.pick([
      () => `${snake()} ${g.pick(['+', '-', '*', '//', '%', '**'])} ${num()}`,
      () => `self.${snake()}(${snake()}, ${snake()}=${num()})`,
      () => `[${snake()} for ${snake()} in ${snake()} if ${snake()}]`,
      () => `f"${part()} {${snake()}!r}: ${comment()}"`,
      () => `{'${snake()}': ${num()}, '${snake()}': ${snake()}}`,
      () => `len(${snake()}) > ${num()}`,
    ])()
    const pyFunc = () => {
      const ind = g.chance(0.5) ? '    ' : ''
      let s = `${ind}def ${snake()}(${ind ? 'self, ' : ''}${Array.from({ length: g.int(0, 3) }, snake).join(', ')}):\n${ind}    """${cap(comment())}."""\n`
      for (let n = g.int(2, 10); n > 0; n--) {
        s += g.pick([
          () => `${ind}    ${snake()} = ${pyExpr()}\n`,
          () => `${ind}    if ${snake()} ${g.pick(['==', 'is not', '<', 'in'])} ${g.pick([num, snake, () => 'None'])()}:\n${ind}        return ${pyExpr()}\n`,
          () => `${ind}    for ${snake()} in range(${num()}):\n${ind}        ${snake()}.append(${pyExpr()})\n`,
          () => `${ind}    # ${comment()}\n`,
        ])()
      }
      return s + `${ind}    return ${pyExpr()}\n\n`
    }
    let out = ''
    while (Buffer.byteLength(out) < bytes) out += g.chance(0.5) ? goFunc() : pyFunc()
    return out
  },
  // JSON: API-like records, pretty-printed (two-space indent) and minified in turn.
  json(g, bytes) {
    const keys = vocab(g, 400, syllabic({
      onsets: ['', 'b', 'c', 'd', 'f', 'g', 'h', 'k', 'l', 'm', 'n', 'p', 'r', 's', 't', 'v'],
      vowels: ['a', 'e', 'i', 'o', 'u'],
      codas: ['n', 'r', 't', 's', 'd'],
      mean: 2, max: 3,
    }))
    const key = () => {
      const k = keys[g.zipf(keys.length)]
      return g.chance(0.3) ? `${k}_${keys[g.zipf(keys.length)]}` : k
    }
    const value = (depth) => g.pick([
      () => g.int(0, 1e6),
      () => Number((g.r() * 1000).toFixed(g.int(1, 4))),
      () => g.chance(0.5),
      () => null,
      () => Array.from({ length: g.length(1, 3, 8) }, () => keys[g.zipf(keys.length)]).join(' '),
      () => `${g.int(2020, 2030)}-${String(g.int(1, 12)).padStart(2, '0')}-${String(g.int(1, 28)).padStart(2, '0')}T${String(g.int(0, 23)).padStart(2, '0')}:${String(g.int(0, 59)).padStart(2, '0')}:00Z`,
      () => Array.from({ length: 4 }, () => g.int(0, 0xffff).toString(16).padStart(4, '0')).join('-'),
      () => (depth < 3 ? Array.from({ length: g.int(0, 4) }, () => value(depth + 1)) : 0),
      () => (depth < 3 ? record(depth + 1) : ''),
    ])()
    const record = (depth) => {
      const o = {}
      for (let n = g.int(2, 7); n > 0; n--) o[key()] = value(depth)
      return o
    }
    let out = ''
    while (Buffer.byteLength(out) < bytes) {
      const recs = Array.from({ length: g.int(2, 6) }, () => record(0))
      out += JSON.stringify({ [key()]: recs }, null, g.chance(0.6) ? 2 : 0) + '\n'
    }
    return out
  },
}

export const GROUPS = Object.keys(LANGS)

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`)
  return i >= 0 ? process.argv[i + 1] : def
}

const out = arg('out')
if (!out) {
  console.error('usage: node gentext.mjs --out DIR [--seed N] [--kb 64] [--groups a,b]')
  process.exit(2)
}
const seed = arg('seed') === undefined ? randomInt(2 ** 32 - 1) : Number(arg('seed')) >>> 0
const kb = Number(arg('kb', '64'))
const groups = arg('groups', GROUPS.join(',')).split(',')
mkdirSync(out, { recursive: true })
for (const name of groups) {
  const make = LANGS[name]
  if (!make) {
    console.error(`gentext: unknown group ${name} (have ${GROUPS.join(', ')})`)
    process.exit(2)
  }
  // Each group has its own stream, derived from the run's seed and the group's name, so a group's
  // text is the same whichever other groups are asked for.
  let h = seed
  for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 0x9e3779b9) >>> 0
  const g = new Gen(h)
  writeFileSync(join(out, `${name}.txt`), make(g, kb * 1024))
}
writeFileSync(join(out, 'seed'), `${seed}\n`)
console.log(`seed ${seed}`)
