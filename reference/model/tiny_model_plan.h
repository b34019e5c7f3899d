// tiny_model_plan.h — what a tiny model holds, before any value is drawn.
//
// Part of the test tooling (all labs). The generator's two ways to fill a
// model share this plan: the sequential stream (tiny_model.cpp, small test
// models) and the chunked, multithreaded stream to disk
// (tiny_model_streaming.cpp, models of a real size for benchmarks). The plan
// is the metadata (hyperparameters, vocabulary) and each tensor's name,
// shape, type and distribution, in file order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/model/gguf_writer.h"
#include "reference/model/tiny_model.h"

namespace servelab {

// How a tensor's values are drawn from standard normal draws n.
enum class TinyInit {
    kScaled,  // n * scale: matrices (scale 1/sqrt(in_features)) and the embedding
    kNorm,    // 1 + 0.1 n: RMSNorm weights, near 1 so they matter but do not dominate
};

struct TinyTensorPlan {
    std::string name;
    std::vector<int64_t> dims;  // dims[0] is the row length
    GgmlType type;
    TinyInit init;
    float scale = 1.0f;  // kScaled only

    int64_t num_values() const;
};

struct TinyModelPlan {
    GgufWriter metadata;  // hyperparameters and vocabulary, no tensors yet
    std::vector<TinyTensorPlan> tensors;
};

// Checks the options (throws servelab::Error) and lays the model out.
TinyModelPlan plan_tiny_model(const TinyModelOptions& options);

// Where the chunked stream's bytes go: a file, or memory (tests). `write`
// is called from several threads at once, for byte ranges that never
// overlap, in any order; `reserve` once before, with the file's size.
class TinyModelSink {
  public:
    virtual ~TinyModelSink() = default;
    virtual void reserve(uint64_t file_bytes) = 0;
    virtual void write(uint64_t offset, const uint8_t* bytes, size_t size) = 0;
};

// The chunked stream (options.write_threads > 0), tiny_model_streaming.cpp.
void stream_tiny_model(const TinyModelOptions& options, TinyModelSink& sink);
std::vector<uint8_t> make_tiny_model_streaming(const TinyModelOptions& options);
void write_tiny_model_streaming(const TinyModelOptions& options, const std::string& path);

}  // namespace servelab
