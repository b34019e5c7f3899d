#!/usr/bin/env python3
"""test_structured_outputs.py — constrained decoding through the official `openai` client (Lab 12).

Serves SmolLM2-135M-Instruct (the real model: a random one never closes a
free string) and checks, against independent judges (Python's json,
jsonschema and re):
  * chat.completions.parse() with a Pydantic model returns a parsed object;
  * response_format json_schema whole and streamed, json_object, n = 2;
  * vLLM's structured_outputs (json, regex, choice, grammar) and llama.cpp's
    json_schema / grammar, on both endpoints; finish_reason "stop" when the
    grammar is done;
  * a "required" tool choice against SmolLM2 (whose template has no tool
    format: the tools go into the system message) returns arguments that
    validate, and the round trip (call, tool result, answer) works;
  * what cannot be enforced is a 400 naming the field and the keyword.
Usage: test_structured_outputs.py --servelab build/release/servelab --model SMOLLM2.gguf
"""
import argparse
import json
import os
import re
import sys

import jsonschema
import pydantic

from serve_helpers import Server, expect_bad_request


class Person(pydantic.BaseModel):
    name: str
    age: int


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}

ASK_PERSON = [{"role": "user", "content": "Invent a person: give a name and an age as JSON."}]


def check_parse(client):
    completion = client.chat.completions.parse(model="smollm2", messages=ASK_PERSON,
                                               response_format=Person, max_tokens=96,
                                               temperature=0)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(choice.message.parsed, Person), choice.message
    print(f"  chat.completions.parse() with a Pydantic model: {choice.message.parsed!r}: ok")


def check_response_format(client):
    schema = Person.model_json_schema()
    format_ = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    whole = client.chat.completions.create(model="smollm2", messages=ASK_PERSON, max_tokens=96,
                                           temperature=0.7, seed=3, n=2, response_format=format_)
    for choice in whole.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), schema)
    text, finish = "", None
    for chunk in client.chat.completions.create(model="smollm2", messages=ASK_PERSON,
                                                max_tokens=96, temperature=0, stream=True,
                                                response_format=format_):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert finish == "stop", (finish, text)
    jsonschema.validate(json.loads(text), schema)
    anything = client.chat.completions.create(model="smollm2", messages=ASK_PERSON, max_tokens=96,
                                              temperature=0,
                                              response_format={"type": "json_object"})
    assert isinstance(json.loads(anything.choices[0].message.content), dict)
    print("  response_format json_schema (n = 2, streamed) and json_object: valid: ok")


def check_structured_outputs(client):
    ask = [{"role": "user", "content": "Pick a colour and give a phone number."}]
    cases = [
        ({"structured_outputs": {"regex": r"[0-9]{3}-[0-9]{4}"}},
         lambda t: re.fullmatch(r"[0-9]{3}-[0-9]{4}", t)),
        ({"structured_outputs": {"choice": ["red", "green", "blue"]}},
         lambda t: t in ("red", "green", "blue")),
        ({"structured_outputs": {"grammar": 'root ::= "yes" | "no"'}}, lambda t: t in ("yes", "no")),
        ({"grammar": 'root ::= [a-z]+ " " [0-9]{2}'}, lambda t: re.fullmatch(r"[a-z]+ [0-9]{2}", t)),
        ({"json_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                          "required": ["ok"], "additionalProperties": False}},
         lambda t: isinstance(json.loads(t)["ok"], bool)),
    ]
    for extra, judge in cases:
        chat = client.chat.completions.create(model="smollm2", messages=ask, max_tokens=48,
                                              temperature=0, extra_body=extra)
        assert chat.choices[0].finish_reason == "stop", (extra, chat.choices[0])
        assert judge(chat.choices[0].message.content), (extra, chat.choices[0].message.content)
        legacy = client.completions.create(model="smollm2", prompt="Answer: ", max_tokens=48,
                                           temperature=0.8, seed=1, extra_body=extra)
        assert legacy.choices[0].finish_reason == "stop", (extra, legacy.choices[0])
        assert judge(legacy.choices[0].text), (extra, legacy.choices[0].text)
    print("  structured_outputs regex/choice/grammar and llama.cpp's grammar/json_schema, "
          "chat and completions: ok")


def check_required_tool_call(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.chat.completions.create(model="smollm2", messages=ask, tools=[WEATHER],
                                           tool_choice="required", max_tokens=96, temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    history = ask + [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "21 degrees, sunny"}]
    final = client.chat.completions.create(model="smollm2", messages=history, tools=[WEATHER],
                                           max_tokens=32, temperature=0)
    assert isinstance(final.choices[0].message.content, str), final.choices[0]
    print(f"  a required tool call against SmolLM2: {call.function.arguments}, then an answer: ok")


def check_refusals(client):
    def chat(**extra):
        return lambda: client.chat.completions.create(model="smollm2", messages=ASK_PERSON,
                                                      max_tokens=4, extra_body=extra)
    odd = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    expect_bad_request(chat(response_format={"type": "json_schema",
                                             "json_schema": {"name": "x", "schema": odd}}),
                       "response_format.json_schema.schema", "multipleOf")
    expect_bad_request(chat(response_format={"type": "json_object"}, grammar='root ::= "a"'),
                       "grammar", "both constrain")
    expect_bad_request(chat(structured_outputs={"regex": "(?=a)a"}), "structured_outputs.regex",
                       "lookahead")
    expect_bad_request(chat(structured_outputs={"grammar": "root ::= root"}),
                       "structured_outputs.grammar", "left-recursive")
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}
    expect_bad_request(chat(response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": loose}}),
                       "response_format.json_schema.schema", "required")
    print("  unenforceable keywords, two constraints, bad regex and grammar, strict rules: 400: ok")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servelab", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is missing (make run downloads it)")
        sys.exit(77)
    server = Server(args.servelab, models=[(args.model, "smollm2")], kv_memory="512MiB",
                    extra=("--max-model-len", "2048"))
    try:
        client = server.client(timeout=120.0)
        check_parse(client)
        check_response_format(client)
        check_structured_outputs(client)
        check_required_tool_call(client)
        check_refusals(client)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
