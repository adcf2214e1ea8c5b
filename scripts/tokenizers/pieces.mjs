// pieces.mjs: the tokenizer.json parts bert.mjs and albert.mjs both write, in the
// reference's own serialization (key order included, so the output's sha256 is stable).

// specialToken is an added_tokens entry for a special token that is not normalized.
export function specialToken(id, content, { lstrip = false } = {}) {
  return { id, content, single_word: false, lstrip, rstrip: false, normalized: false, special: true }
}

// clsSepTemplate is the TemplateProcessing of BERT-style models: [CLS] $A [SEP] for one
// sequence, [CLS] $A [SEP] $B:1 [SEP]:1 for a pair.
export function clsSepTemplate(clsID, sepID) {
  return {
    type: 'TemplateProcessing',
    single: [
      { SpecialToken: { id: '[CLS]', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '[SEP]', type_id: 0 } },
    ],
    pair: [
      { SpecialToken: { id: '[CLS]', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } },
      { SpecialToken: { id: '[SEP]', type_id: 0 } },
      { Sequence: { id: 'B', type_id: 1 } },
      { SpecialToken: { id: '[SEP]', type_id: 1 } },
    ],
    special_tokens: {
      '[CLS]': { id: '[CLS]', ids: [clsID], tokens: ['[CLS]'] },
      '[SEP]': { id: '[SEP]', ids: [sepID], tokens: ['[SEP]'] },
    },
  }
}
