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

}  // namespace hp
