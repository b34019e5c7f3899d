// constraint_options.cpp — see constraint_options.h.
#include "reference/cli/constraint_options.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "kernels/common/error.h"

namespace servelab {
namespace {

std::string read_text(const std::string& path, const char* flag) {
    if (path == "-") {
        std::ostringstream text;
        text << std::cin.rdbuf();
        return text.str();
    }
    std::ifstream file(path, std::ios::binary);
    if (!file) throw Error(fmt::format("{}: cannot read '{}'", flag, path));
    return {std::istreambuf_iterator<char>(file), {}};
}

}  // namespace

void ConstraintOptions::add_to(CLI::App& command) {
    command.add_option("--json-schema", json_schema_file,
                       "the output is JSON valid under this schema file ('-' = stdin)");
    command.add_flag("--json-object", json_object, "the output is a JSON object");
    command.add_option("--regex", regex, "the output matches this regular expression, whole");
    command.add_option("--choice", choices, "the output is exactly one of these (repeatable)");
    command.add_option("--grammar", gbnf_file,
                       "the output is a sentence of this GBNF grammar file");
}

ConstraintSpec ConstraintOptions::spec() const {
    std::vector<ConstraintSpec> given;
    if (!json_schema_file.empty()) {
        given.push_back({ConstraintSpec::Kind::kJsonSchema,
                         read_text(json_schema_file, "--json-schema"),
                         {},
                         nullptr,
                         "--json-schema"});
    }
    if (json_object)
        given.push_back({ConstraintSpec::Kind::kJsonObject, "", {}, nullptr, "--json-object"});
    if (!regex.empty())
        given.push_back({ConstraintSpec::Kind::kRegex, regex, {}, nullptr, "--regex"});
    if (!choices.empty())
        given.push_back({ConstraintSpec::Kind::kChoice, "", choices, nullptr, "--choice"});
    if (!gbnf_file.empty()) {
        given.push_back({ConstraintSpec::Kind::kGbnf,
                         read_text(gbnf_file, "--grammar"),
                         {},
                         nullptr,
                         "--grammar"});
    }
    if (given.size() > 1) {
        throw Error(fmt::format("{} and {} both constrain the output; give one", given[0].param,
                                given[1].param));
    }
    return given.empty() ? ConstraintSpec{} : given.front();
}

}  // namespace servelab
