// A bounded load test of an OpenAI-compatible server: C clients send R
// completions of mixed prompt and reply lengths in all, three in four
// streamed. Every request must end in a reply or a documented error within
// --deadline seconds (a hang is a failure). Prints one JSON report:
// requests/s, generated tokens/s, p50/p99 time to first token and time per
// output token (streamed requests), and the outcomes counted.
//
//   node load.mjs --url http://127.0.0.1:8080 [--clients 64] [--requests 2000]
//                 [--key KEY] [--seed 1] [--max-tokens 48] [--prompt-words 60]
//                 [--deadline 60] [--tolerate N] [--fixed] [--stream SHARE]
//
// --fixed: every request the same prompt of --prompt-words words and
// --max-tokens greedy tokens, streamed (the side-by-side benchmark of
// bench/README.md drives attn serve and llama-server with it).
//
// Outcomes: "ok"; "http_429", "http_503" (documented, retry later);
// "http_502" (a balancer's: the replica died), "cut" (a stream that ended
// before [DONE] or with an error event) and "network": lost in flight, at
// most --tolerate of them (0 by default); anything else fails the run.
import { parseArgs } from "node:util";

const { values: opt } = parseArgs({
  options: {
    url: { type: "string" },
    clients: { type: "string", default: "64" },
    requests: { type: "string", default: "2000" },
    key: { type: "string", default: "" },
    seed: { type: "string", default: "1" },
    "max-tokens": { type: "string", default: "48" },
    "prompt-words": { type: "string", default: "60" },
    deadline: { type: "string", default: "60" },
    tolerate: { type: "string", default: "0" },
    stream: { type: "string", default: "0.75" },
    fixed: { type: "boolean", default: false },
  },
});
const total = Number(opt.requests);
const clients = Number(opt.clients);
const maxTokens = Number(opt["max-tokens"]);
const promptWords = Number(opt["prompt-words"]);
const streamShare = Number(opt.stream);

let state = Number(opt.seed) >>> 0 || 1;
const random = () => {  // xorshift32: the same mix for the same seed
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 4294967296;
};
const words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "ran",
               "far", "away", "from", "home", "über", "naïve", "日本"];
const sentence = (n) => Array.from({ length: n },
                                    () => words[Math.floor(random() * words.length)]).join(" ");
const fixedPrompt = sentence(promptWords);
const plan = Array.from({ length: total }, () => opt.fixed
  ? { prompt: fixedPrompt, max_tokens: maxTokens, stream: true, temperature: 0 }
  : { prompt: sentence(1 + Math.floor(random() * promptWords)),
      max_tokens: 1 + Math.floor(random() * maxTokens),
      stream: random() < streamShare, temperature: 0.8 });

const headers = { "Content-Type": "application/json" };
if (opt.key) headers.Authorization = `Bearer ${opt.key}`;
const outcomes = {};
const firstToken = [];
const perToken = [];
let generated = 0;
const count = (o) => { outcomes[o] = (outcomes[o] ?? 0) + 1; };

async function one(p) {
  const start = performance.now();
  const res = await fetch(`${opt.url}/v1/completions`, {
    method: "POST", headers,
    body: JSON.stringify({ prompt: p.prompt, max_tokens: p.max_tokens,
                           temperature: p.temperature, stream: p.stream,
                           ...(p.stream ? { stream_options: { include_usage: true } } : {}) }),
    signal: AbortSignal.timeout(Number(opt.deadline) * 1000),
  });
  if (res.status !== 200) {
    await res.text();
    return count(`http_${res.status}`);
  }
  if (!p.stream) {
    const body = await res.json();
    generated += body.usage.completion_tokens;
    return count("ok");
  }
  const decoder = new TextDecoder();
  let buffer = "";
  let first = 0, last = 0, tokens = 0, chunks = 0, done = false, failed = false;
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") { done = true; continue; }
      const chunk = JSON.parse(data);
      if (chunk.error) { failed = true; continue; }
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (chunk.choices?.length && chunk.choices[0].text) {
        ++chunks;
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
  if (!done || failed) return count("cut");
  tokens ||= chunks;  // a server that sends no usage: a chunk a token
  generated += tokens;
  if (first) firstToken.push(first - start);
  if (tokens > 1) perToken.push((last - first) / (tokens - 1));
  count("ok");
}

const started = performance.now();
let next = 0;
await Promise.all(Array.from({ length: clients }, async () => {
  while (next < total) {
    const p = plan[next++];
    try {
      await one(p);
    } catch (e) {
      count(e.name === "TimeoutError" ? "hang" : "network");
    }
  }
}));
const seconds = (performance.now() - started) / 1000;
const pct = (xs, q) => {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return Number(s[Math.min(s.length - 1, Math.floor(q * s.length))].toFixed(2));
};
const documented = new Set(["ok", "http_429", "http_503"]);
const lost = new Set(["http_502", "cut", "network"]);
let lostCount = 0, bad = 0;
for (const [o, n] of Object.entries(outcomes)) {
  if (lost.has(o)) lostCount += n;
  else if (!documented.has(o)) bad += n;
}
const report = {
  clients, requests: total, seconds: Number(seconds.toFixed(2)),
  requests_per_s: Number((total / seconds).toFixed(1)),
  generated_tokens_per_s: Number((generated / seconds).toFixed(1)),
  ttft_ms: { p50: pct(firstToken, 0.5), p99: pct(firstToken, 0.99) },
  per_token_ms: { p50: pct(perToken, 0.5), p99: pct(perToken, 0.99) },
  outcomes,
};
console.log(JSON.stringify(report));
if (bad || lostCount > Number(opt.tolerate)) {
  console.error(`load: ${bad} undocumented outcomes, ${lostCount} lost in ` +
                `flight (tolerated ${opt.tolerate})`);
  process.exit(1);
}
