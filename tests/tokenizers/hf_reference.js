// Hugging Face's own tokenizers (the npm binding) on a corpus: for each
// line {"text": ...} of the corpus, one line of
// {"special": ids, "plain": ids, "decoded": text} where special is
// encode(text) (add_special_tokens true), plain is add_special_tokens false
// and decoded is decode(special, skip_special_tokens=false).
// Usage: node hf_reference.js TOKENIZER_JSON CORPUS_JSONL
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [file, corpus] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(file);
  const lines = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l.trim());
  for (const line of lines) {
    const { text } = JSON.parse(line);
    const special = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
    const plain = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
    const decoded = await tokenizer.decode(special, false);
    process.stdout.write(JSON.stringify({ special, plain, decoded }) + '\n');
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
