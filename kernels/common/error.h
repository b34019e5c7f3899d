// error.h — the one exception type servelab throws for bad input.
//
// It sits at the bottom of the tree, in kernels/common/, so that every layer
// (kernels, the reference engine, the CLI and the server) may throw it
// without an include that points upward.
//
// Every user-facing failure (a bad model file, a bad flag value, an unknown
// token) is reported as a servelab::Error whose message is one complete line
// naming the problem. The CLI catches it at the top, prints the line to stderr
// and exits non-zero; nothing below the CLI prints or exits on its own.
#pragma once

#include <stdexcept>
#include <string>

namespace servelab {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace servelab
