// attn serve through the official OpenAI client for Node, as an application
// would use it: chat and completions, streaming and not, stop strings,
// n > 1, usage, log-probabilities, the client's own error classes.
//
//   node openai_client.mjs BASE_URL API_KEY EXPECTED_TEXT_FILE
//
// EXPECTED_TEXT_FILE holds `attn generate --prompt "Once upon"
// --max-new-tokens 12` of the served model: the greedy completion must be it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, apiKey, expectedFile] = process.argv.slice(2);
const expected = readFileSync(expectedFile, "utf8").replace(/\n$/, "");
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const checks = [];
const check = (name, fn) => checks.push([name, fn]);

const models = await client.models.list();
const model = models.data[0].id;

async function joined(stream, pick) {
  let text = "";
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += pick(c) ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage };
}

check("greedy completion equals attn generate", async () => {
  const r = await client.completions.create({
    model, prompt: "Once upon", max_tokens: 12, temperature: 0,
  });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens,
               r.usage.prompt_tokens + r.usage.completion_tokens);
});

check("streamed completion joins to the same text, usage last", async () => {
  const stream = await client.completions.create({
    model, prompt: "Once upon", max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  const r = await joined(stream, (c) => c.text);
  assert.equal(r.text, expected);
  assert.equal(r.finish, "length");
  assert.equal(r.usage.completion_tokens, 12);
});

check("chat renders the template: same reply as its prompt", async () => {
  const messages = [{ role: "user", content: "Hi there" }];
  const chat = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0,
  });
  const rendered = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
  const plain = await client.completions.create({
    model, prompt: rendered, max_tokens: 10, temperature: 0,
  });
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.choices[0].message.role, "assistant");
  assert.equal(chat.choices[0].message.content, plain.choices[0].text);
  assert.equal(chat.usage.prompt_tokens, plain.usage.prompt_tokens);
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 10, temperature: 0, stream: true,
  });
  const streamed = await joined(stream, (c) => c.delta?.content);
  assert.equal(streamed.text, chat.choices[0].message.content);
  assert.equal(streamed.finish, chat.choices[0].finish_reason);
});

check("a stop string ends the reply and is never sent", async () => {
  const chars = [...expected];
  const stop = chars.slice(4, 7).join("");
  const want = expected.slice(0, expected.indexOf(stop));
  const r = await client.completions.create({
    model, prompt: "Once upon", max_tokens: 12, temperature: 0,
    stop: ["not in it", stop],
  });
  assert.equal(r.choices[0].text, want);
  assert.equal(r.choices[0].finish_reason, "stop");
  const stream = await client.completions.create({
    model, prompt: "Once upon", max_tokens: 12, temperature: 0, stop, stream: true,
  });
  const streamed = await joined(stream, (c) => c.text);
  assert.equal(streamed.text, want);
  assert.equal(streamed.finish, "stop");
});

check("n choices: seeded, reproducible, counted in usage", async () => {
  const ask = () => client.chat.completions.create({
    model, messages: [{ role: "user", content: "Pick" }], n: 3, seed: 42,
    temperature: 1, max_tokens: 6,
  });
  const a = await ask();
  const b = await ask();
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content),
                   b.choices.map((c) => c.message.content));
  assert.ok(a.usage.completion_tokens >= 3 && a.usage.completion_tokens <= 18);
});

check("log-probabilities per token", async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Odds" }], max_tokens: 5,
    temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy: the best
  }
});

check("errors arrive as the client's error classes", async () => {
  await assert.rejects(
    client.completions.create({ model, prompt: "x", temperature: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
           e.param === "temperature" && e.type === "invalid_request_error");
  await assert.rejects(
    client.completions.create({ model: "gpt-4o", prompt: "x" }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
  const stranger = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(
    stranger.models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}
console.log(`${checks.length - failed}/${checks.length} OpenAI client checks passed`);
process.exit(failed ? 1 : 0);
