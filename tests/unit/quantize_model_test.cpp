// quantize_model_test.cpp — `servelab quantize` on a tiny model: the file it writes.
//
// A GGUF in, a GGUF out (reference/quant/quantize_model.h). The written file
// keeps every metadata key and the tokenizer, stores the seven projections of
// each layer in the asked type and everything else as it was; AWQ's scales,
// folded into the norms and the v and up projections, leave the model's
// function unchanged, so at 8 bits the AWQ and GPTQ models are as close to
// the source as RTN's. Options a type cannot store fail with one line, and a
// failed run leaves no file behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "reference/engine/model_runner.h"
#include "reference/model/gguf_reader.h"
#include "reference/model/model.h"
#include "reference/model/tiny_model.h"
#include "reference/quant/quantize_model.h"
#include "tests/unit/test_util.h"

namespace servelab {
namespace {

using test::RandomSource;

class QuantizeModel : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() /
               ("servelab_quantize_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(dir_);
        TinyModelOptions options;
        options.seed = uint64_t(random_.integer(1, 1 << 30));
        source_ = (dir_ / "source.gguf").string();
        write_tiny_model(options, source_);
        // Calibration text: words from a small list, enough tokens for 4 × 96.
        const char* words[] = {"the ",      "cache ", "of ",   "keys ",  "and ",
                               "values ",   "grows ", "with ", "every ", "token ",
                               "decoded. ", "A ",     "block "};
        std::ofstream text(dir_ / "calibration.txt");
        for (int i = 0; i < 1200; ++i) text << words[random_.integer(0, 12)];
        text_ = (dir_ / "calibration.txt").string();
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    QuantizeOptions options_for(QuantMethod method, GgmlType type, int bits, bool symmetric,
                                int64_t group_size) {
        QuantizeOptions o;
        o.method = method;
        o.output_type = type;
        o.scheme.bits = bits;
        o.scheme.symmetric = symmetric;
        o.scheme.group_size = group_size;
        o.calibration.text_path = text_;
        o.calibration.num_sequences = 4;
        o.calibration.tokens_per_sequence = 96;
        o.awq_grid = 10;
        return o;
    }

    std::string out(const std::string& name) const { return (dir_ / name).string(); }

    // The logits of every position of a fixed random prompt.
    std::vector<float> logits_of(const std::string& path) {
        Model model = Model::load(path);
        model.weights.set_matmul_mode(MatmulMode::kExact);
        ModelRunner runner(model.config, model.weights);
        return runner.forward({prompt_, 0, LogitsFor::kAllTokens});
    }

    RandomSource random_;
    std::filesystem::path dir_;
    std::string source_, text_;
    std::vector<TokenId> prompt_ = {5, 77, 120, 9, 33, 250, 18, 64, 101, 7};
};

double rms_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) sum += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    return std::sqrt(sum / double(a.size()));
}

TEST_F(QuantizeModel, KeepsEveryKeyAndStoresTheProjectionsInTheAskedType) {
    SCOPED_TRACE(random_.trace());
    const QuantizeReport report = quantize_model(
        source_, out("rtn.gguf"), options_for(QuantMethod::kRtn, GgmlType::kQ4_0, 4, true, 32));
    const GgufFile source = GgufFile::open(source_);
    const GgufFile written = GgufFile::open(out("rtn.gguf"));
    std::set<std::string> source_keys, written_keys;
    for (const auto& [key, value] : source.metadata()) source_keys.insert(key);
    for (const auto& [key, value] : written.metadata()) written_keys.insert(key);
    for (const std::string& key : source_keys) {
        if (key == "general.file_type") continue;
        EXPECT_TRUE(written_keys.count(key)) << "metadata key " << key << " was dropped";
    }
    EXPECT_TRUE(written_keys.count("general.quantized_by"));
    ASSERT_EQ(source.tensors().size(), written.tensors().size());
    int64_t projections = 0;
    for (const GgufTensorInfo& info : written.tensors()) {
        const GgufTensorInfo* was = source.find_tensor(info.name);
        ASSERT_NE(was, nullptr) << info.name;
        EXPECT_EQ(info.dims, was->dims) << info.name;
        const auto has = [&](const char* part) {
            return info.name.find(part) != std::string::npos;
        };
        const bool projection = has("attn_q.") || has("attn_k.") || has("attn_v.") ||
                                has("attn_output.") || (has("ffn_") && !has("norm"));
        if (projection) {
            EXPECT_EQ(info.type, GgmlType::kQ4_0) << info.name;
            ++projections;
        } else {
            EXPECT_EQ(info.type, was->type) << info.name << " is not a projection: kept as it was";
        }
    }
    const Model model = Model::load(source_);
    EXPECT_EQ(projections, 7 * model.config.num_layers);
    EXPECT_EQ(report.file_bytes, int64_t(std::filesystem::file_size(out("rtn.gguf"))));
    EXPECT_DOUBLE_EQ(report.bits_per_weight, 4.5);
    // The tokenizer is the source's: the same ids for the same text.
    const Model loaded = Model::load(out("rtn.gguf"));
    EXPECT_EQ(loaded.tokenizer.encode("the cache of keys", false),
              model.tokenizer.encode("the cache of keys", false));
}

// AWQ divides the norms' weights (and v's and up's rows) by the scales it
// multiplies the next projections' columns by. At 8 bits the quantization
// itself costs little, so a folding mistake would stand out: the AWQ model
// must be as close to the source as the RTN one.
TEST_F(QuantizeModel, AwqAndGptqAtEightBitsKeepTheSourcesFunction) {
    SCOPED_TRACE(random_.trace());
    const std::vector<float> want = logits_of(source_);
    quantize_model(source_, out("rtn8.gguf"),
                   options_for(QuantMethod::kRtn, GgmlType::kQ8_0, 8, true, 32));
    const QuantizeReport awq = quantize_model(
        source_, out("awq8.gguf"), options_for(QuantMethod::kAwq, GgmlType::kQ8_0, 8, true, 32));
    const QuantizeReport gptq = quantize_model(
        source_, out("gptq8.gguf"), options_for(QuantMethod::kGptq, GgmlType::kQ8_0, 8, true, 32));
    const double rtn_gap = rms_difference(logits_of(out("rtn8.gguf")), want);
    const double awq_gap = rms_difference(logits_of(out("awq8.gguf")), want);
    const double gptq_gap = rms_difference(logits_of(out("gptq8.gguf")), want);
    EXPECT_LT(awq_gap, 2.0 * rtn_gap + 1e-4)
        << "AWQ's 8-bit model's logits are " << awq_gap << " (rms) from the source's, RTN's "
        << rtn_gap
        << ": the scales folded into the norms and the v and up rows must undo the "
           "ones multiplied into the next projections' columns";
    EXPECT_LT(gptq_gap, 2.0 * rtn_gap + 1e-4) << "GPTQ's 8-bit model's logits are " << gptq_gap
                                              << " from the source's, RTN's " << rtn_gap;
    // Per layer and input, both report their output error next to RTN's.
    const Model model = Model::load(source_);
    EXPECT_EQ(awq.errors.size(), size_t(4 * model.config.num_layers));
    EXPECT_EQ(gptq.errors.size(), size_t(4 * model.config.num_layers));
    for (const LayerError& e : awq.errors) {
        EXPECT_LE(e.method_error, e.rtn_error * (1 + 1e-9)) << "AWQ tries α = 0, which is RTN";
    }
    EXPECT_GT(awq.calibration_seconds, 0.0);
}

TEST_F(QuantizeModel, FakeQuantizationWritesF16ValuesOfAnyGrid) {
    SCOPED_TRACE(random_.trace());
    const QuantizeReport report = quantize_model(
        source_, out("fake3.gguf"), options_for(QuantMethod::kRtn, GgmlType::kF16, 3, false, 48));
    EXPECT_DOUBLE_EQ(report.bits_per_weight, 3.0 + 32.0 / 48.0);
    const GgufFile written = GgufFile::open(out("fake3.gguf"));
    EXPECT_EQ(written.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::kF16);
    const std::vector<float> logits = logits_of(out("fake3.gguf"));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(QuantizeModel, RefusesWhatTheTypeCannotStoreAndLeavesNoFile) {
    SCOPED_TRACE(random_.trace());
    auto refused = [&](QuantizeOptions o, const std::string& expected) {
        const std::string message =
            test::error_of([&] { quantize_model(source_, out("no.gguf"), o); });
        EXPECT_NE(message.find(expected), std::string::npos) << message;
        EXPECT_FALSE(std::filesystem::exists(out("no.gguf")));
        EXPECT_FALSE(std::filesystem::exists(out("no.gguf.partial")));
    };
    refused(options_for(QuantMethod::kRtn, GgmlType::kQ4_0, 4, true, 48), "32 weights");
    refused(options_for(QuantMethod::kRtn, GgmlType::kQ4_1, 4, true, 32), "asymmetric");
    refused(options_for(QuantMethod::kRtn, GgmlType::kQ8_0, 4, true, 32), "8-bit");
    QuantizeOptions no_text = options_for(QuantMethod::kGptq, GgmlType::kQ4_0, 4, true, 32);
    no_text.calibration.text_path = out("missing.txt");
    refused(no_text, "missing.txt");
    const std::string message = test::error_of([&] {
        quantize_model(source_, (dir_ / "no_such_dir" / "x.gguf").string(),
                       options_for(QuantMethod::kRtn, GgmlType::kQ4_0, 4, true, 32));
    });
    EXPECT_NE(message.find("no_such_dir"), std::string::npos) << message;
}

}  // namespace
}  // namespace servelab
