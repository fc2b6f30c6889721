// JSON text that cannot throw on the strings it carries. nlohmann::json::dump() throws on a string
// that is not valid UTF-8, and such strings reach hotpass from outside: a plugin's name() or error
// text, a file path, a candidate's source text sent to an LLM. Invalid bytes become U+FFFD here;
// valid UTF-8 comes out exactly as dump() writes it (so hashes of dumped JSON do not change).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hp {

inline std::string json_text(const nlohmann::json &value, int indent = -1) {
    return value.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A JSON value for an error message, bounded whatever the input: a scalar as JSON (a string cut to
// its first 80 bytes), an array or object by its size. dump() of a value nested 100k deep recurses
// until the stack runs out, and a huge value would be echoed whole.
inline std::string json_summary(const nlohmann::json &value) {
    if (value.is_array()) return "an array of " + std::to_string(value.size()) + " items";
    if (value.is_object()) return "an object of " + std::to_string(value.size()) + " fields";
    if (value.is_string() && value.get_ref<const std::string &>().size() > 80) {
        return json_text(nlohmann::json(value.get_ref<const std::string &>().substr(0, 80))) + "...";
    }
    return json_text(value);
}

}  // namespace hp
