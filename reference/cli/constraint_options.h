// constraint_options.h — the flags that constrain a command's output: a JSON schema, a regex,
// a list of choices, a GBNF grammar.
//
// Lab 12 (chapter 11.6, constrained decoding). Registered once and shared by
// generate, chat and grammar, so the flags mean the same everywhere; each
// becomes the ConstraintSpec the server builds from its request fields
// (reference/server/structured_output_request.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "reference/constrained/constraint_spec.h"

namespace servelab {

struct ConstraintOptions {
    std::string json_schema_file;  // "-" = stdin
    bool json_object = false;
    std::string regex;
    std::vector<std::string> choices;
    std::string gbnf_file;

    void add_to(CLI::App& command);
    // The constraint the flags ask for (kNone without any). Throws
    // servelab::Error for two of them at once or a file that cannot be read.
    ConstraintSpec spec() const;
};

}  // namespace servelab
