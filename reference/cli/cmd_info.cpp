// cmd_info.cpp — `servelab info`: what is inside a GGUF model file.
//
// Part of the CLI (all labs). Prints the metadata (long arrays summarized),
// the tensor table, the parameter count and the KV-cache bytes per token —
// the figure chapter 11.3 builds on. --json prints the same as one object.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/model_config.h"
#include "reference/model/model_weights.h"

namespace servelab::cli {
namespace {

constexpr size_t kArrayPreview = 4;  // elements of a long array shown in text mode

std::string value_to_string(const GgufValue& value) {
    switch (value.type) {
        case GgufValueType::kString:
            return "\"" + value.as_string + "\"";
        case GgufValueType::kBool:
            return value.as_uint ? "true" : "false";
        case GgufValueType::kFloat32:
        case GgufValueType::kFloat64:
            return fmt::format("{}", value.as_float);
        case GgufValueType::kInt8:
        case GgufValueType::kInt16:
        case GgufValueType::kInt32:
        case GgufValueType::kInt64:
            return fmt::format("{}", value.as_int);
        case GgufValueType::kArray: {
            std::string text = fmt::format("[{} x {}:", value.array.size(),
                                           gguf_value_type_name(value.array_type));
            for (size_t i = 0; i < value.array.size() && i < kArrayPreview; ++i) {
                text += " " + value_to_string(value.array[i]);
            }
            return text + (value.array.size() > kArrayPreview ? " ...]" : "]");
        }
        default:
            return fmt::format("{}", value.as_uint);
    }
}

nlohmann::json value_to_json(const GgufValue& value) {
    switch (value.type) {
        case GgufValueType::kString:
            return value.as_string;
        case GgufValueType::kBool:
            return value.as_uint != 0;
        case GgufValueType::kFloat32:
        case GgufValueType::kFloat64:
            return value.as_float;
        case GgufValueType::kInt8:
        case GgufValueType::kInt16:
        case GgufValueType::kInt32:
        case GgufValueType::kInt64:
            return value.as_int;
        case GgufValueType::kArray: {
            nlohmann::json array = nlohmann::json::array();
            for (const GgufValue& element : value.array) array.push_back(value_to_json(element));
            return array;
        }
        default:
            return value.as_uint;
    }
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
    return text + "]";
}

}  // namespace

void add_info_command(CLI::App& app) {
    struct Options {
        std::string path = kDefaultModelPath;
        bool json = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand("info", "show a model's metadata, tensors and sizes");
    cmd->add_option("-m,--model", opts->path, "GGUF model file")->capture_default_str();
    cmd->add_flag("--json", opts->json, "print one JSON object");
    cmd->callback([opts] {
        // Only the header is needed: the weights are not dequantized.
        const GgufFile file = GgufFile::open(opts->path);
        const ModelConfig config = ModelConfig::from_gguf(file);
        const int64_t parameters = count_parameters(config);

        if (opts->json) {
            nlohmann::json out;
            out["path"] = opts->path;
            out["gguf_version"] = file.version();
            out["parameters"] = parameters;
            out["kv_bytes_per_token_fp32"] = config.kv_bytes_per_token();
            for (const auto& [key, value] : file.metadata())
                out["metadata"][key] = value_to_json(value);
            for (const GgufTensorInfo& t : file.tensors()) {
                out["tensors"].push_back({{"name", t.name},
                                          {"type", ggml_type_traits(t.type).name},
                                          {"dims", t.dims},
                                          {"bytes", t.size_bytes}});
            }
            std::printf("%s\n", out.dump(2).c_str());
            return;
        }
        std::printf("file:        %s (GGUF v%u, %zu bytes)\n", opts->path.c_str(), file.version(),
                    file.file_size());
        std::printf("model:       %s (%s)\n", config.name.c_str(), config.architecture.c_str());
        std::printf(
            "layers %lld, dim %lld, ffn %lld, heads %lld, kv heads %lld, head dim %lld, "
            "vocab %lld, context %lld\n",
            (long long)config.num_layers, (long long)config.dim, (long long)config.ffn_dim,
            (long long)config.num_heads, (long long)config.num_kv_heads, (long long)config.head_dim,
            (long long)config.vocab_size, (long long)config.context_length);
        std::printf("parameters:  %lld (%.1f M)%s\n", (long long)parameters, parameters / 1e6,
                    config.tied_embeddings ? ", output head tied to the embedding" : "");
        std::printf(
            "KV cache:    %lld bytes per token in fp32 "
            "(2 x %lld layers x %lld kv heads x %lld dims x 4 bytes)\n",
            (long long)config.kv_bytes_per_token(), (long long)config.num_layers,
            (long long)config.num_kv_heads, (long long)config.head_dim);
        std::printf("\nmetadata (%zu keys):\n", file.metadata().size());
        for (const auto& [key, value] : file.metadata()) {
            std::string text = value_to_string(value);
            if (text.size() > 100) text = text.substr(0, 97) + "...";
            std::printf("  %-45s %s\n", key.c_str(), text.c_str());
        }
        std::printf("\ntensors (%zu):\n", file.tensors().size());
        for (const GgufTensorInfo& t : file.tensors()) {
            std::printf("  %-32s %-5s %-16s %12llu bytes\n", t.name.c_str(),
                        std::string(ggml_type_traits(t.type).name).c_str(),
                        dims_to_string(t.dims).c_str(), (unsigned long long)t.size_bytes);
        }
    });
}

}  // namespace servelab::cli
