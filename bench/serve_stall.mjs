// How long a long prompt stalls running streams: S streams decode (greedy,
// streamed) on an OpenAI-compatible server; once each has sent a few tokens,
// one request with a prompt of P token ids arrives. Prints one JSON line:
// the streams' median gap between tokens before it, their longest gap while
// it is prefilled, and its time to first token.
//
//   node bench/serve_stall.mjs --url http://127.0.0.1:8080 [--streams 8]
//        [--prompt-tokens 2048] [--vocab 1000]
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string" },
    streams: { type: "string", default: "8" },
    "prompt-tokens": { type: "string", default: "2048" },
    "stream-tokens": { type: "string", default: "400" },
    vocab: { type: "string", default: "1000" },
  },
});
const streams = Number(opt.streams);
const post = (body) => fetch(`${opt.url}/v1/completions`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify(body),
});

// Arrival times of each stream's text chunks.
const arrivals = Array.from({ length: streams }, () => []);
let stopAll = false;
async function decode(i) {
  const res = await post({ prompt: `Stream ${i} says`, max_tokens: Number(opt["stream-tokens"]),
                           temperature: 0, stream: true });
  const decoder = new TextDecoder();
  for await (const bytes of res.body) {
    const text = decoder.decode(bytes, { stream: true });
    const n = (text.match(/"text":"[^"]/g) ?? []).length;
    for (let k = 0; k < n; k++) arrivals[i].push(performance.now());
    if (stopAll) break;
  }
}
const running = Array.from({ length: streams }, (_, i) => decode(i));
while (arrivals.some((a) => a.length < 16)) await new Promise((r) => setTimeout(r, 10));

const ids = Array.from({ length: Number(opt["prompt-tokens"]) },
                       (_, k) => 1 + ((k * 7919) % (Number(opt.vocab) - 1)));
const sent = performance.now();
const res = await post({ prompt: ids, max_tokens: 1, temperature: 0 });
const body = await res.json();
const answered = performance.now();
await new Promise((r) => setTimeout(r, 200));
stopAll = true;
await Promise.allSettled(running);

const gaps = (a, from, to) => a.slice(1).map((t, k) => [a[k], t])
  .filter(([s, e]) => e > from && s < to).map(([s, e]) => e - s);
const before = arrivals.flatMap((a) => gaps(a, 0, sent)).sort((x, y) => x - y);
const during = arrivals.flatMap((a) => gaps(a, sent, answered));
console.log(JSON.stringify({
  streams, prompt_tokens: ids.length, status: res.status,
  usage: body.usage,
  median_gap_before_ms: Number(before[Math.floor(before.length / 2)].toFixed(1)),
  longest_gap_during_ms: Number(Math.max(...during).toFixed(1)),
  long_prompt_ttft_ms: Number((answered - sent).toFixed(1)),
}));
