// prompt_key.cpp — see prompt_key.h.
#include "reference/router/prompt_key.h"

namespace servelab {
namespace {

// Between a message's role and its content, and after each message: ASCII's
// unit and record separators, which chat text hardly ever holds. Were a
// message to hold them, two conversations could share a key they should
// not; that costs a cache miss, never a wrong answer.
constexpr char kRoleEnd = '\x1f';
constexpr char kMessageEnd = '\x1e';

// FNV-1a, 64 bits: simple enough to check by eye, and stable across runs
// and machines (std::hash is neither promised to be).
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr uint64_t kChainRoot = kFnvOffset;

uint64_t fnv1a(uint64_t hash, std::string_view bytes) {
    for (const char c : bytes) {
        hash ^= uint8_t(c);
        hash *= kFnvPrime;
    }
    return hash;
}

// A chat message's content as text: a string, or the text of its parts.
std::string content_text(const nlohmann::json& content) {
    if (content.is_string()) return content.get<std::string>();
    std::string text;
    if (!content.is_array()) return text;
    for (const nlohmann::json& part : content) {
        if (part.is_object() && part.contains("text") && part["text"].is_string()) {
            text += part["text"].get<std::string>();
        }
    }
    return text;
}

}  // namespace

std::string routing_text(const nlohmann::json& body, bool chat) {
    if (!body.is_object()) return "";
    if (!chat) {
        const auto prompt = body.find("prompt");
        if (prompt == body.end()) return "";
        // dump() recurses once per level: safe only because the body's
        // nesting was bounded before it was parsed (request_json.h).
        return prompt->is_string() ? prompt->get<std::string>() : prompt->dump();
    }
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array()) return "";
    std::string text;
    for (const nlohmann::json& message : *messages) {
        if (!message.is_object()) continue;
        if (message.contains("role") && message["role"].is_string()) {
            text += message["role"].get<std::string>();
        }
        text += kRoleEnd;
        if (message.contains("content")) text += content_text(message["content"]);
        text += kMessageEnd;
    }
    return text;
}

std::vector<uint64_t> prefix_block_keys(std::string_view text, int64_t block_chars) {
    std::vector<uint64_t> keys;
    const size_t block = size_t(block_chars);
    keys.reserve(text.size() / block);
    uint64_t key = kChainRoot;
    for (size_t start = 0; start + block <= text.size(); start += block) {
        // The parent's key is hashed in as bytes, so key i depends on every
        // character of blocks 0..i.
        const uint64_t parent = key;
        key = fnv1a(kFnvOffset,
                    std::string_view(reinterpret_cast<const char*>(&parent), sizeof(parent)));
        key = fnv1a(key, text.substr(start, block));
        keys.push_back(key);
    }
    return keys;
}

}  // namespace servelab
