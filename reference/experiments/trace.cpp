// trace.cpp — see trace.h.
#include "reference/experiments/trace.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "reference/common/error.h"

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

}  // namespace

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
        requests.push_back(r);
    }
    if (requests.empty()) throw Error(fmt::format("trace '{}' holds no requests", path));
    return requests;
}

}  // namespace servelab
