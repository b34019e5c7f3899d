// chat_request.cpp — see chat_request.h.
#include "reference/server/chat_request.h"

#include <fmt/format.h>

#include <set>
#include <string>

#include "reference/chat/tool_call_parser.h"

namespace servelab {
namespace {

using Json = nlohmann::ordered_json;

// `param` names the member in errors (default: `name`, a top-level field).
bool flag(const Json& object, const char* name, bool fallback, const std::string& param = "") {
    const Json* value = request_field(object, name);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) {
        refuse_field(param.empty() ? name : param, fmt::format("'{}' must be true or false", name));
    }
    return value->get<bool>();
}

std::string text_field(const Json& object, const char* name, const std::string& param) {
    const Json* value = request_field(object, name);
    if (value == nullptr || !value->is_string()) {
        refuse_field(param, fmt::format("'{}' must be a string", name));
    }
    return value->get<std::string>();
}

// A message's content: a string, or a list of {"type": "text", "text": …} parts.
std::string message_content(const Json& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array())
        refuse_field(param, "content must be a string or a list of text parts");
    std::string text;
    for (const Json& part : content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
            refuse_field(param, "only text content parts are supported");
        }
        text += part["text"].get<std::string>();
    }
    return text;
}

// A call's arguments: JSON text of an object ("" stands for {}), or an
// object given as such. Kept as text; the template gets them parsed.
std::string call_arguments(const Json& function, const std::string& param) {
    const Json* arguments = request_field(function, "arguments");
    if (arguments != nullptr && arguments->is_object()) return arguments->dump();
    if (arguments == nullptr || !arguments->is_string()) {
        refuse_field(param, "'arguments' must be a string of JSON (an object)");
    }
    const std::string text = arguments->get<std::string>();
    if (text.empty()) return text;
    // The brackets first: a string is not bounded by the body's nesting limit.
    const size_t begin = skip_json_space(text, 0);
    const size_t end = json_container_end(text, begin);
    if (end == std::string::npos || text[begin] != '{' ||
        skip_json_space(text, end) != text.size() ||
        parse_call_json(text, begin, end).is_discarded()) {
        refuse_field(param, fmt::format("'arguments' must be a JSON object nested at most {} deep",
                                        kMaxCallDepth));
    }
    return text;
}

// Whether `first` is written before `second` in `object` (true when either is absent).
bool comes_before(const Json& object, const char* first, const char* second) {
    for (const auto& [key, value] : object.items()) {
        if (key == first) return true;
        if (key == second) return false;
    }
    return true;
}

std::vector<ToolCall> message_tool_calls(const Json& calls, const std::string& param) {
    if (!calls.is_array() || calls.empty()) {
        refuse_field(param, "'tool_calls' must be a non-empty list of calls");
    }
    std::vector<ToolCall> out;
    for (size_t i = 0; i < calls.size(); ++i) {
        const Json& call = calls[i];
        const std::string at = fmt::format("{}[{}]", param, i);
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
            refuse_field(at,
                         "each tool call needs {\"id\", \"type\": \"function\", \"function\": "
                         "{\"name\", \"arguments\"}}");
        }
        if (request_field(call, "type") != nullptr && call["type"] != "function") {
            refuse_field(at + ".type", "the only tool call type is \"function\"");
        }
        const Json& function = call["function"];
        ToolCall parsed{text_field(call, "id", at + ".id"),
                        text_field(function, "name", at + ".function.name"),
                        call_arguments(function, at + ".function.arguments")};
        parsed.type_before_function = comes_before(call, "type", "function");
        parsed.name_before_arguments = comes_before(function, "name", "arguments");
        out.push_back(std::move(parsed));
    }
    return out;
}

ChatMessage chat_message(const Json& message, size_t index) {
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    const std::string at = fmt::format("messages[{}]", index);
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string() ||
        roles.count(message["role"].get<std::string>()) == 0) {
        refuse_field(at + ".role",
                     "each message needs a role: system, developer, user, assistant or tool");
    }
    ChatMessage out;
    out.role = message["role"].get<std::string>();
    if (out.role == "developer") out.role = "system";  // the newer name for the same turn
    if (const Json* calls = request_field(message, "tool_calls")) {
        if (out.role != "assistant")
            refuse_field(at + ".tool_calls", "only assistant turns make tool calls");
        out.tool_calls = message_tool_calls(*calls, at + ".tool_calls");
    }
    if (const Json* content = request_field(message, "content")) {
        out.content = message_content(*content, at + ".content");
    } else if (out.tool_calls) {
        out.content_is_null = true;  // a turn of calls only
    } else {
        refuse_field(at + ".content",
                     "each message needs content (only a turn of tool calls may have none)");
    }
    if (request_field(message, "tool_call_id") != nullptr || out.role == "tool") {
        if (out.role != "tool")
            refuse_field(at + ".tool_call_id", "only tool turns answer a tool call");
        out.tool_call_id = text_field(message, "tool_call_id", at + ".tool_call_id");
    }
    if (request_field(message, "name") != nullptr)
        out.name = text_field(message, "name", at + ".name");
    return out;
}

std::vector<ChatMessage> chat_messages(const Json& body) {
    const Json* value = request_field(body, "messages");
    if (value == nullptr || !value->is_array() || value->empty()) {
        refuse_field("messages", "'messages' must be a non-empty list");
    }
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < value->size(); ++i) messages.push_back(chat_message((*value)[i], i));
    return messages;
}

bool is_function_name(const std::string& name) {
    if (name.empty() || name.size() > kMaxFunctionNameBytes) return false;
    for (const char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-';
        if (!ok) return false;
    }
    return true;
}

// The shape of a function's parameters: a JSON Schema of an object. What
// the keywords mean is the grammar's to check, when one is built.
void check_parameters(const Json& schema, const std::string& param) {
    if (!schema.is_object()) refuse_field(param, "'parameters' must be a JSON Schema object");
    if (const Json* type = request_field(schema, "type"); type != nullptr && *type != "object") {
        refuse_field(param + ".type",
                     "a function's parameters are an object: 'type' must be \"object\"");
    }
    if (const Json* properties = request_field(schema, "properties")) {
        if (!properties->is_object())
            refuse_field(param + ".properties", "'properties' must be an object");
        for (const auto& [name, property] : properties->items()) {
            if (!property.is_object() && !property.is_boolean()) {
                refuse_field(param + ".properties." + name,
                             "each property must be a schema (an object)");
            }
        }
    }
    if (const Json* required = request_field(schema, "required")) {
        bool names = required->is_array();
        for (const Json& name : names ? *required : Json::array())
            names = names && name.is_string();
        if (!names)
            refuse_field(param + ".required", "'required' must be a list of property names");
    }
}

ToolFunction tool_function(const Json& tool, size_t index) {
    const std::string at = fmt::format("tools[{}]", index);
    if (!tool.is_object() || request_field(tool, "type") == nullptr || tool["type"] != "function") {
        refuse_field(at + ".type", "each tool needs \"type\": \"function\" (the only kind)");
    }
    const Json* function = request_field(tool, "function");
    if (function == nullptr || !function->is_object()) {
        refuse_field(at + ".function", "each tool needs a 'function' object");
    }
    ToolFunction out;
    out.name = text_field(*function, "name", at + ".function.name");
    if (!is_function_name(out.name)) {
        refuse_field(at + ".function.name",
                     fmt::format("a function name is 1 to {} letters, digits, '_' or '-'",
                                 kMaxFunctionNameBytes));
    }
    if (request_field(*function, "description") != nullptr) {
        out.description = text_field(*function, "description", at + ".function.description");
    }
    out.parameters = Json{{"type", "object"}, {"properties", Json::object()}};
    if (const Json* parameters = request_field(*function, "parameters")) {
        check_parameters(*parameters, at + ".function.parameters");
        out.parameters = *parameters;
    }
    out.strict = flag(*function, "strict", false, at + ".function.strict");
    return out;
}

// tool_choice; `tools` holds the functions already.
void read_tool_choice(const Json& body, ToolRequest& tools) {
    const Json* choice = request_field(body, "tool_choice");
    tools.choice = tools.has_tools() ? ToolChoice::kAuto : ToolChoice::kNone;
    if (choice == nullptr) return;
    if (choice->is_string() && *choice == "none") {
        tools.choice = ToolChoice::kNone;
        return;
    }
    if (!tools.has_tools()) refuse_field("tool_choice", "'tool_choice' needs 'tools'");
    if (choice->is_string() && (*choice == "auto" || *choice == "required")) {
        tools.choice = *choice == "auto" ? ToolChoice::kAuto : ToolChoice::kRequired;
        return;
    }
    const Json* function = choice->is_object() ? request_field(*choice, "function") : nullptr;
    if (function == nullptr || !function->is_object() || choice->value("type", "") != "function" ||
        request_field(*function, "name") == nullptr || !(*function)["name"].is_string()) {
        refuse_field("tool_choice",
                     "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    tools.choice = ToolChoice::kNamed;
    tools.chosen_function = (*function)["name"].get<std::string>();
    for (const ToolFunction& offered : tools.functions) {
        if (offered.name == tools.chosen_function) return;
    }
    refuse_field("tool_choice",
                 fmt::format("'tool_choice' names the function '{}', which is not one of "
                             "the tools",
                             tools.chosen_function.substr(0, kMaxFunctionNameBytes)));
}

ToolRequest tool_request(const Json& body) {
    ToolRequest tools;
    if (const Json* list = request_field(body, "tools")) {
        if (!list->is_array() || list->empty() || list->size() > kMaxTools) {
            refuse_field("tools",
                         fmt::format("'tools' must be a list of 1 to {} tools", kMaxTools));
        }
        std::set<std::string> names;
        for (size_t i = 0; i < list->size(); ++i) {
            tools.functions.push_back(tool_function((*list)[i], i));
            if (!names.insert(tools.functions.back().name).second) {
                refuse_field(fmt::format("tools[{}].function.name", i),
                             fmt::format("two tools are named '{}'", tools.functions.back().name));
            }
        }
        tools.tools = *list;
    }
    read_tool_choice(body, tools);
    tools.parallel_tool_calls = flag(body, "parallel_tool_calls", true);
    return tools;
}

ChatTemplateOptions template_options(const Json& body) {
    ChatTemplateOptions options;
    options.add_generation_prompt = flag(body, "add_generation_prompt", true);
    options.continue_final_message = flag(body, "continue_final_message", false);
    if (options.add_generation_prompt && options.continue_final_message) {
        // vLLM's rule: the default add_generation_prompt must be turned off.
        refuse_field(
            "continue_final_message",
            "'continue_final_message' and 'add_generation_prompt' cannot both be true (set "
            "'add_generation_prompt': false to continue the last message)");
    }
    if (const Json* kwargs = request_field(body, "chat_template_kwargs")) {
        try {
            check_template_variables(*kwargs);
        } catch (const Error& e) {
            refuse_field("chat_template_kwargs", e.what());
        }
        options.extra_variables = *kwargs;
    }
    return options;
}

}  // namespace

ChatRequest parse_chat_request(const nlohmann::ordered_json& body) {
    ChatRequest request;
    request.messages = chat_messages(body);
    request.tools = tool_request(body);
    request.template_options = template_options(body);
    return request;
}

void refuse_chat_fields(const nlohmann::json& body) {
    for (const std::string_view name_view : kChatFields) {
        const std::string name(name_view);
        if (body.contains(name) && !body[name].is_null()) {
            refuse_field(name, fmt::format("'{}' is a field of /v1/chat/completions", name));
        }
    }
}

}  // namespace servelab
