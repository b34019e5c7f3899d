// cmd_info.cpp — `servelab info`: what is inside a GGUF model file.
//
// Part of the CLI (all labs). Prints the metadata (long arrays summarized),
// the tensor table, the parameter count and the KV-cache bytes per token —
// the figure chapter 11.3 builds on — and the chat template: the model's own
// (its source, and what it makes of a one-turn conversation) or why chat
// falls back to ChatML. --json prints the same as one object.
// --kv (Lab 3) prints instead the KV footprint of this model and of the
// named configs of reference/kv/kv_budget.h, for fp32/fp16/int8 elements,
// against a memory budget (--kv-budget).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "reference/chat/chat_format.h"
#include "reference/chat/chat_template.h"
#include "reference/cli/cli_options.h"
#include "reference/cli/commands.h"
#include "reference/kv/kv_budget.h"
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

constexpr KvDtype kReportedKvDtypes[] = {KvDtype::kF32, KvDtype::kF16, KvDtype::kInt8};

nlohmann::json kv_report_json(const std::vector<NamedModelConfig>& configs, int64_t budget) {
    nlohmann::json out;
    out["budget_bytes"] = budget;
    for (const auto& [name, config] : configs) {
        nlohmann::json entry = {{"name", name},
                                {"attention", attention_label(config)},
                                {"num_layers", config.num_layers},
                                {"num_heads", config.num_heads},
                                {"num_kv_heads", config.num_kv_heads},
                                {"head_dim", config.head_dim},
                                {"kv_lora_rank", config.kv_lora_rank},
                                {"rope_dim", config.rope_dim},
                                {"context_length", config.context_length}};
        for (KvDtype dtype : kReportedKvDtypes) {
            const KvFootprint f = kv_footprint(config, dtype, budget);
            entry["footprints"].push_back({{"dtype", kv_dtype_name(dtype)},
                                           {"bytes_per_token", f.bytes_per_token},
                                           {"bytes_at_4k", f.bytes_at_4k},
                                           {"bytes_at_32k", f.bytes_at_32k},
                                           {"max_context_tokens", f.max_context_tokens},
                                           {"concurrent_4k_requests", f.concurrent_4k_requests}});
        }
        out["configs"].push_back(entry);
    }
    return out;
}

void print_kv_report(const std::vector<NamedModelConfig>& configs, int64_t budget) {
    std::printf("KV cache per sequence (keys + values of every layer; int8 includes one fp32\n");
    std::printf("scale per token and head). Budget for the last two columns: %s.\n\n",
                format_bytes(budget).c_str());
    std::printf("%-26s %-12s %-5s %12s %12s %12s %14s %12s\n", "model", "attention", "type",
                "per token", "4k context", "32k context", "max context", "4k requests");
    for (const auto& [name, config] : configs) {
        for (KvDtype dtype : kReportedKvDtypes) {
            const KvFootprint f = kv_footprint(config, dtype, budget);
            std::printf("%-26s %-12s %-5s %12s %12s %12s %14lld %12lld\n", name.c_str(),
                        attention_label(config).c_str(), kv_dtype_name(dtype).c_str(),
                        format_bytes(f.bytes_per_token).c_str(),
                        format_bytes(f.bytes_at_4k).c_str(), format_bytes(f.bytes_at_32k).c_str(),
                        (long long)f.max_context_tokens, (long long)f.concurrent_4k_requests);
        }
    }
    std::printf(
        "\nmax context: tokens of ONE sequence whose cache fits the budget (the model's own\n"
        "context limit may be lower); 4k requests: 4096-token sequences that fit side by side.\n");
}

// The prompt format chat requests get: the model's own template (and what
// it makes of a one-turn conversation), or why they fall back to ChatML.
struct ChatTemplateReport {
    std::string source;    // tokenizer.chat_template, "" if none
    bool renders = false;  // inside the supported subset
    std::string why_not;   // when it does not
    std::string example;   // a one-turn conversation, rendered
};

ChatTemplateReport chat_template_report(const GgufFile& file) {
    ChatTemplateReport report;
    report.source = file.get_string("tokenizer.chat_template", "");
    const std::optional<ChatTemplate> chat_template = load_chat_template(file, report.why_not);
    const std::vector<ChatMessage> conversation = {{"user", "Hello!"}};
    if (!chat_template) {
        report.example = format_chatml(conversation, /*add_generation_prompt=*/true);
        return report;
    }
    ChatTemplateInputs inputs;
    inputs.messages = conversation;
    set_special_tokens(inputs, Tokenizer::from_gguf(file));
    try {
        report.example = chat_template->render(inputs);
        report.renders = true;
    } catch (const Error& e) {
        report.why_not = fmt::format(
            "the model's chat template fails on a one-turn conversation "
            "({})",
            e.what());
        report.example = format_chatml(conversation, /*add_generation_prompt=*/true);
    }
    return report;
}

void print_indented(const std::string& text) {
    size_t start = 0;
    while (start <= text.size()) {
        const size_t end = std::min(text.find('\n', start), text.size());
        std::printf("  | %s\n", text.substr(start, end - start).c_str());
        start = end + 1;
    }
}

void print_chat_template(const ChatTemplateReport& report) {
    if (report.renders) {
        std::printf(
            "\nchat template: the model's own (tokenizer.chat_template, %zu bytes), "
            "rendered by servelab's Jinja subset (docs/chat_templates.md)\n",
            report.source.size());
    } else {
        std::printf("\nchat template: ChatML fallback: %s\n", report.why_not.c_str());
    }
    if (!report.source.empty()) {
        std::printf("template source:\n");
        print_indented(report.source);
    }
    std::printf("a one-turn conversation ({\"user\": \"Hello!\"}) becomes:\n");
    print_indented(report.example);
}

struct InfoOptions {
    std::string path = kDefaultModelPath;
    OutputOptions output;
    bool kv = false;
    std::string kv_budget = "16GiB";
};

// --kv: the KV-cache footprint of the loaded model beside the named configs.
void run_info_kv(const InfoOptions& opts, const ModelConfig& config) {
    const int64_t budget = parse_byte_size(opts.kv_budget);
    std::vector<NamedModelConfig> configs = {{"(loaded model)", config}};
    for (auto& named : named_model_configs()) configs.push_back(std::move(named));
    if (opts.output.json) {
        nlohmann::json out = kv_report_json(configs, budget);
        out["loaded_model"] = {{"path", opts.path}, {"name", config.name}};
        print_json(out);
    } else {
        std::printf("(loaded model) = %s, %s\n\n", opts.path.c_str(), config.name.c_str());
        print_kv_report(configs, budget);
    }
}

nlohmann::json info_json(const InfoOptions& opts, const GgufFile& file, const ModelConfig& config) {
    nlohmann::json out;
    out["path"] = opts.path;
    out["gguf_version"] = file.version();
    out["parameters"] = count_parameters(config);
    out["kv_bytes_per_token_fp32"] = kv_cache_bytes(config, 1, KvDtype::kF32);
    for (const auto& [key, value] : file.metadata()) out["metadata"][key] = value_to_json(value);
    const ChatTemplateReport chat = chat_template_report(file);
    out["chat_template"] = {{"renders", chat.renders},
                            {"fallback", chat.renders ? "" : "chatml"},
                            {"why_not", chat.why_not},
                            {"example", chat.example}};
    for (const GgufTensorInfo& t : file.tensors()) {
        out["tensors"].push_back({{"name", t.name},
                                  {"type", ggml_type_traits(t.type).name},
                                  {"dims", t.dims},
                                  {"bytes", t.size_bytes}});
    }
    return out;
}

// The file, the model's shape, its parameters and its KV cost per token.
void print_info_summary(const InfoOptions& opts, const GgufFile& file, const ModelConfig& config) {
    const int64_t parameters = count_parameters(config);
    std::printf("file:        %s (GGUF v%u, %zu bytes)\n", opts.path.c_str(), file.version(),
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
    const KvLayout layout = kv_layout(config);
    std::printf(
        "KV cache:    %lld bytes per token in fp32 "
        "(%lld layers x (%lld + %lld cached numbers) x 4 bytes; %s)\n",
        (long long)kv_cache_bytes(config, 1, KvDtype::kF32), (long long)config.num_layers,
        (long long)layout.keys.elements(), (long long)layout.values.elements(),
        attention_label(config).c_str());
}

void print_info(const InfoOptions& opts, const GgufFile& file, const ModelConfig& config) {
    print_info_summary(opts, file, config);
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
    print_chat_template(chat_template_report(file));
}

void run_info(const InfoOptions& opts) {
    // Only the header is needed: the weights are not dequantized.
    const GgufFile file = GgufFile::open(opts.path);
    const ModelConfig config = ModelConfig::from_gguf(file);
    if (opts.kv) {
        run_info_kv(opts, config);
    } else if (opts.output.json) {
        print_json(info_json(opts, file, config));
    } else {
        print_info(opts, file, config);
    }
}

}  // namespace

void add_info(CLI::App& app) {
    auto opts = std::make_shared<InfoOptions>();
    CLI::App* cmd = app.add_subcommand("info", "show a model's metadata, tensors and sizes");
    cmd->add_option("-m,--model", opts->path, "GGUF model file")->capture_default_str();
    opts->output.add_to(*cmd);
    cmd->add_flag("--kv", opts->kv,
                  "KV-cache footprint of this model and of named configs (Lab 3)");
    cmd->add_option("--kv-budget", opts->kv_budget, "memory for the KV cache, e.g. 16GiB, 80GB")
        ->capture_default_str();
    cmd->callback([opts] { run_info(*opts); });
}

}  // namespace servelab::cli
