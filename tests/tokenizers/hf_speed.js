// Hugging Face tokenizers' side of bench_speed.sh: tokens per second of
// tokenizer.encode(text) called once per document, as its users call it,
// and of encodeBatch over all documents; one line of JSON each.
// Usage: RAYON_NUM_THREADS=1 node hf_speed.js TOKENIZER_JSON DOCS.jsonl [MIN_SECONDS]
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function timed(minSeconds, pass) {
  await pass();  // one untimed pass
  const start = process.hrtime.bigint();
  let tokens = 0, seconds = 0;
  while (seconds < minSeconds) {
    tokens += await pass();
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
  }
  return { tokens, seconds, tokens_per_s: Math.round(tokens / seconds) };
}

async function main() {
  const [file, docsPath, min] = process.argv.slice(2);
  const minSeconds = Number(min || 2);
  const tokenizer = Tokenizer.fromFile(file);
  const docs = fs.readFileSync(docsPath, 'utf8').split('\n').filter((l) => l)
      .map((l) => JSON.parse(l).text);
  const perDoc = await timed(minSeconds, async () => {
    let n = 0;
    for (const doc of docs) n += (await tokenizer.encode(doc, null, { addSpecialTokens: false })).getIds().length;
    return n;
  });
  const batch = await timed(minSeconds, async () => {
    const all = await tokenizer.encodeBatch(docs, { addSpecialTokens: false });
    return all.reduce((n, e) => n + e.getIds().length, 0);
  });
  console.log(JSON.stringify({ encode: perDoc, encodeBatch: batch }));
}
main().catch((e) => { console.error(e); process.exit(1); });
