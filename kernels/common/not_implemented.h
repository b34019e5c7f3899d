// not_implemented.h — what a lab skeleton throws where the student's code goes.
//
// Part of the lab framework (all labs). tools/labkit/make_skeletons.py replaces each
// solution region with `throw NotImplemented("labNN: <function>")`, so an
// unsolved exercise fails its tests with a message naming the lab and the
// function, instead of crashing or silently returning garbage. It sits in
// kernels/common/ because the kernels' skeletons include it too, and kernels
// never include reference/.
#pragma once

#include <stdexcept>
#include <string>

namespace servelab {

class NotImplemented : public std::logic_error {
  public:
    explicit NotImplemented(const std::string& what)
        : std::logic_error("not implemented: " + what) {}
};

}  // namespace servelab
