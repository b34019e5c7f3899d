#!/usr/bin/env python3
"""Record llama.cpp's tokenization of a test corpus, for tokenizer_golden_test.

Part of the model loader (all labs; tokenizer). servelab promises token ids
identical to llama.cpp's for the same GGUF. This script tokenizes a corpus of
tricky strings with llama.cpp (through llama-cpp-python, vocabulary only) and
writes data/golden/tokenizer/smollm2_llamacpp.json; the C++ test re-encodes
every string and compares.

Besides the model's own pre-tokenizer ("smollm"), each string is also
tokenized with tokenizer.ggml.pre overridden to "gpt-2" and "default", so the
other pre-tokenizers servelab implements are checked against llama.cpp too.

Usage:  .venv/bin/python tools/goldens/make_tokenizer_goldens.py  (then commit the JSON)

Strings are stored as hex of their exact bytes ("text_hex"), because some
inputs are deliberately invalid UTF-8; "text" repeats valid ones for reading.
"""

import ctypes
import hashlib
import json
import pathlib
import random

import llama_cpp

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = REPO / "data" / "golden" / "tokenizer" / "smollm2_llamacpp.json"
# Pre-tokenizer overrides recorded next to the model's own; key -> pre name.
VARIANTS = {"ids_gpt2": "gpt-2", "ids_default": "default"}

PROSE = [
    "Hello world",
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France? Answer in one sentence.",
    "Paris is the capital of France.",
    "It was the best of times, it was the worst of times.",
    "In 1492, Columbus sailed the ocean blue.",
    "The meeting is at 3:30pm on 2024-05-17.",
    "Once upon a time, in a land far, far away...",
    "SmolLM2 is a family of compact language models.",
    "Transformers use attention; attention uses softmax.",
    "E = mc^2 is Einstein's famous equation.",
    "A B C D E F G",
    "ALL CAPS SENTENCE HERE",
    "MiXeD CaSe WoRdS",
    "camelCaseIdentifier and snake_case_identifier",
    "Mr. Smith went to Washington, D.C., on Tuesday.",
    "Please, please, please -- let me get what I want.",
    "The year 2000 problem (Y2K) was overblown.",
    "She said, \"Hello!\" and left.",
    "Tokenization is the first step.",
    "antidisestablishmentarianism",
    "Supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "a",
    "I",
    " ",
    "Hello",
    " Hello",
    "Hello ",
]

PUNCTUATION = [
    "!",
    "?!",
    "...",
    "…",
    "!!!???",
    "(parenthesized)",
    "[brackets] {braces} <angles>",
    "a+b=c",
    "x^2 + y^2 = z^2",
    "50% off! $19.99 only",
    "#hashtag @mention",
    "a|b|c",
    "~tilde~",
    "`backticks`",
    "«guillemets» „quotes“ “curly” ‘single’",
    "em—dash and en–dash",
    "¿Qué? ¡Sí!",
    "***bold*** __underline__",
    "--- === +++",
    "\\backslash\\path",
    ";;;",
    "::",
    "a,b;c:d.e",
    "$$ $ $$$",
    "<<>> << >>",
]

CONTRACTIONS = [
    "I'm",
    "I'M",
    "don't",
    "DON'T",
    "Don't",
    "'s",
    "'S",
    "it's",
    "IT'S",
    "we're",
    "WE'RE",
    "they've",
    "they'VE",
    "you'll",
    "YOU'LL",
    "he'd",
    "He'D",
    "'re 've 'll 'd 'm 't",
    "''s",
    "'''",
    "rock 'n' roll",
    "'tis the season",
    "'sup",
    "l'homme",
    "o'clock",
    "Mary's dog's bone",
    "can't won't shouldn't",
    "I'd've",
    "'",
    "' s",
    "’s curly apostrophe",
]

SCRIPTS = [
    "你好，世界",
    "我爱北京天安门。",
    "中文分词测试：人工智能",
    "こんにちは世界",
    "カタカナとひらがなと漢字",
    "ｶﾀｶﾅ (half-width)",
    "안녕하세요 세계",
    "한국어 토큰화",
    "مرحبا بالعالم",
    "السلام عليكم ورحمة الله",
    "שלום עולם",
    "नमस्ते दुनिया",
    "हिन्दी में लिखा गया पाठ",
    "สวัสดีชาวโลก",
    "Привет, мир!",
    "Ελληνικά γράμματα",
    "Ünïcödé àccénts ñ ç ø å",
    "naïve café résumé",
    "Straße",
    "İstanbul ıi",
    "Tiếng Việt có dấu",
    "ქართული",
    "Հայերեն",
    "ትግርኛ",
    "中文English混合mixed",
    "日本語123テキスト",
    "ŁÓDŹ żółć",
    "ß ẞ ﬁ ﬂ",
    "Ⅻ Ⅳ ⅷ",
    "²³¹ ½ ¾",
    "٣٤٥ ١٢",
    "०१२३ हिन्दी अंक",
    "〇一二三",
    "①②③",
]

EMOJI = [
    "😀",
    "😀😃😄",
    "Hello 👋 world 🌍",
    "👍🏽",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "👨‍👩‍👧‍👦",
    "👩‍💻",
    "🏳️‍🌈",
    "❤️",
    "🇫🇷🇯🇵",
    "🤖 AI 🤖",
    "☕️ coffee",
    "emoji🎉in🎉words",
    "🙂🙃",
    "1️⃣2️⃣",
    "🧑🏾‍🚀",
    "✅ done ❌ failed",
    "😀!",
    " 😀",
    "  😀",
]

CODE = [
    "def main():\n    print(\"hello\")\n",
    "int main(int argc, char** argv) {\n    return 0;\n}",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "const x = () => { return 42; };",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "SELECT * FROM users WHERE id = 1;",
    "<html><body><p>Hi</p></body></html>",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};",
    "if x != nil {\n\treturn err\n}",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "git commit -m \"fix: handle empty input\"",
    "$ ls -la /usr/local/bin | grep python3",
    "{\"key\": \"value\", \"n\": 12, \"ok\": true}",
    "a_b__c___d",
    "__init__.py",
    "0x1F 0xdeadBEEF 0b1010",
    "1e-9 3.14159 -2.5e+10",
    "    indented with four spaces",
    "\tindented with a tab",
    "/* comment */ // line comment",
    "@decorator\ndef f(x: int) -> int: ...",
    "template<typename T> T max(T a, T b);",
    "\\begin{equation} \\int_0^1 x\\,dx \\end{equation}",
]

URLS = [
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    "http://example.com/path?query=1&other=two#frag",
    "user@example.com",
    "ftp://files.example.org/pub/file-v1.2.3.tar.gz",
    "C:\\Users\\name\\Documents\\file.txt",
    "/home/user/.config/servelab/config.json",
    "www.example.co.uk",
    "192.168.0.1:8080",
    "mailto:someone@example.com?subject=Hi",
]

SPECIAL = [
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more",
    "<|im_start|><|im_end|>",
    "<|im_start|>",
    "<|im_end|>\n",
    "<|im_start|assistant",
    "< |im_start|>",
    "<|IM_START|>",
    "<repo_name>servelab<file_sep>main.cpp",
    "<filename>a.py\n<gh_stars>100",
    "<jupyter_start><jupyter_code>print(1)<jupyter_output>1<empty_output>",
    "<|im_start|><|im_start|><|im_start|>",
    " <|im_start|> spaced <|im_end|> ",
    "<issue_start>bug<issue_comment>fix<issue_closed>",
    "<reponame>x<jupyter_text>y<jupyter_script>z",
]

EDGE = [
    "",
    "\u0301",
    "e\u0301",
    "\u0301\u0301\u0301",
    "a\u200db",
    "\u200b",
    "\ufeffBOM at start",
    "\x00",
    "a\x00b",
    "\x01\x02\x03\x7f",
    "\x1c\x1d\x1e\x1f",
    "a\x1cb",
    "\u0085",
    "a\u0085b",
    "a\u00a0b",
    "a\u00a0\u00a0b",
    "\u3000全角空白\u3000",
    "a\u2003b",
    "\u2028\u2029",
    "\r\n",
    "\r\n\r\n",
    "line1\rline2",
    "\ufffd",
    "\U0010ffff",
    "\ue000 private use",
    "a" * 1000,
    "ab" * 500,
    "x" * 5000,
    "Z" * 257,
    " " * 300,
    "!" * 200,
    "9" * 300,
    "llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch" * 3,
]

# Deliberately invalid UTF-8 (stored as bytes). llama.cpp turns each bad byte
# into U+FFFD; lone surrogates and overlong forms it decodes leniently.
# (Bytes spelling a value above U+10FFFF are left out: llama.cpp aborts on them.)
INVALID_BYTES = [
    b"\xff",
    b"\xfe\xff",
    b"abc\xffdef",
    b"\x80",
    b"\x80\x80a",
    b"\xc3",
    b"a\xc3",
    b"\xc3(",
    b"\xe2\x82",
    b"a\xe2\x82",
    b"\xf0\x9f\x98",
    b"\xf0\x9f\x98 x",
    b"\xc0\x80",
    b"a\xc0\x80b",
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",
    b"hello \xe4\xb8 world",
    b"\xf8\x88\x80\x80\x80",
]


def digits():
    out = ["0", "7", "42", "123", "1234", "12345", "123456789", "3.14", "1,000,000", "-17",
           "+1 (555) 123-4567", "abc123def", "123abc", "abc123", "a1b2c3", "v1.2.3",
           "2024", "the year 2024", " 1234", "  1234", "\n123", "100%", "10x", "x10",
           "1st 2nd 3rd 4th", "007", "0.0001", "1/2", "10^9", "H2O CO2", "9" * 40,
           "١٢٣ and 123", "１２３ full-width digits"]
    for n in range(1, 21):
        out.append("".join(str((i * 7 + 3) % 10) for i in range(n)))
    return out


def whitespace():
    out = []
    for ws in [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n", "\n ", " \t ",
               "\r\n", "  \n  "]:
        out.append(ws)
        out.append("a" + ws + "b")
        out.append(ws + "hello")
        out.append("hello" + ws)
    out += ["  hello   world\n\n", "\t\tindent\n\t\tmore", "trailing spaces   ",
            "   leading spaces", "a \n\n b", "x  \t  y", " \u00a0 ", "word\n\n\nword",
            "  1", "a  1", "1  a", " !", "  !", "   !!"]
    return out


def random_strings(count, seed=1234):
    """Random strings over characters that exercise every splitter rule."""
    alphabet = [" ", " ", " ", "\t", "\n", "a", "b", "Z", "é", "ß", "1", "9", "٣", "²", "Ⅻ",
                "'", "s", "t", "re", "ll", "!", ".", ",", "$", "+", "<", "|", "~", "`", "_",
                "😀", "👍🏽", "中", "文", "ー", "\u00a0", "\u3000", "\u0301", "\u200d", "\x1c",
                "\u0085", "\r", "-", "(", ")", "…", "«", "<|im_end|>", "<|im_start|>"]
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
            for _ in range(count)]


def corpus():
    """(bytes, parse_special) pairs in a fixed order."""
    entries = []
    for group in [PROSE, PUNCTUATION, CONTRACTIONS, SCRIPTS, EMOJI, digits(), whitespace(),
                  CODE, URLS, EDGE, random_strings(150)]:
        entries += [(text.encode("utf-8"), False) for text in group]
    for text in SPECIAL:
        entries.append((text.encode("utf-8"), True))
        entries.append((text.encode("utf-8"), False))
    for text in random_strings(40, seed=99):
        entries.append((text.encode("utf-8"), True))
    entries += [(data, False) for data in INVALID_BYTES]
    return entries


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load(pre=None):
    overrides = {"tokenizer.ggml.pre": pre} if pre else None
    return llama_cpp.Llama(model_path=str(MODEL), vocab_only=True, verbose=False,
                           kv_overrides=overrides)


def detokenize(llm, ids, special):
    """llama.cpp's llama_token_to_piece for each id, concatenated.

    (Llama.detokenize is not used: it has a fixed 32-byte buffer per token, and
    SmolLM2 has longer tokens, e.g. runs of spaces.)
    """
    out = b""
    for token in ids:
        size = 64
        while True:
            buffer = (ctypes.c_char * size)()
            n = llama_cpp.llama_token_to_piece(llm._model.vocab, token, buffer, size, 0, special)
            if n >= 0:
                out += bytes(buffer[:n])
                break
            size = -n  # too small: llama.cpp returns minus the size it needs
    return out


def to_json_one_case_per_line(golden):
    """Pretty enough to diff: header fields one per line, then one line per case."""
    header = {key: value for key, value in golden.items() if key != "cases"}
    lines = ["{"]
    for key, value in header.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines.append(' "cases": [')
    cases = [json.dumps(case, ensure_ascii=False) for case in golden["cases"]]
    lines.append(",\n".join("  " + case for case in cases))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    llm = load()
    variants = {key: load(pre) for key, pre in VARIANTS.items()}
    cases = []
    for data, special in corpus():
        ids = llm.tokenize(data, add_bos=False, special=special)
        case = {"text_hex": data.hex(), "special": special, "ids": ids}
        try:
            case["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        for key, variant in variants.items():
            case[key] = variant.tokenize(data, add_bos=False, special=special)
        case["detok_hex"] = detokenize(llm, ids, special=False).hex()
        case["detok_special_hex"] = detokenize(llm, ids, special=True).hex()
        cases.append(case)
    golden = {
        "generated_by": "tools/goldens/make_tokenizer_goldens.py",
        "llama_cpp_python_version": llama_cpp.__version__,
        "model_file": MODEL.name,
        "model_sha256": sha256(MODEL),
        "pre_tokenizer": "smollm",
        "variants": VARIANTS,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(to_json_one_case_per_line(golden), encoding="utf-8")
    print(f"wrote {len(cases)} cases to {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
