#!/usr/bin/env python3
"""Writes the chat-template goldens in tests/golden/chat/expected/.

Renders every template of tests/golden/chat/templates.json with every
conversation of conversations.json through Jinja2 set up exactly as
transformers' apply_chat_template does (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loop controls, the {% generation %} tag,
and its tojson, raise_exception and strftime_now), passing tools=None and
documents=None unless the conversation sets them, plus the template's
special tokens. jinja_test.cc renders the same and compares byte for byte.

Each case is TEMPLATE.CONVERSATION.txt (the output) or .error (the
exception: "raise_exception: MESSAGE" for the template's own, else
"TYPE: MESSAGE").

Run from the repository root (needs Jinja2 3.1, Debian's python3-jinja2):
    python3 tools/make_chat_goldens.py
tools/check_chat_goldens.mjs then compares @huggingface/jinja with them.
"""
import datetime
import json
import pathlib
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests/golden/chat"


class TemplateRaised(Exception):
    pass


class GenerationTag(Extension):
    """transformers' AssistantTracker: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def variables_for(template, conversation):
    """What apply_chat_template passes: defaults, the tokens, the case's."""
    variables = {"tools": None, "documents": None,
                 "add_generation_prompt": False}
    for token in ("bos_token", "eos_token"):
        if template.get(token) is not None:
            variables[token] = template[token]
    variables.update(conversation["variables"])
    return variables


def main():
    env = make_environment()
    templates = json.loads((ROOT / "templates.json").read_text())
    conversations = json.loads((ROOT / "conversations.json").read_text())
    out_dir = ROOT / "expected"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    for template in templates:
        source = (ROOT / "templates" / (template["name"] + ".jinja")).read_text()
        compiled = env.from_string(source)
        for conversation in conversations:
            stem = out_dir / (template["name"] + "." + conversation["name"])
            try:
                text = compiled.render(**variables_for(template, conversation))
                stem.with_suffix(stem.suffix + ".txt").write_bytes(
                    text.encode("utf-8"))
            except TemplateRaised as e:
                stem.with_suffix(stem.suffix + ".error").write_text(
                    "raise_exception: " + str(e))
            except Exception as e:  # the template's own failure is a golden
                stem.with_suffix(stem.suffix + ".error").write_text(
                    type(e).__name__ + ": " + str(e))
    print(f"wrote {len(list(out_dir.iterdir()))} cases to {out_dir}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
