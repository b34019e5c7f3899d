// model.cpp — see model.h.
#include "reference/model/model.h"

#include "kernels/common/error.h"

namespace servelab {

Model Model::from_gguf(GgufFile file) {
    ModelConfig config = ModelConfig::from_gguf(file);
    Tokenizer tokenizer = Tokenizer::from_gguf(file);
    if (tokenizer.vocab_size() != config.vocab_size) {
        throw Error("tokenizer has " + std::to_string(tokenizer.vocab_size()) +
                    " tokens but token_embd has " + std::to_string(config.vocab_size) + " rows");
    }
    ModelWeights weights = ModelWeights::load(file, config);
    return Model{std::move(file), std::move(config), std::move(weights), std::move(tokenizer)};
}

Model Model::load(const std::string& path) {
    GgufFile file = GgufFile::open(path);  // its errors already name the path
    try {
        return from_gguf(std::move(file));
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    }
}

}  // namespace servelab
