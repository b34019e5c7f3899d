// trace.cpp — see trace.h.
#include "reference/experiments/trace.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <random>

#include "kernels/common/error.h"

namespace servelab {
namespace {

int64_t integer_field(const nlohmann::json& record, const char* name, int64_t fallback,
                      const std::string& where) {
    if (!record.contains(name)) {
        if (fallback != INT64_MIN) return fallback;
        throw Error(fmt::format("{}: missing \"{}\"", where, name));
    }
    const nlohmann::json& value = record.at(name);
    if (!value.is_number_integer()) {
        throw Error(fmt::format("{}: \"{}\" must be an integer", where, name));
    }
    return value.get<int64_t>();
}

constexpr int64_t kMaxSegmentId = int64_t(1) << 40;

std::vector<TraceRequest::Segment> parse_segments(const nlohmann::json& value,
                                                  const TraceRequest& r, const std::string& where) {
    if (!value.is_array() || value.empty()) {
        throw Error(fmt::format("{}: \"segments\" must be a non-empty array", where));
    }
    if (r.prefix_tokens > 0) {
        throw Error(fmt::format("{}: give \"segments\" or \"prefix_tokens\", not both", where));
    }
    std::vector<TraceRequest::Segment> segments;
    int64_t total = 0;
    for (const nlohmann::json& item : value) {
        const bool pair = item.is_array() && item.size() == 2 && item[0].is_number_integer() &&
                          item[1].is_number_integer();
        if (!pair) throw Error(fmt::format("{}: each segment must be [id, length]", where));
        const TraceRequest::Segment segment{item[0].get<int64_t>(), item[1].get<int64_t>()};
        if (segment.id < 0 || segment.id >= kMaxSegmentId || segment.length < 1 ||
            segment.length > r.prompt_tokens) {
            throw Error(
                fmt::format("{}: segment [{}, {}]: the id must be in [0, 2^40) and the "
                            "length in [1, prompt_tokens]",
                            where, segment.id, segment.length));
        }
        total += segment.length;
        segments.push_back(segment);
    }
    if (total != r.prompt_tokens) {
        throw Error(fmt::format("{}: segments add up to {} tokens, prompt_tokens is {}", where,
                                total, r.prompt_tokens));
    }
    return segments;
}

}  // namespace

void TraceRequest::truncate_prompt(int64_t max_tokens) {
    if (max_tokens <= 0 || prompt_tokens <= max_tokens) return;
    prompt_tokens = max_tokens;
    prefix_tokens = std::min(prefix_tokens, max_tokens);
    int64_t kept = 0;
    size_t count = 0;
    while (count < segments.size() && kept < max_tokens) {
        segments[count].length = std::min(segments[count].length, max_tokens - kept);
        kept += segments[count].length;
        ++count;
    }
    segments.resize(count);
}

std::vector<TraceRequest> load_trace(const std::string& path) {
    std::ifstream file(path);
    if (!file) throw Error(fmt::format("cannot open trace '{}'", path));
    std::vector<TraceRequest> requests;
    std::string line;
    for (int64_t line_number = 1; std::getline(file, line); ++line_number) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", path, line_number);
        const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
        if (record.is_discarded() || !record.is_object()) {
            throw Error(fmt::format("{}: not a JSON object", where));
        }
        TraceRequest r;
        r.id = integer_field(record, "id", int64_t(requests.size()), where);
        r.prompt_tokens = integer_field(record, "prompt_tokens", INT64_MIN, where);
        r.output_tokens = integer_field(record, "output_tokens", INT64_MIN, where);
        r.prefix_group = integer_field(record, "prefix_group", -1, where);
        r.prefix_tokens = integer_field(record, "prefix_tokens", 0, where);
        if (r.prompt_tokens < 1 || r.output_tokens < 1 || r.prompt_tokens > (1 << 24) ||
            r.output_tokens > (1 << 24)) {
            throw Error(
                fmt::format("{}: prompt_tokens and output_tokens must be in [1, 2^24]", where));
        }
        if (r.prefix_tokens < 0 || r.prefix_tokens > r.prompt_tokens) {
            throw Error(fmt::format("{}: prefix_tokens must be in [0, prompt_tokens]", where));
        }
        if (record.contains("segments"))
            r.segments = parse_segments(record.at("segments"), r, where);
        requests.push_back(r);
    }
    if (requests.empty()) throw Error(fmt::format("trace '{}' holds no requests", path));
    return requests;
}

namespace {

// `count` ids drawn from a generator seeded with `seed`: the same seed gives
// the same ids, so a prefix group's requests agree on their prefix.
void append_random_ids(std::vector<TokenId>& ids, uint64_t seed, int64_t count,
                       int64_t vocab_size) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> id(0, vocab_size - 1);
    for (int64_t i = 0; i < count; ++i) ids.push_back(TokenId(id(rng)));
}

}  // namespace

std::vector<TokenId> trace_prompt_ids(const TraceRequest& r, int64_t vocab_size, uint64_t salt) {
    const uint64_t salt_bits = salt * 0x9E3779B97F4A7C15ull;  // spreads small salts over all bits
    std::vector<TokenId> ids;
    if (!r.segments.empty()) {
        // A segment's ids depend on its id alone: the same segment, wherever
        // it appears, is the same tokens.
        for (const TraceRequest::Segment& segment : r.segments) {
            append_random_ids(ids, ((uint64_t(3) << 44) + uint64_t(segment.id)) ^ salt_bits,
                              segment.length, vocab_size);
        }
        return ids;
    }
    append_random_ids(ids, (0x9000 + uint64_t(r.prefix_group)) ^ salt_bits, r.prefix_tokens,
                      vocab_size);
    append_random_ids(ids, ((uint64_t(1) << 40) + uint64_t(r.id)) ^ salt_bits,
                      r.prompt_tokens - r.prefix_tokens, vocab_size);
    return ids;
}

namespace {

// Each is one SmolLM2 token with its leading space (tests/unit/trace_test.cpp
// checks this with the model's tokenizer).
constexpr const char* kPromptWords[] = {
    "the",     "of",      "and",     "to",         "in",      "is",        "was",       "for",
    "on",      "that",    "with",    "as",         "by",      "at",        "from",      "his",
    "her",     "it",      "an",      "were",       "are",     "which",     "this",      "be",
    "or",      "has",     "had",     "not",        "but",     "also",      "their",     "they",
    "one",     "its",     "first",   "new",        "after",   "who",       "two",       "been",
    "more",    "other",   "all",     "time",       "into",    "she",       "when",      "there",
    "during",  "only",    "over",    "years",      "would",   "most",      "some",      "up",
    "him",     "then",    "many",    "year",       "can",     "may",       "later",     "out",
    "about",   "where",   "while",   "three",      "both",    "used",      "made",      "being",
    "these",   "through", "between", "under",      "well",    "so",        "such",      "city",
    "until",   "part",    "people",  "world",      "before",  "war",       "since",     "them",
    "school",  "known",   "we",      "state",      "back",    "around",    "called",    "name",
    "film",    "second",  "same",    "long",       "high",    "each",      "including", "however",
    "several", "because", "down",    "early",      "if",      "against",   "life",      "family",
    "way",     "house",   "work",    "last",       "area",    "could",     "took",      "along",
    "than",    "how",     "what",    "four",       "did",     "any",       "small",     "five",
    "make",    "public",  "own",     "still",      "found",   "end",       "among",     "will",
    "great",   "season",  "album",   "set",        "played",  "form",      "united",    "use",
    "group",   "local",   "based",   "government", "like",    "team",      "system",    "much",
    "just",    "another", "old",     "became",     "best",    "following", "without",   "death",
    "even",    "main",    "must",    "due",        "large",   "american",  "song",      "number",
    "home",    "young",   "place",   "very",       "power",   "within",    "series",    "few",
    "often",   "next",    "general", "music",      "book",    "show",      "different", "do",
    "day",     "water",   "light",   "land",       "order",   "point",     "case",      "line",
    "hand",    "story",   "church",  "party",      "given",   "right",     "game",      "important",
    "history", "major",   "human",   "body",       "country",
};

}  // namespace

int64_t trace_prompt_vocabulary_size() {
    return int64_t(std::size(kPromptWords));
}

std::string trace_prompt_text(const TraceRequest& r, uint64_t salt) {
    std::string text;
    for (const TokenId word : trace_prompt_ids(r, trace_prompt_vocabulary_size(), salt)) {
        text += ' ';
        text += kPromptWords[word];
    }
    return text;
}

std::vector<double> poisson_arrivals_s(int64_t count, double rate, uint64_t seed) {
    std::vector<double> arrivals(size_t(count), 0.0);
    if (rate <= 0) return arrivals;
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(rate);
    double t = 0;
    for (double& arrival : arrivals) {
        t += gap(rng);
        arrival = t;
    }
    return arrivals;
}

}  // namespace servelab
