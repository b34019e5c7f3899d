// model.h — everything loaded from one GGUF file: config, weights, tokenizer.
//
// Part of the model loader (all labs). The GGUF mapping is kept open for the
// model's lifetime so `servelab info` can list the tensor table; the weights
// themselves are copies made at load, still in the file's block format
// (model_weights.h).
#pragma once

#include <string>

#include "reference/model/gguf_reader.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"
#include "reference/model/tokenizer.h"

namespace servelab {

struct Model {
    GgufFile file;
    ModelConfig config;
    ModelWeights weights;
    Tokenizer tokenizer;

    // Throws servelab::Error with one line naming the problem (and the path).
    static Model load(const std::string& path);
    // The same from an already parsed file (tests build GGUF images in memory).
    static Model from_gguf(GgufFile file);
};

}  // namespace servelab
