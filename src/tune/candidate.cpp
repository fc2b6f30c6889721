#include "hotpass/tune/candidate.h"

#include <nlohmann/json.hpp>

#include "hotpass/core/json_text.h"
#include "hotpass/core/mapped_file.h"

namespace hp::tune {

Result<Candidate> load_candidate(const std::filesystem::path &dir) {
    if (!std::filesystem::is_directory(dir)) return error("candidate {} is not a directory", dir.string());
    Candidate candidate;
    candidate.dir = std::filesystem::absolute(dir);
    const auto metadata_path = dir / "candidate.json";
    if (!std::filesystem::exists(metadata_path)) return candidate;
    auto text = read_text_file(metadata_path);
    if (!text.ok()) return Error{text.error()};
    const auto json = nlohmann::json::parse(*text, nullptr, false);
    if (json.is_discarded()) return error("{}: not valid JSON", metadata_path.string());
    if (!json.is_object()) return error("{}: expected an object {{\"parent\", \"agent\", \"knobs\", \"notes\"}}", metadata_path.string());
    for (auto [key, field] : {std::pair{"parent", &candidate.parent}, {"agent", &candidate.agent}, {"notes", &candidate.notes}}) {
        if (!json.contains(key) || json[key].is_null()) continue;
        if (!json[key].is_string()) return error("{}: '{}' must be a string, not {}", metadata_path.string(), key, json_summary(json[key]));
        *field = json[key].get<std::string>();
    }
    if (json.contains("knobs")) {
        if (!json["knobs"].is_object()) return error("{}: 'knobs' must be an object", metadata_path.string());
        for (auto item = json["knobs"].begin(); item != json["knobs"].end(); ++item) {
            const std::string name = item.key();
            const bool valid_name = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
            });
            if (!valid_name) return error("{}: knob name {} must be an identifier", metadata_path.string(), json_summary(nlohmann::json(name)));
            const auto &value = item.value();
            if (value.is_string()) candidate.knobs[name] = value.get<std::string>();
            else if (value.is_number_integer() || value.is_number_float() || value.is_boolean()) candidate.knobs[name] = value.dump();
            else return error("{}: knob '{}' must be a number, boolean or string", metadata_path.string(), name);
            if (value.is_boolean()) candidate.knobs[name] = value.get<bool>() ? "1" : "0";
        }
    }
    return candidate;
}

}  // namespace hp::tune
