#!/usr/bin/env python3
"""make_chat_template_goldens.py — jinja2's renderings of chat templates, for chat_template_test.

Part of the model loader (all labs; chapter 11, serving: chat templates).
servelab renders a GGUF's tokenizer.chat_template with its own small Jinja
interpreter (reference/chat/chat_template.h) and promises the prompt
Hugging Face's apply_chat_template would give, byte for byte. This script
asks the real thing: Python's jinja2, in the environment apply_chat_template
builds (transformers' _compile_jinja_template): an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension (break and
continue), raise_exception() and a tojson filter that is json.dumps with
ensure_ascii=False; the template gets messages, add_generation_prompt,
bos_token, eos_token, and tools=None and documents=None.
Conversations with tools go through what an OpenAI-compatible server does
first (vLLM's chat_utils): each assistant tool call's "arguments" JSON text
is parsed into a dict; the request's tools reach the template as written;
chat_template_kwargs become more variables; continue_final_message cuts the
rendering after the last message's text as transformers' apply_chat_template
does (a faithful copy of its few lines, in continue_final_message() below).
Two things transformers adds are left out, because servelab has neither:
strftime_now() (today's date would make the goldens change every day) and the
{% generation %} tag (it only marks assistant text for training masks).

It writes data/golden/chat_templates/goldens.json with
  - "templates": each committed *.jinja file with the model's BOS/EOS text;
  - "message_sets": named conversations (system or not, multi-turn, special
    characters, Unicode, whitespace at the ends, empty, roles out of order);
  - "cases": every template x message set x add_generation_prompt, with
    jinja2's output, or the error it raised (its type, message and whether it
    came from parsing or rendering);
  - "tool_message_sets", "tool_sets", "tool_cases": conversations in the
    OpenAI wire shape (assistant tool_calls with JSON-text arguments and null
    content, tool results with tool_call_id), tool lists, and every template
    that can call tools (TOOL_TEMPLATES) x conversation x tools (or None) x
    add_generation_prompt, plus chat_template_kwargs and
    continue_final_message cases over every template;
  - "float_reprs": Python's repr of edge and random floats (a float from a
    request's JSON prints, and tojson writes it, as repr does);
  - "features": small templates of our own, one construct each (every
    filter, test, method and operator the subset claims), rendered with the
    "multi_turn" messages, and templates jinja2 rejects as syntax errors.

Usage:  .venv/bin/python tools/goldens/make_chat_template_goldens.py  (then commit the JSON)
"""

import copy
import json
import pathlib
import random

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = pathlib.Path(__file__).resolve().parents[2]
FOLDER = REPO / "data" / "golden" / "chat_templates"
OUT = FOLDER / "goldens.json"

# The text of each model's BOS and EOS tokens, as its tokenizer config gives
# them to apply_chat_template (Qwen2.5 has no BOS token).
TOKENS = {
    "smollm2-135m-instruct": ("<|im_start|>", "<|im_end|>"),
    "llama-3-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-7b-instruct": ("", "<|im_end|>"),
    "mistral-7b-instruct-v0.2": ("<s>", "</s>"),
    "mistral-7b-instruct-v0.2-legacy": ("<s>", "</s>"),
    "deepseek-v2-chat": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "mistral-nemo-instruct-2407": ("<s>", "</s>"),
}


def msg(role, content):
    return {"role": role, "content": content}


SYSTEM = msg("system", "You are a concise assistant.")
MESSAGE_SETS = {
    "user_only": [msg("user", "Hello!")],
    "system_user": [SYSTEM, msg("user", "What is the capital of France?")],
    "multi_turn": [
        SYSTEM,
        msg("user", "Hi there."),
        msg("assistant", "Hello! How can I help?"),
        msg("user", "Name a prime number."),
    ],
    "multi_turn_no_system": [
        msg("user", "Hi there."),
        msg("assistant", "Hello! How can I help?"),
        msg("user", "Name a prime number."),
    ],
    "assistant_last": [msg("user", "Count to three."), msg("assistant", "One, two,")],
    "special_characters": [
        msg("system", "Quotes ' and \", a backslash \\ and \\n, {{ not a tag }} {% nor this %} {# nor this #}"),
        msg("user", "Markers: <|im_start|>assistant\n[INST] <s></s> <|eot_id|> %} }}"),
        msg("assistant", "JSON: {\"a\": [1, 2], \"b\": null}\ttab"),
        msg("user", "Control \x01 and DEL \x7f characters"),
    ],
    "unicode": [
        msg("system", "Réponds en français — s'il te plaît."),
        msg("user", "日本語で答えてください。🙂 Ünïcödé ß"),
        msg("assistant", "はい、わかりました。 Ответ: да."),
        msg("user", "emoji 👍🏽, عربى, 한국어"),
    ],
    "whitespace": [
        msg("system", "  padded system prompt  "),
        msg("user", "\n\tleading newline and tab, trailing newlines\n\n"),
        msg("assistant", "   three spaces each side   "),
        msg("user", "\u3000ideographic and no-break\u00a0spaces\u00a0\u3000\r\nand a CRLF inside"),
    ],
    "empty_content": [msg("user", ""), msg("assistant", ""), msg("user", "")],
    "no_messages": [],
    "system_only": [SYSTEM],
    "system_not_first": [msg("user", "Hi."), msg("system", "Late system message."), msg("user", "Again.")],
    "two_users": [msg("user", "First."), msg("user", "Second.")],
    "tool_result": [
        msg("user", "What is the weather in Paris?"),
        msg("assistant", "Let me check."),
        msg("tool", "{\"temperature\": 21, \"unit\": \"C\"}"),
        msg("user", "Thanks."),
    ],
}

# The templates that render tools and tool calls (docs/chat_templates.md).
TOOL_TEMPLATES = ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "mistral-nemo-instruct-2407"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city's name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TOOL_SETS = {
    "weather": [WEATHER_TOOL],
    "two_tools": [
        WEATHER_TOOL,
        {"type": "function", "function": {
            "name": "search",
            "description": "Search the web — résumé, 日本語, \"quotes\".",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "minimum": 1, "default": 5},
                    "threshold": {"type": "number", "minimum": 0.25, "maximum": 1e-05},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            "strict": True,
        }},
    ],
    "no_parameters": [{"type": "function", "function": {"name": "now"}}],
}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# The OpenAI wire shape; Mistral's templates want 9-character call ids.
PARIS_CALL = call("abc123XYZ", "get_weather", '{"city": "Paris", "unit": "celsius"}')
TOOL_MESSAGE_SETS = {
    "ask": [msg("user", "What is the weather in Paris?")],
    "ask_with_system": [SYSTEM, msg("user", "What is the weather in Paris?")],
    "call_and_result": [
        msg("user", "What is the weather in Paris?"),
        {"role": "assistant", "content": None, "tool_calls": [PARIS_CALL]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": '{"temperature": 21}'},
    ],
    "call_with_text_and_answer": [
        SYSTEM,
        msg("user", "Weather in Zürich, please."),
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            call("zrh000001", "get_weather",
                 '{"city": "Zürich", "days": 3, "threshold": 0.25, "flags": [true, null], "nested": {"b": 1, "a": 2}}')]},
        {"role": "tool", "tool_call_id": "zrh000001", "name": "get_weather", "content": "18 °C, cloudy"},
        msg("assistant", "It is 18 °C and cloudy in Zürich."),
        msg("user", "Thanks!"),
    ],
    "parallel_calls": [
        msg("user", "Weather in Paris and Rome?"),
        {"role": "assistant", "content": None, "tool_calls": [
            PARIS_CALL, call("rome00002", "get_weather", '{"city": "Rome"}')]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": "21"},
        {"role": "tool", "tool_call_id": "rome00002", "content": "25"},
    ],
    # As the official client sends a reply's message back (pydantic's field
    # order: "function" before "type", "arguments" before "name").
    "client_key_order": [
        msg("user", "What is the weather in Paris?"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "abc123XYZ", "function": {"arguments": '{"city": "Paris"}', "name": "get_weather"},
             "type": "function"}]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "content": "21"},
    ],
    "empty_arguments": [
        msg("user", "What time is it?"),
        {"role": "assistant", "content": None, "tool_calls": [call("now000001", "now", "")]},
        {"role": "tool", "tool_call_id": "now000001", "content": "12:00"},
    ],
}

# chat_template_kwargs cases: (template, messages, tools, kwargs).
KWARGS_CASES = [
    ("llama-3.1-8b-instruct", "call_and_result", "weather", {"tools_in_user_message": False}),
    ("llama-3.1-8b-instruct", "ask", "weather", {"date_string": "1 Jan 2025", "unused": [1, 2.5]}),
    ("llama-3.1-8b-instruct", "ask", None, {"builtin_tools": ["brave_search", "wolfram_alpha"]}),
    ("qwen2.5-7b-instruct", "ask", None, {"anything": {"nested": True}}),
]


def float_reprs():
    """repr() of floats at the edges of its positional/scientific switch, and random ones."""
    values = [0.0, -0.0, 1.0, -1.0, 0.1, 0.25, 2.5, 100.0, 1234.5678, -3.14159, 1e-05, 0.0001,
              0.00012345, 1e15, 1e16, 9999999999999998.0, 1.5e16, 123456789012345678.0,
              1.5e-10, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1 / 3, 2 / 3]
    rng = random.Random(47)
    values += [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(200)]
    values += [float(rng.randint(-10 ** 17, 10 ** 17)) for _ in range(20)]
    return [repr(v) for v in values]


def template_messages(wire):
    """The messages as a server hands them to the template: each tool call's
    arguments parsed from JSON text into a dict ("" becomes {}), as vLLM does."""
    messages = copy.deepcopy(wire)
    for message in messages:
        for tool_call in message.get("tool_calls") or []:
            arguments = tool_call["function"].get("arguments")
            tool_call["function"]["arguments"] = json.loads(arguments) if arguments else {}
    return messages


def continue_final_message(rendered, messages):
    """transformers' apply_chat_template(continue_final_message=True), its few lines."""
    final_message = messages[-1]["content"]
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear "
                         "in the chat after applying the chat template!")
    final_msg_loc = rendered.rindex(final_message.strip())
    if rendered[final_msg_loc: final_msg_loc + len(final_message.lstrip())] == final_message:
        return rendered[: final_msg_loc + len(final_message.lstrip())]
    return rendered[: final_msg_loc + len(final_message.strip())]


# One construct each; rendered with MESSAGE_SETS["multi_turn"].
FEATURES = {
    # literals and printing
    "literals": "{{ 'single' }}|{{ \"double\" }}|{{ 42 }}|{{ -7 }}|{{ 1_000 }}|{{ true }}|{{ True }}"
    "|{{ false }}|{{ none }}|{{ None }}|{{ 'adjacent' ' strings' }}",
    "string_escapes": "{{ 'tab\\t|nl\\n|cr\\r|q\\'|dq\\\"|bs\\\\|hex\\x41\\xe9|u\\u00e9\\u4e2d|U\\U0001F600"
    "|oct\\101\\7|bell\\a|unknown\\q\\d|joined\\\nline' }}",
    "raw_newline_in_string": "{{ 'line one\nline two' }}",
    "undefined": "[{{ nothing }}][{{ nothing ~ 'x' }}][{{ nothing|length }}][{{ nothing|default('d') }}]"
    "[{{ 'a' in nothing }}][{% for x in nothing %}{{ x }}{% endfor %}][{{ nothing is defined }}]"
    "[{{ nothing is undefined }}][{{ not nothing }}][{{ messages[0].missing }}][{{ messages[99] }}]"
    "[{{ none.attribute }}][{{ 'text'.attribute }}][{{ nothing|trim }}][{{ nothing|first }}]",
    # lookups
    "attribute_and_item": "{{ messages[0].role }}|{{ messages[0]['role'] }}|{{ messages[-1].content }}"
    "|{{ messages[1]['content'][0] }}|{{ 'héllo'[1] }}|{{ 'héllo'[-1] }}|{{ {'a': 'b'}.a }}|{{ loop }}|{{ messages.0.role }}",
    "slices": "{{ messages[1:]|length }}|{{ messages[:-1]|length }}|{{ messages[::-1][0].role }}"
    "|{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[-3:] }}|{{ 'hello'[:-1] }}|{{ 'hello'[::2] }}"
    "|{{ 'hello'[4:1:-1] }}|{{ 'hello'[10:] }}|{{ 'hello'[-10:2] }}|{{ 'héllo wörld'[1:8] }}"
    "|{{ 'abcdef'[5:0:-2] }}|{{ 'abc'[none:none:none] }}|{{ ([1, 2, 3, 4][1:3])|length }}",
    # operators
    "arithmetic": "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 10 - 3 - 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 % -3 }}"
    "|{{ -7 % -3 }}|{{ 'ab' * 3 }}|{{ 2 * 'cd' }}|{{ 'x' * 0 }}|{{ 'x' * -2 }}|{{ ([1] + [2, 3])|length }}"
    "|{{ ([0] * 3)|length }}|{{ true + 1 }}|{{ -(3) }}|{{ +4 }}|{{ 'a' + 'b' }}|{{ -2 * 3|string }}",
    "concatenation": "{{ 'a' ~ 1 ~ none ~ true ~ nothing ~ 'z' }}|{{ 1 ~ 2 + 3 ~ 4 if false else 'x' }}|{{ 2 * 3 ~ 4 }}",
    "comparisons": "{{ 1 < 2 }}{{ 2 <= 2 }}{{ 3 > 4 }}{{ 4 >= 5 }}{{ 1 == 1 }}{{ 1 != 1 }}{{ 1 < 2 < 3 }}"
    "{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ 'é' > 'z' }}{{ true == 1 }}{{ none == none }}{{ nothing == nothing }}"
    "{{ nothing == none }}{{ [1, [2]] == [1, [2]] }}{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}"
    "{{ [1, 2] < [1, 3] }}{{ [1] < [1, 0] }}{{ 'a' == 1 }}{{ messages[0] == messages[0] }}",
    "membership": "{{ 'ell' in 'hello' }}{{ 'x' not in 'hello' }}{{ 2 in [1, 2] }}{{ 'role' in messages[0] }}"
    "{{ 'tool_calls' in messages[0] }}{{ 'a' in {'a': 1} }}{{ 1 in {'a': 1} }}{{ none in [none] }}",
    "logic": "[{{ '' or 'x' }}][{{ 'a' and 'b' }}][{{ 0 or none }}][{{ nothing or 'u' }}][{{ nothing and 1 }}]"
    "[{{ 0 and nothing.attribute }}][{{ 1 or nothing.attribute }}][{{ not 0 }}][{{ not 'a' }}]"
    "[{{ not not [] }}][{{ 1 and 2 or 3 }}][{{ false or false and true }}][{{ not 1 == 2 }}]",
    "conditional_expression": "{{ 'yes' if messages else 'no' }}|{{ 'x' if false }}|{{ 1 if 0 else 2 if 0 else 3 }}"
    "|{{ ('a' if true else 'b')|upper }}",
    # tests
    "tests": "{{ 1 is defined }}{{ nothing is defined }}{{ nothing is not defined }}{{ nothing is undefined }}"
    "{{ none is none }}{{ 0 is none }}{{ 'a' is string }}{{ 1 is string }}{{ 1 is number }}{{ true is number }}"
    "{{ true is integer }}{{ 1 is integer }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}"
    "{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is iterable }}"
    "{{ 1 is iterable }}{{ nothing is iterable }}{{ [] is sequence }}{{ {} is sequence }}{{ 1 is sequence }}"
    "{{ 2 is even }}{{ 3 is odd }}{{ 6 is divisibleby 3 }}{{ 7 is divisibleby(3) }}{{ 1 is equalto 1 }}"
    "{{ 1 is eq 2 }}{{ 1 is ne 2 }}{{ messages[0] is mapping }}{{ messages is sequence }}",
    "test_precedence": "{{ not nothing is defined }}|{{ 'y' if nothing is none else 'n' }}"
    "|{{ messages[0].role is string and true }}|{{ 2 + 2 is even }}",
    # filters
    "filter_trim": "[{{ '  both  '|trim }}][{{ '\\u3000\\xa0ws\\x1c\\t\\n'|trim }}][{{ 'xxaxx'|trim('x') }}]"
    "[{{ 5|trim }}][{{ messages[0].content|trim }}]",
    "filter_length": "{{ messages|length }}|{{ 'héllo'|length }}|{{ '🙂'|count }}|{{ {'a': 1}|length }}|{{ ''|length }}",
    "filter_case": "{{ 'MiXed'|upper }}|{{ 'MiXed'|lower }}|{{ messages[0].role|upper }}|{{ 42|lower }}",
    "filter_default": "[{{ 'v'|default('d') }}][{{ nothing|default('d') }}][{{ ''|default('d') }}]"
    "[{{ ''|default('d', true) }}][{{ nothing|d('short') }}][{{ none|default('n') }}][{{ nothing|default }}]"
    "[{{ 0|default(1, boolean=true) }}]",
    "filter_tojson": "{{ messages[0]|tojson }}|{{ [1, 'two', none, true, false, {'k': []}]|tojson }}"
    "|{{ 'quote \" backslash \\\\ nl \\n tab \\t cr \\r ctl \\x01 é 🙂'|tojson }}|{{ {}|tojson }}|{{ []|tojson }}",
    "filter_tojson_indent": "{{ {'a': [1, {'b': 'c'}], 'd': {}, 'e': [], 'f': none}|tojson(indent=2) }}"
    "|{{ [[]]|tojson(indent=0) }}|{{ messages[1:3]|tojson(indent=4) }}",
    "filter_string": "{{ 5|string ~ none|string ~ true|string ~ nothing|string }}|{{ (1|string) + '2' }}",
    "filter_join": "{{ ['a', 'b', 'c']|join }}|{{ ['a', 'b']|join(', ') }}|{{ [1, none, true]|join('-') }}"
    "|{{ 'abc'|join('.') }}|{{ {'x': 1, 'y': 2}|join(d='+') }}|{{ nothing|join(',') }}",
    "filter_items_list": "{% for k, v in {'a': 1, 'b': 'two'}|items %}{{ k }}={{ v }};{% endfor %}"
    "|{{ nothing|items|list|length }}|{{ 'abc'|list|length }}|{{ ({'p': 1, 'q': 2}|list)[1] }}|{{ messages|list|length }}",
    "filter_first_last": "{{ messages|first|tojson }}|{{ (messages|last).role }}|{{ 'xyz'|first }}{{ 'xyz'|last }}"
    "|{{ {'a': 1, 'b': 2}|first }}|[{{ []|first }}]",
    "filter_select_reject": "{{ [1, 2, 3, 4]|select('even')|list|tojson }}|{{ [1, 2, 3, 4]|reject('even')|list|tojson }}"
    "|{{ [0, 1, '', 'a', none]|select|list|tojson }}|{{ ['a', 'b', 'a']|reject('equalto', 'a')|list|tojson }}"
    "|{{ [1, 2, 3]|select('divisibleby', 3)|list|tojson }}",
    "filter_selectattr": "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}"
    "|{{ messages|rejectattr('role', 'equalto', 'user')|map(attribute='role')|join(',') }}"
    "|{{ messages|selectattr('content')|list|length }}|{{ [{'a': {'b': 1}}, {'a': {'b': 2}}]|selectattr('a.b', 'even')|list|length }}",
    "filter_map": "{{ messages|map(attribute='role')|join(' ') }}|{{ ['A', 'B']|map('lower')|join }}"
    "|{{ [{'x': 1}, {}]|map(attribute='x', default=0)|list|tojson }}|{{ ['  a ', 'b  ']|map('trim')|join('|') }}",
    "filter_replace": "{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'ab'|replace('', '.') }}"
    "|{{ 'héllo'|replace('é', 'e') }}",
    "generators": "{{ 'truthy' if []|select else 'falsy' }}|{% set g = [1, 2, 3]|select %}{{ g|first }}"
    "{{ g|list|tojson }}{{ g|list|tojson }}|{% set h = [1, 2, 3]|select %}{{ 2 in h }}{{ h|list|tojson }}"
    "|[{{ ([1]|select)[0] }}]|{{ [1, 2]|map('string')|join }}|{{ ({'a': 1}|items|list)[0]|tojson }}"
    "|{{ [1]|select is iterable }}{{ [1]|select is sequence }}{{ [1]|select is defined }}",
    "filter_chain": "{{ '  MiXed  '|trim|lower|replace('x', 'X')|length }}|{{ messages|map(attribute='content')|join('/')|length }}",
    # methods
    "methods_str": "[{{ '  pad  '.strip() }}][{{ '  pad  '.lstrip() }}][{{ '  pad  '.rstrip() }}][{{ 'xxhixx'.strip('x') }}]"
    "[{{ '\\nhi\\n'.lstrip('\\n') }}][{{ 'abc'.startswith('ab') }}][{{ 'abc'.endswith('bc') }}][{{ 'abc'.startswith('x') }}]"
    "[{{ 'a,b,,c'.split(',')|tojson }}][{{ ' a  b\\tc\\n'.split()|tojson }}][{{ 'a b c'.split(' ', 1)|tojson }}]"
    "[{{ ' a b '.split(none, 1)|tojson }}][{{ 'x</think>y'.split('</think>')[-1] }}][{{ 'aXbXc'.replace('X', '') }}]"
    "[{{ 'Up'.upper() }}{{ 'Up'.lower() }}][{{ ''.split()|tojson }}][{{ ''.split(',')|tojson }}]",
    "methods_dict": "{% for k, v in messages[0].items() %}{{ k }}:{{ v|length }};{% endfor %}"
    "|{{ messages[0].keys()|join(',') }}|{{ messages[0].values()|list|length }}|{{ messages[0].get('role') }}"
    "|{{ messages[0].get('nope') }}|{{ messages[0].get('nope', 'fallback') }}",
    # statements
    "for_loop_variables": "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/"
    "{{ loop.revindex0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/"
    "{{ loop.previtem.role if loop.previtem is defined }}/{{ loop.nextitem.role if not loop.last }}/"
    "{{ loop.depth }}{{ loop.depth0 }};{% endfor %}",
    "for_filter_and_nesting": "{% for m in messages if m.role != 'system' %}[{{ loop.index }}/{{ loop.length }}"
    "{% for c in m.role %}{{ loop.index }}{{ c }}{% endfor %}{{ loop.last }}]{% endfor %}",
    "for_over_dict_and_string": "{% for key in {'b': 1, 'a': 2} %}{{ key }}{% endfor %}|{% for c in 'hé🙂' %}[{{ c }}]{% endfor %}"
    "|{% for a, b in [[1, 2], 'xy'] %}{{ a }}{{ b }}{% endfor %}|{% for x in [] %}never{% endfor %}",
    "break_continue": "{% for i in [1, 2, 3, 4, 5] %}{% if i == 2 %}{% continue %}{% endif %}{{ i }}"
    "{% if i == 4 %}{% break %}{% endif %}{% endfor %}|{% for i in [1, 2] %}{% for j in [1, 2, 3] %}"
    "{% if j == 2 %}{% break %}{% endif %}{{ i }}{{ j }}{% endfor %}{% endfor %}",
    "if_elif_else": "{% for m in messages %}{% if m.role == 'system' %}S{% elif m.role == 'user' %}U"
    "{% elif m.role == 'assistant' %}A{% else %}?{% endif %}{% endfor %}|{% if false %}x{% endif %}"
    "|{% if 0 %}a{% elif '' %}b{% else %}c{% endif %}",
    "set_and_scoping": "{% set x = 1 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i * 10 %}[{{ x }}]{% endfor %}[{{ x }}]"
    "{% if true %}{% set x = 5 %}{% endif %}[{{ x }}]{% for i in [1, 2] %}{% if i == 2 %}[{{ y }}]{% endif %}"
    "{% set y = i %}{% endfor %}[{{ y }}]{% set a, b = ['p', 'q'] %}[{{ a }}{{ b }}]"
    "{% set messages = messages[2:] %}[{{ messages|length }}]",
    "loop_variable_scoping": "{% for i in [1, 2] %}{% for j in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}"
    "{% set i = i * 10 %}{{ i }}{% endfor %}[{{ i }}][{{ loop }}]",
    "namespace": "{% set ns = namespace(count=0, found=false, name='n') %}{% for m in messages %}"
    "{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.found = true %}{% endif %}{% endfor %}"
    "{{ ns.count }}{{ ns.found }}{{ ns.name }}[{{ ns.missing }}]{{ ns['count'] }}{% set ns2 = namespace() %}"
    "{% set ns2.list = [1, 2] %}{{ ns2.list|length }}{% set alias = ns %}{% set alias.count = 99 %}{{ ns.count }}",
    "raise_in_untaken_branch": "{% if false %}{{ raise_exception('never') }}{% endif %}fine",
    "bos_eos_and_flags": "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}"
    "|{{ tools is defined }}|{{ tools is none }}|{{ raise_exception is defined }}|{{ namespace is defined }}"
    "|{{ strftime_now is defined }}|{{ date_string is defined }}",
    # whitespace control
    "whitespace_trim_lstrip": "a\n  {% if true %}\n  b\n  {% endif %}\n  c {# comment #}\n  {# own line #}\n"
    "\t{% for i in [1] %}\n\t{{ i }}\n\t{% endfor %}\n  {{ 'print keeps indent' }}\nend\n",
    "whitespace_minus": "a   \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n\n  c  {{- 'd' -}}  e  {#- x -#}  f",
    "whitespace_plus": "a\n  {%+ if true +%}\nb\n  {%- endif +%}\nc",
    "whitespace_crlf": "line1\r\n  {% if true %}\r\n  kept\r\n  {% endif %}\r\nline3\rline4\r\n",
    "whitespace_trailing_newlines": "text\n\n",
    "whitespace_trailing_newline_after_tag": "{% if true %}x{% endif %}\n",
    "whitespace_comment_only": "{# only a comment #}",
    "whitespace_braces_in_text": "{ not a tag } {x} %} #} }}",
    "whitespace_nested_braces": "{{ {'a': {'b': 'c'}}['a']['b']}}|{{ [1, [2]]|length}}",
    # runtime errors (the message is jinja2's; servelab must throw too)
    "error_raise_exception": "before{{ raise_exception('Roles must alternate: ' ~ messages|length) }}after",
    "error_undefined_attribute": "{{ nothing.attribute }}",
    "error_undefined_arithmetic": "{{ nothing + 1 }}",
    "error_undefined_method": "{{ nothing.strip() }}",
    "error_type_add": "{{ 'a' + 1 }}",
    "error_type_order": "{{ 'a' < 1 }}",
    "error_modulo_zero": "{{ 5 % 0 }}",
    "error_not_iterable": "{% for x in 5 %}{% endfor %}",
    "error_length_of_int": "{{ 5|length }}",
    "error_generator_length": "{{ messages|selectattr('role')|length }}",
    "error_generator_last": "{{ [1]|select|last }}",
    "error_tojson_undefined": "{{ nothing|tojson }}",
    "error_empty_split": "{{ 'ab'.split('') }}",
    "error_slice_step_zero": "{{ 'abc'[::0] }}",
    "error_namespace_assign": "{% set l = [1] %}{% set l.x = 1 %}",
    "error_unpack": "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "error_messages_empty_index": "{{ messages[5]['role'] }}",
    # syntax errors jinja2 reports while parsing
    "syntax_unclosed_print": "{{ 'a' ",
    "syntax_unclosed_block": "{% if true %}x",
    "syntax_unclosed_comment": "{# never closed",
    "syntax_unclosed_string": "{{ 'abc }}",
    "syntax_unknown_tag": "{% frobnicate %}",
    "syntax_stray_end": "{% endif %}",
    "syntax_mismatched_end": "{% for x in [] %}{% endif %}",
    "syntax_bad_bracket": "{{ (1] }}",
    "syntax_missing_operand": "{{ 1 + }}",
    "syntax_unknown_filter": "{{ 'a'|no_such_filter }}",
    "syntax_unknown_test": "{{ 'a' is no_such_test }}",
    "syntax_chained_tests": "{{ 1 is defined is defined }}",
    "syntax_break_outside_loop": "{% break %}",
    "syntax_empty_print": "{{ }}",
    "syntax_else_twice": "{% if 1 %}a{% else %}b{% else %}c{% endif %}",
    "syntax_elif_after_else": "{% if 1 %}a{% else %}b{% elif 2 %}c{% endif %}",
}


def environment():
    """The environment transformers' _compile_jinja_template builds (see the docstring)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def render(env, source, messages, add_generation_prompt, bos_token, eos_token, tools=None,
           extra=None, continue_final=False):
    """jinja2's output as {"output": ...}, or the error it raised."""
    try:
        template = env.from_string(source)
    except Exception as error:  # TemplateSyntaxError, or Python's SyntaxError ({% break %} outside a loop)
        return {"error": type(error).__name__, "message": str(error), "stage": "parse"}
    try:
        output = template.render(messages=messages, tools=tools, documents=None,
                                 add_generation_prompt=add_generation_prompt,
                                 bos_token=bos_token, eos_token=eos_token, **(extra or {}))
        if continue_final:
            output = continue_final_message(output, messages)
    except Exception as error:  # jinja2 lets TypeError, ValueError, ... through
        return {"error": type(error).__name__, "message": str(error), "stage": "render"}
    return {"output": output}


def tool_cases(env, sources):
    """Conversations with tools, kwargs and continue_final_message (see the docstring)."""
    cases = []

    def add(name, set_name, tools_name, add_generation_prompt, extra=None, continue_final=False,
            wire=None):
        bos, eos = TOKENS[name]
        wire = wire if wire is not None else TOOL_MESSAGE_SETS[set_name]
        case = {"template": name, "messages": set_name, "tools": tools_name,
                "add_generation_prompt": add_generation_prompt,
                "chat_template_kwargs": extra or {}, "continue_final_message": continue_final}
        case.update(render(env, sources[name], template_messages(wire), add_generation_prompt,
                           bos, eos, TOOL_SETS[tools_name] if tools_name else None, extra,
                           continue_final))
        cases.append(case)

    for name in TOOL_TEMPLATES:
        for set_name in TOOL_MESSAGE_SETS:
            for tools_name in [None, *TOOL_SETS]:
                for add_generation_prompt in (True, False):
                    add(name, set_name, tools_name, add_generation_prompt)
    for name, set_name, tools_name, extra in KWARGS_CASES:
        add(name, set_name, tools_name, True, extra)
    # continue_final_message: a prefilled answer, with trailing space, with
    # leading space, and a last message that is not the assistant's.
    for name in sorted(sources):
        for set_name in ("assistant_last", "whitespace", "multi_turn"):
            add(name, set_name, None, False, None, True, MESSAGE_SETS[set_name])
    return cases


def main():
    env = environment()
    templates = {}
    sources = {}
    cases = []
    for path in sorted(FOLDER.glob("*.jinja")):
        name = path.stem
        bos, eos = TOKENS[name]
        templates[name] = {"file": path.name, "bos_token": bos, "eos_token": eos}
        # The exact bytes: normalizing newlines is the renderer's job.
        source = path.read_bytes().decode("utf-8")
        sources[name] = source
        for set_name, messages in MESSAGE_SETS.items():
            for add_generation_prompt in (True, False):
                case = {"template": name, "messages": set_name,
                        "add_generation_prompt": add_generation_prompt}
                case.update(render(env, source, messages, add_generation_prompt, bos, eos))
                cases.append(case)
    features = []
    for name, source in FEATURES.items():
        feature = {"name": name, "source": source}
        feature.update(render(env, source, MESSAGE_SETS["multi_turn"], True, "<s>", "</s>"))
        features.append(feature)
    golden = {
        "generator": "tools/goldens/make_chat_template_goldens.py",
        "jinja2": jinja2.__version__,
        "feature_messages": "multi_turn",
        "feature_bos_token": "<s>",
        "feature_eos_token": "</s>",
        "templates": templates,
        "message_sets": MESSAGE_SETS,
        "cases": cases,
        "tool_message_sets": TOOL_MESSAGE_SETS,
        "tool_sets": TOOL_SETS,
        "tool_cases": tool_cases(env, sources),
        "float_reprs": float_reprs(),
        "features": features,
    }
    OUT.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("error" in c for c in cases)
    with_tools = golden["tool_cases"]
    tool_errors = sum("error" in c for c in with_tools)
    print(f"wrote {OUT.relative_to(REPO)}: {len(cases)} cases ({errors} raise) over "
          f"{len(templates)} templates, {len(with_tools)} with tools ({tool_errors} raise), "
          f"{len(features)} features")


if __name__ == "__main__":
    main()
