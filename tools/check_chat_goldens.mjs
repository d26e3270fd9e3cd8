// Renders the chat-template goldens' cases with @huggingface/jinja (the
// JavaScript port transformers.js uses) and lists every case where it
// differs from tests/golden/chat/expected/, which Python's Jinja2 wrote
// (tools/make_chat_goldens.py): Python is the reference, so this only
// reports where the two renderers part.
//
// Run from the repository root, with the package installed outside it:
//   npm install --prefix /tmp/jinjacheck @huggingface/jinja
//   NODE_PATH=/tmp/jinjacheck/node_modules node tools/check_chat_goldens.mjs
import fs from "fs";
import { createRequire } from "module";

const require = createRequire(process.env.NODE_PATH + "/");
const { Template } = require("@huggingface/jinja");
const dir = "tests/golden/chat";
const read = (path) => fs.readFileSync(`${dir}/${path}`, "utf8");
const templates = JSON.parse(read("templates.json"));
const conversations = JSON.parse(read("conversations.json"));

let differ = 0;
let cases = 0;
for (const tmpl of templates) {
  const template = new Template(read(`templates/${tmpl.name}.jinja`));
  for (const conversation of conversations) {
    // As make_chat_goldens.py: apply_chat_template's defaults, the tokens.
    const variables = { tools: null, documents: null, add_generation_prompt: false };
    for (const token of ["bos_token", "eos_token"]) {
      if (tmpl[token] !== null) variables[token] = tmpl[token];
    }
    Object.assign(variables, conversation.variables);
    const stem = `expected/${tmpl.name}.${conversation.name}`;
    let got;
    try {
      got = { text: template.render(variables) };
    } catch (e) {
      got = { error: String(e.message ?? e) };
    }
    const want = fs.existsSync(`${dir}/${stem}.txt`)
      ? { text: read(`${stem}.txt`) }
      : { error: read(`${stem}.error`) };
    cases++;
    const same = want.text !== undefined ? got.text === want.text : got.error !== undefined;
    if (same) continue;
    differ++;
    console.log(`${stem}:\n  python: ${JSON.stringify(want)}\n  js:     ${JSON.stringify(got)}`);
  }
}
console.log(`${differ} of ${cases} cases differ`);
