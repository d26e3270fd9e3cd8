// Chat templates (engine/tokenizer/jinja.h): real model templates against
// the outputs of transformers' own Jinja2 setup (tests/golden/chat, written
// by tools/make_chat_goldens.py), byte for byte; then each construct, the
// whitespace rules, Python's printing, and the refusals and limits.
#include "engine/tokenizer/jinja.h"

#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace attn::tokenizer {
namespace {

using Json = nlohmann::ordered_json;

const std::string kChatDir =
    std::string(ATTN_SOURCE_DIR) + "/tests/golden/chat";

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *text = buffer.str();
  return true;
}

Json ReadJson(const std::string& path) {
  std::string text;
  EXPECT_TRUE(ReadFile(path, &text)) << path;
  return Json::parse(text);
}

// ---------------------------------------------------------------------------
// Real templates against transformers' renderer.

// The variables make_chat_goldens.py passes: the template's tokens, then the
// conversation's own.
Json VariablesFor(const Json& tmpl, const Json& conversation) {
  Json variables = Json::object();
  for (const char* token : {"bos_token", "eos_token"}) {
    if (!tmpl[token].is_null()) variables[token] = tmpl[token];
  }
  for (const auto& [key, value] : conversation["variables"].items()) {
    variables[key] = value;
  }
  return variables;
}

TEST(ChatTemplateGoldenTest, EveryTemplateAndConversationMatchesJinja2) {
  const Json templates = ReadJson(kChatDir + "/templates.json");
  const Json conversations = ReadJson(kChatDir + "/conversations.json");
  ASSERT_GE(templates.size(), 20u);
  int outputs = 0;
  int errors = 0;
  for (const Json& tmpl : templates) {
    const std::string name = tmpl["name"].get<std::string>();
    std::string source;
    ASSERT_TRUE(ReadFile(kChatDir + "/templates/" + name + ".jinja", &source));
    for (const Json& conversation : conversations) {
      const std::string stem = kChatDir + "/expected/" + name + "." +
                               conversation["name"].get<std::string>();
      SCOPED_TRACE(stem);
      const auto rendered =
          RenderChatTemplate(source, VariablesFor(tmpl, conversation));
      std::string expected;
      if (ReadFile(stem + ".txt", &expected)) {
        ++outputs;
        ASSERT_TRUE(rendered.ok()) << rendered.status().message();
        EXPECT_EQ(*rendered, expected);
        continue;
      }
      ASSERT_TRUE(ReadFile(stem + ".error", &expected)) << "no golden";
      ++errors;
      ASSERT_FALSE(rendered.ok()) << *rendered;
      const std::string& message = rendered.status().message();
      EXPECT_EQ(message.find('\n'), std::string::npos);
      if (expected.rfind("raise_exception: ", 0) == 0) {
        EXPECT_EQ(message.substr(message.size() -
                                 std::min(message.size(), expected.size())),
                  expected);
      }
    }
  }
  EXPECT_GE(outputs, 140);  // every case has a golden, as listed
  EXPECT_GE(errors, 30);
}

// The chat-template fuzzer's seeds render, as the fuzzer checks its inputs.
TEST(ChatTemplateGoldenTest, FuzzSeedsRenderOrAreRefusedInOneLine) {
  const Json conversations = ReadJson(kChatDir + "/conversations.json");
  const std::string seeds =
      std::string(ATTN_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_chat_template/";
  for (const char* name : {"llama3.1", "qwen3", "gemma3", "mistral-v0.3"}) {
    std::string source;
    ASSERT_TRUE(ReadFile(seeds + name, &source)) << name;
    Json variables = conversations[1]["variables"];
    variables["bos_token"] = "<s>";
    variables["eos_token"] = "</s>";
    const auto rendered = RenderChatTemplate(source, variables);
    EXPECT_TRUE(rendered.ok()) << name << ": " << rendered.status().message();
  }
}

// ---------------------------------------------------------------------------
// Each construct, against what Jinja2 3.1 prints (set up as the goldens).

Json Variables() {
  return Json::parse(R"({
    "messages": [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": "yo"}],
    "d": {"b": 1, "a": [1, 2.5, null, true, "x'y"]},
    "s": "  Hello World  "})");
}

std::string Render(const std::string& source, const Json& variables = {}) {
  const auto rendered = RenderChatTemplate(
      source, variables.is_null() ? Json::object() : variables);
  EXPECT_TRUE(rendered.ok()) << source << ": " << rendered.status().message();
  return rendered.ok() ? *rendered : "";
}

std::string RenderError(const std::string& source,
                        const ChatTemplateLimits& limits = {}) {
  const auto rendered = RenderChatTemplate(source, Variables(), limits);
  EXPECT_FALSE(rendered.ok()) << source << " gave " << *rendered;
  if (rendered.ok()) return "";
  EXPECT_EQ(rendered.status().message().find('\n'), std::string::npos);
  return rendered.status().message();
}

struct Case {
  const char* source;
  const char* expected;
};

// Every expectation is Jinja2's output for the same source and Variables().
const Case kCases[] = {
    {R"j({{ 'a\tb\n\x41\u00e9' }})j",
     R"j(a	b
Aé)j"},
    {R"j({{ "it's" }}|{{ 'say "hi"' }})j", R"j(it's|say "hi")j"},
    {R"j({{ 42 }}|{{ 1_000 }}|{{ 2.50 }}|{{ 1e3 }}|{{ 0.1 + 0.2 }}|{{ 1e-5 }}|{{ 1/3 }})j",
     R"j(42|1000|2.5|1000.0|0.30000000000000004|1e-05|0.3333333333333333)j"},
    {R"j({{ none }}|{{ true }}|{{ False }}|{{ undefined_name }}|)j",
     R"j(None|True|False||)j"},
    {R"j({{ [1, 'a', none, true, 1.5] }}|{{ (1,) }}|{{ ('a', 2) }}|{{ {'k': "it's", 'n': [none]} }})j",
     R"j([1, 'a', None, True, 1.5]|(1,)|('a', 2)|{'k': "it's", 'n': [None]})j"},
    {R"j({{ d }}|{{ d.a }}|{{ d['b'] }}|{{ d.missing }}|{{ d.a[1] }}|{{ d.a[-1] }}|{{ d.a[9] }})j",
     R"j({'b': 1, 'a': [1, 2.5, None, True, "x'y"]}|[1, 2.5, None, True, "x'y"]|1||2.5|x'y|)j"},
    {R"j({{ ['\xa0é\u200b\n', '\\'] }})j", R"j(['\xa0é\u200b\n', '\\'])j"},
    {R"j({{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 3 * 'ab' }} {{ [1] * 3 }} {{ 1 + 2.0 }} {{ true + 1 }})j",
     R"j(3 -4 2 -2 3.5 1024 0.5 ababab [1, 1, 1] 3.0 2)j"},
    {R"j({{ 'a' ~ 1 ~ none ~ [1] }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ -(3) }}|{{ +2 }})j",
     R"j(a1None[1]|ab|[1, 2]|-3|2)j"},
    {R"j({{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 'a' != 'a' }} {{ {'a': 1} == {'a': 1} }} {{ (1, 2) == [1, 2] }})j",
     R"j(True True True True True False True False)j"},
    {R"j({{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'b' in d }} {{ 'z' not in d }} {{ 'x' in undefined_name }})j",
     R"j(True True True True False)j"},
    {R"j({{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ not [] }}|{{ none or [] }}|{{ 'a' if false }}|{{ 'a' if 0 else 'b' }})j",
     R"j(x|y|True|[]||b)j"},
    {R"j({{ -2 ** 2 }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 'a' ~ 1 * 2 }}|{{ not 1 == 2 }}|{{ 2 ** 3 ** 2 }})j",
     R"j(4|5.0|a2|True|64)j"},
    {R"j({{ messages[1:] }}|{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3][-2:] }}|{{ 'héllo'[1] }}|{{ [1,2,3][5:] }})j",
     R"j([{'role': 'assistant', 'content': 'yo'}]|el|olleh|[1, 3, 5]|[2, 3]|é|[])j"},
    {R"j({% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %})j",
     R"j(c)j"},
    {R"j({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}:{{ m.role }};{% endfor %})j",
     R"j(1021TrueFalse2:user;2110FalseTrue2:assistant;)j"},
    {R"j({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %})j",
     R"j(b=1;a=[1, 2.5, None, True, "x'y"];|ba|[h][é])j"},
    {R"j({% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %})j",
     R"j(empty|2/2 4/2 )j"},
    {R"j({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})j",
     R"j(0134)j"},
    {R"j({% for x in range(3) %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}|{{ range(5, 0, -2)|list }})j",
     R"j(-1,0-2,1-,|[5, 3, 1])j"},
    {R"j({% set x = 0 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}{{ x }})j",
     R"j([0][0]0)j"},
    {R"j({% set ns = namespace(count=0, seen=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% endfor %}{{ ns.count }})j",
     R"j(3)j"},
    {R"j({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t }})j",
     R"j(12(3, 4))j"},
    {R"j({% set block %}  x {{ 1 + 1 }}
{% endset %}[{{ block }}])j",
     R"j([  x 2
])j"},
    {R"j({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }} {{ greet(name='Cy') }})j",
     R"j(Hi Bob! Hi Al? Hi Cy!)j"},
    {R"j({# comment #}a{#- trimmed -#}   b{% raw %}{{ not }}{% if %}{% endraw %}c)j",
     R"j(ab{{ not }}{% if %}c)j"},
    {R"j({% generation %}gen{% endgeneration %})j", R"j(gen)j"},
    {R"j(<ul>
  {% for x in [1, 2] %}
    <li>{{ x }}</li>
  {% endfor %}
</ul>
)j",
     R"j(<ul>
    <li>1</li>
    <li>2</li>
</ul>)j"},
    {R"j(a  {%- if true -%}  b  {%- endif -%}  c
{{- ' d ' -}}
 e)j",
     R"j(abc d e)j"},
    {R"j(a
  {%+ if true %}b{% endif %}
  {#- c #}
{{ 'x' }}  
  {% if true +%}
y{% endif %})j",
     R"j(a
  bx  

y)j"},
    {R"j({{ s|trim }}|{{ s|length }}|{{ s|upper }}|{{ s|lower }}|{{ 'hello wORLD-foo (bar'|title }}|{{ "they're"|title }}|{{ 'hELLO'|capitalize }})j",
     R"j(Hello World|15|  HELLO WORLD  |  hello world  |Hello World-Foo (Bar|They're|Hello)j"},
    {R"j({{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ x|d('e') }}|{{ 0|default(5, boolean=true) }})j",
     R"j(d|None|d|e|5)j"},
    {R"j({{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é"\n'|tojson }}|{{ [1.0, 1e20, -0.0]|tojson }}|{{ {}|tojson(indent=2) }})j",
     R"j({"b": 1, "a": [1, 2.5, null, true, "x'y"]}|{
  "b": 1,
  "a": [
    1,
    2.5,
    null,
    true,
    "x'y"
  ]
}|"é\"\n"|[1.0, 1e+20, -0.0]|{})j"},
    {R"j({{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ 'é😀\x7f'|tojson(ensure_ascii=true) }}|{{ [1, {'k': []}]|tojson(indent=0) }})j",
     R"j({"b":1,"a":[1,2.5,null,true,"x'y"]}|{"a": [1, 2.5, null, true, "x'y"], "b": 1}|"\u00e9\ud83d\ude00\u007f"|[
1,
{
"k": []
}
])j"},
    {R"j({{ d|tojson(true, 1, none, true) }})j",
     R"j({
 "a": [
  1,
  2.5,
  null,
  true,
  "x'y"
 ],
 "b": 1
})j"},
    {R"j({{ 3|string }}{{ none|string }}|{{ '42'|int + 1 }}|{{ ' 7 '|int }}|{{ 'x'|int }}|{{ 3.9|int }}|{{ '2.5'|int }}|{{ '2.5'|float }}|{{ 2|float }})j",
     R"j(3None|43|7|0|3|2|2.5|2.0)j"},
    {R"j({{ 'ab'|list }}|{{ d|list }}|{{ [1, 'a']|join(', ') }}|{{ messages|join(',', attribute='role') }}|{{ [3, 1]|first }}{{ [3, 1]|last }}|{{ 'abc'|reverse }}|{{ [1, 2]|reverse|list }})j",
     R"j(['a', 'b']|['b', 'a']|1, a|user,assistant|31|cba|[2, 1])j"},
    {R"j({{ 'aXbX'|replace('X', '-') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ d|items|list }}|{{ [1, 2, 1, 'A', 'a']|unique|list }}|{{ 'abc'|count }})j",
     R"j(a-b-|bba|[('b', 1), ('a', [1, 2.5, None, True, "x'y"])]|[1, 2, 'A']|3)j"},
    {R"j({{ messages|selectattr('role', 'equalto', 'user')|list }}|{{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|list }}|{{ [0, 1, 2]|select|list }}|{{ [1, 2, 3]|reject('odd')|list }}|{{ ['a', 'B']|map('upper')|join }})j",
     R"j([{'role': 'user', 'content': 'hi'}]|['yo']|[1, 2]|[2]|AB)j"},
    {R"j({{ [{'a': {'b': 1}}, {}]|map(attribute='a.b', default='n')|list }}|{{ [{'a': 0}, {'a': 2}, {}]|selectattr('a')|list }})j",
     R"j([1, 'n']|[{'a': 2}])j"},
    // Filters such as map and select return generators, as in
    // Jinja2:
    // always true, one pass; dict views and ranges print as
    // Python's.
    {R"j({{ 'y' if messages|selectattr('role', 'equalto', 'system') else 'n' }})j",
     R"j(y)j"},
    {R"j({% set g = messages|map(attribute='role') %}{{ g|join(',') }}|{{ g|join(',') }}|{{ g|list }})j",
     R"j(user,assistant||[])j"},
    {R"j({% set g = messages|map(attribute='role') %}{{ g|first }}|{{ g|list }})j",
     R"j(user|['assistant'])j"},
    {R"j({{ 'y' if [] else 'n' }}{{ 'y' if []|reverse else 'n' }}{{ 'y' if {}.items() else 'n' }}{{ 'y' if range(0) else 'n' }})j",
     R"j(nynn)j"},
    {R"j({{ d.items() }}|{{ range(3) }}|{{ range(5, 0, -2) }}|{{ range(5)[1] }}|{{ d.keys()[0] }}|{{ (messages|map(attribute='role'))[0] }})j",
     R"j(dict_items([('b', 1), ('a', [1, 2.5, None, True, "x'y"])])|range(0, 3)|range(5, 0, -2)|1||)j"},
    {R"j({{ 'user' in messages|map(attribute='role') }}|{{ d.items()|last }}|{{ messages|selectattr('role') is sequence }}|{{ d.items() is sequence }}|{{ range(2) is sequence }}|{{ messages|selectattr('role') is iterable }})j",
     R"j(True|('a', [1, 2.5, None, True, "x'y"])|False|False|True|True)j"},
    {R"j({{ range(2) == range(2) }}|{{ d|dictsort }}|{{ {'b': 'Y', 'a': 'x'}|dictsort(by='value', reverse=true) }})j",
     R"j(True|[('a', [1, 2.5, None, True, "x'y"]), ('b', 1)]|[('b', 'Y'), ('a', 'x')])j"},
    {R"j({{ none|selectattr('type')|list }}{{ none|map('upper')|list }}{{ 0|reject|list }})j",
     R"j([][][])j"},
    {R"j({{ 3.0 is even }}|{{ 4.0 is even }}|{{ -3 is odd }}|{{ 7.5 is divisibleby 2.5 }}|{{ true is odd }}|{{ [1, 'x'] is lower }}|{{ 1 is upper }})j", R"j(False|True|True|True|True|True|False)j"},
    {R"j({{ 'héllo wörld ß'|upper }}|{{ 'ÉCOLE Жук'|lower }}|{{ 'éa ßx'.title() }}|{{ 'ébc DÉF'|capitalize }}|{{ 'ñu-éa (ö'|title }}|{{ ' Hé ' is upper }}|{{ 'é' is lower }})j",
     R"j(HÉLLO WÖRLD SS|école жук|Éa Ssx|Ébc déf|Ñu-Éa (Ö|False|True)j"},
    // |safe makes Markup, and Markup + str escapes the str.
    {R"j({{ ("<a>"|safe) ~ "<b>" }}|{{ "x"|safe + "<b>'&" }}|{{ "<b>" + "x"|safe }}|{{ (" <x> "|safe|trim) + "<" }}|{{ ("a"|safe).upper() + "<" }})j",
     R"j(<a><b>|x&lt;b&gt;&#39;&amp;|&lt;b&gt;x|<x>&lt;|A&lt;)j"},
    {R"j({{ ("a"|safe) * 2 + "<" }}|{{ ("a"|safe)|replace("a", "<") + "<" }}|{{ ("ab"|safe)[0] + "<" }}|{{ 1|safe + "<" }}|{{ ("a"|safe) + ("<"|safe) }}|{{ ("a"|safe) == "a" }})j",
     R"j(aa&lt;|<<|a&lt;|1&lt;|a<|True)j"},
    {R"j({{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ d is mapping }} {{ d is iterable }} {{ 1 is number }} {{ true is number }} {{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is true }} {{ 0 is false }})j",
     R"j(False True True True True True True True True True True True False)j"},
    {R"j({{ [] is sequence }} {{ 'a' is sequence }} {{ 3 is odd }} {{ 6 is divisibleby 3 }} {{ 'a' is equalto 'a' }} {{ 2 is gt 1 }} {{ 1 is in [1] }} {{ 'ab' is lower }} {{ range is callable }} {{ x is not defined }})j",
     R"j(True True True True True True True True True True)j"},
    {R"j({{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }})j",
     R"j(Hello World|Hello World  |  Hello World|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c'])j"},
    {R"j({{ s.startswith('  He') }} {{ s.endswith(('x', '  ')) }} {{ 'aa'.replace('a', 'b') }} {{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ "they're here".title() }} {{ 'hELLO'.capitalize() }} {{ '-'.join(['a', 'b']) }})j",
     R"j(True True bb AB ab They'Re Here Hello a-b)j"},
    {R"j({{ d.get('b') }} {{ d.get('z') }} {{ d.get('z', 7) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }})j",
     R"j(1 None 7 ['b', 'a'] [1, [1, 2.5, None, True, "x'y"]] [('b', 1), ('a', [1, 2.5, None, True, "x'y"])])j"},
    {R"j({{ messages[0]['role'] }}|{{ messages[0].content }}|{{ (messages|last).role }}|{{ messages|length }}|{{ messages[-1]['content']|upper }})j",
     R"j(user|hi|assistant|2|YO)j"},
    {R"j({% set ns = namespace(d={'a': 1}) %}{{ ns.d.a }}|{{ dict(a=1, b='x') }}|{{ namespace(x=1).x }})j",
     R"j(1|{'a': 1, 'b': 'x'}|1)j"},
};

TEST(ChatTemplateTest, ConstructsRenderAsJinja2) {
  for (const Case& c : kCases) {
    EXPECT_EQ(Render(c.source, Variables()), c.expected) << c.source;
  }
}

TEST(ChatTemplateTest, NewlinesNormalizedAndOneTrailingNewlineDropped) {
  EXPECT_EQ(Render("line\r\nnext\rlast\n\n"), "line\nnext\nlast\n");
  EXPECT_EQ(Render("{{ 'a\r\nb' }}"), "a\nb");
}

TEST(ChatTemplateTest, DefaultsAsApplyChatTemplate) {
  EXPECT_EQ(Render("{{ add_generation_prompt }} {{ tools }} {{ documents }} "
                   "{{ tools is defined }}"),
            "False None None True");
  EXPECT_EQ(Render("{{ tools|length }}", Json{{"tools", {1, 2}}}), "2");
}

TEST(ChatTemplateTest, KeysKeepTheirOrderInToJson) {
  const Json tool = Json::parse(R"({"type": "function", "function": {"name":
      "f", "description": "d", "parameters": {"z": 1, "a": 2}}})");
  EXPECT_EQ(Render("{{ t|tojson }}", Json{{"t", tool}}),
            R"({"type": "function", "function": {"name": "f", "description": )"
            R"("d", "parameters": {"z": 1, "a": 2}}})");
}

TEST(ChatTemplateTest, PlainJsonVariablesConvertWithTheirKeysSorted) {
  const nlohmann::json variables = {{"d", {{"b", 1}, {"a", 2}}}};
  const auto rendered = RenderChatTemplate("{{ d|tojson }}", variables);
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_EQ(*rendered, R"({"a": 2, "b": 1})");
}

TEST(ChatTemplateTest, StrftimeNowUsesTheInjectedClock) {
  ChatTemplateLimits limits;
  limits.now = [] { return std::time_t{1721995200}; };  // 26 Jul 2024 12:00Z
  const auto rendered = RenderChatTemplate(
      "{{ strftime_now('%d %b %Y') }}|{{ strftime_now is defined }}",
      Json::object(), limits);
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_EQ(*rendered, "26 Jul 2024|True");
  const auto live = RenderChatTemplate("{{ strftime_now('%Y') }}", {});
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->size(), 4u);
}

// ---------------------------------------------------------------------------
// Refusals: one line naming the place and what failed.

TEST(ChatTemplateTest, RaiseExceptionCarriesTheTemplatesMessage) {
  EXPECT_EQ(RenderError("ab\n  {{ raise_exception('Roles must alternate') }}"),
            "chat template 2:6: raise_exception: Roles must alternate");
}

TEST(ChatTemplateTest, SyntaxOutsideTheSubsetIsRefusedWhereItIs) {
  const std::pair<const char*, const char*> kRefused[] = {
      {"{{ x|frobnicate }}", "1:6: unknown filter 'frobnicate'"},
      {"{% if x is odder %}{% endif %}", "1:12: unknown test 'odder'"},
      {"a\n{% for x in y %}", "2:1: unclosed {% for %}: no {% endfor %}"},
      {"{% if x %}{% endfor %}", "1:11: unexpected {% endfor %}"},
      {"{% include 'x' %}", "1:1: unsupported tag 'include'"},
      {"{% extends 'x' %}", "1:1: unsupported tag 'extends'"},
      {"{{ x", "1:1: unclosed tag: no '}}'"},
      {"{# x", "1:1: unclosed comment"},
      {"{{ 'abc }}", "1:4: unclosed string"},
      {"{{ a ; b }}", "1:6: unexpected character ';'"},
      {"{{ (1 }}", "1:7: unexpected '}'"},
      {"{% break %}", "1:1: break outside a for loop"},
      {"{{ f(*args) }}", "1:6: unsupported: *args"},
      {"{% for x in y recursive %}{% endfor %}", "1:15: unsupported"},
      {"{{ 1 < 2 < 3 }}", "1:10: unsupported: chained comparison"},
      {"{% raw %}abc", "1:1: unclosed {% raw %}"},
      {"{{ 99999999999999999999 }}", "1:4: unsupported: an integer literal"},
  };
  for (const auto& [source, expected] : kRefused) {
    const std::string message = RenderError(source);
    EXPECT_NE(message.find(std::string("chat template ") + expected),
              std::string::npos)
        << source << " gave: " << message;
  }
}

TEST(ChatTemplateTest, RuntimeErrorsNameTheirPlace) {
  const std::pair<const char*, const char*> kFailing[] = {
      {"{{ nope.x }}", "1:8: 'nope' is undefined"},
      {"{{ d.nope.x }}", "1:10: 'dict object' has no attribute 'nope'"},
      {"\n {{ 'a' + 1 }}",
       "2:9: unsupported operand types for +: 'str' and "
       "'int'"},
      {"{{ 1 // 0 }}", "1:6: integer division or modulo by zero"},
      {"{{ 'a' < 1 }}",
       "'<' not supported between instances of 'str' and "
       "'int'"},
      {"{% set x.y = 1 %}", "1:1: cannot set 'y' on undefined 'x'"},
      {"{{ s.append(1) }}", "'str object' has no attribute 'append'"},
      {"{{ messages.append(1) }}", "'list object' has no attribute 'append'"},
      {"{{ range(1000000)|length }}", "range too big"},
      {"{{ undefined_fn() }}", "'undefined_fn' is undefined"},
      {"{{ 1 in 2 }}", "argument of type 'int' is not iterable"},
      {"{{ nothing|int }}", "'nothing' is undefined"},
      {"{{ {} in d }}", "unhashable type: 'dict'"},
      {"{{ d|tojson(sorted=true) }}", "unexpected argument 'sorted'"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{% for a, b in [1] %}{% endfor %}", "cannot unpack"},
      {"{{ messages|map(attribute='role')|length }}",
       "object of type 'generator' has no len()"},
      {"{{ messages|map(attribute='role')|tojson }}",
       "Object of type generator is not JSON serializable"},
      {"{{ d.keys()|tojson }}",
       "Object of type dict_keys is not JSON serializable"},
      {"{{ messages|map(attribute='role')|last }}",
       "'generator' object is not reversible"},
      {"{{ ('a'|safe).replace('a', '<') }}",
       "unsupported: str.replace() with arguments on a |safe string"},
      {"{{ messages|map(attribute='role') }}",
       "1:1: unsupported: printing a generator"},
  };
  for (const auto& [source, expected] : kFailing) {
    const std::string message = RenderError(source);
    EXPECT_NE(message.find(expected), std::string::npos)
        << source << " gave: " << message;
  }
}

// ---------------------------------------------------------------------------
// Limits: hostile templates end in an error, never a crash or a hang.

TEST(ChatTemplateTest, DeepNestingIsRefused) {
  std::string deep_expr =
      "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(RenderError(deep_expr).find("nested deeper than 64"),
            std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 500; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(RenderError(deep_blocks).find("nested deeper"), std::string::npos);
  EXPECT_NE(RenderError("{{ " + std::string(5000, '-') + "1 }}")
                .find("nested deeper"),
            std::string::npos);
}

TEST(ChatTemplateTest, RecursionIsBounded) {
  EXPECT_NE(
      RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
          .find("macro calls nested deeper than 64"),
      std::string::npos);
}

TEST(ChatTemplateTest, ValueNestingIsBoundedAndAcyclic) {
  EXPECT_NE(RenderError("{% set ns = namespace(x=[]) %}{% for i in "
                        "range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                        "{{ ns.x }}")
                .find("nested deeper than 200"),
            std::string::npos);
  EXPECT_NE(RenderError("{% set ns = namespace() %}{% set ns.me = [ns] %}"
                        "{{ ns }}")
                .find("a namespace stored in a namespace"),
            std::string::npos);
  Json deep = Json::array();
  for (int i = 0; i < 1000; ++i) deep = Json::array({deep});
  const auto rendered = RenderChatTemplate("{{ x }}", Json{{"x", deep}});
  ASSERT_FALSE(rendered.ok());
  EXPECT_NE(rendered.status().message().find("nest deeper than 200"),
            std::string::npos);
}

TEST(ChatTemplateTest, OutputSizeIsBounded) {
  ChatTemplateLimits limits;
  limits.max_output_bytes = 1 << 20;
  EXPECT_NE(RenderError("{% set ns = namespace(s='ab') %}{% for i in "
                        "range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                        limits)
                .find("passed 1048576 bytes"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 'x' * 100000000 }}", limits).find("bytes"),
            std::string::npos);
  EXPECT_NE(RenderError("{% for i in range(100000) %}{{ s * 10 }}{% endfor %}",
                        limits)
                .find("bytes"),
            std::string::npos);
}

TEST(ChatTemplateTest, WorkIsBounded) {
  ChatTemplateLimits limits;
  limits.max_steps = 100000;
  EXPECT_NE(RenderError("{% for i in range(100000) %}{% for j in range(100000)"
                        " %}{% endfor %}{% endfor %}",
                        limits)
                .find("chat template 1:1: rendering took more than 100000 "
                      "steps"),
            std::string::npos);
  EXPECT_NE(RenderError("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}"
                        "{{ f(0) }}",
                        limits)
                .find("chat template"),
            std::string::npos);
}

}  // namespace
}  // namespace attn::tokenizer
