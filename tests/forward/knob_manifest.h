// Reads forward/cpu/baseline/knobs.json (schema in docs/cpu_baseline.md) and evaluates its
// constraints. A constraint is an integer C expression over knob -D names: literals, names,
// ( ), unary - and !, * / %, + -, < <= > >=, == !=, &&, || with C precedence and truncating
// division; it holds when it evaluates to non-zero. An illegal combination is one where any
// constraint evaluates to zero (or fails to parse, or divides by zero).
#pragma once

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace hp::test {

struct Knob {
    std::string name, define, changes;
    std::vector<int64_t> domain;
    int64_t default_value = 0;
};

struct KnobManifest {
    std::vector<Knob> knobs;
    std::vector<std::string> constraints;
};

inline KnobManifest load_knob_manifest(const std::string &path) {
    std::ifstream file(path);
    const nlohmann::json json = nlohmann::json::parse(file);
    KnobManifest manifest;
    for (const auto &knob : json.at("knobs")) {
        manifest.knobs.push_back({knob.at("name"), knob.at("define"), knob.at("changes"), knob.at("domain").get<std::vector<int64_t>>(),
                                  knob.at("default").get<int64_t>()});
    }
    for (const auto &constraint : json.at("constraints")) manifest.constraints.push_back(constraint.at("expr"));
    return manifest;
}

using KnobValues = std::map<std::string, int64_t>;  // -D name -> value

class ConstraintParser {
public:
    ConstraintParser(const std::string &text, const KnobValues &values) : text_(text), values_(values) {}
    int64_t evaluate() {
        const int64_t value = parse_or();
        skip_space();
        if (pos_ != text_.size()) throw std::runtime_error("trailing text in constraint: " + text_);
        return value;
    }

private:
    void skip_space() {
        while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    bool eat(const char *op) {
        skip_space();
        const std::string token(op);
        if (text_.compare(pos_, token.size(), token) != 0) return false;
        // "<" must not swallow "<=", "!" not "!=", "&" / "|" only doubled.
        const char next = pos_ + token.size() < text_.size() ? text_[pos_ + token.size()] : '\0';
        if ((token == "<" || token == ">" || token == "!") && next == '=') return false;
        pos_ += token.size();
        return true;
    }
    int64_t parse_or() {
        int64_t value = parse_and();
        while (eat("||")) value = (parse_and() != 0) | (value != 0);
        return value;
    }
    int64_t parse_and() {
        int64_t value = parse_equality();
        while (eat("&&")) value = (parse_equality() != 0) & (value != 0);
        return value;
    }
    int64_t parse_equality() {
        int64_t value = parse_relation();
        while (true) {
            if (eat("==")) value = value == parse_relation();
            else if (eat("!=")) value = value != parse_relation();
            else return value;
        }
    }
    int64_t parse_relation() {
        int64_t value = parse_sum();
        while (true) {
            if (eat("<=")) value = value <= parse_sum();
            else if (eat(">=")) value = value >= parse_sum();
            else if (eat("<")) value = value < parse_sum();
            else if (eat(">")) value = value > parse_sum();
            else return value;
        }
    }
    int64_t parse_sum() {
        int64_t value = parse_product();
        while (true) {
            if (eat("+")) value += parse_product();
            else if (eat("-")) value -= parse_product();
            else return value;
        }
    }
    int64_t parse_product() {
        int64_t value = parse_unary();
        while (true) {
            if (eat("*")) {
                value *= parse_unary();
            } else if (eat("/") || eat("%")) {
                const bool divide = text_[pos_ - 1] == '/';
                const int64_t rhs = parse_unary();
                if (rhs == 0) throw std::runtime_error("division by zero in constraint: " + text_);
                value = divide ? value / rhs : value % rhs;
            } else {
                return value;
            }
        }
    }
    int64_t parse_unary() {
        if (eat("-")) return -parse_unary();
        if (eat("!")) return parse_unary() == 0;
        if (eat("(")) {
            const int64_t value = parse_or();
            if (!eat(")")) throw std::runtime_error("missing ) in constraint: " + text_);
            return value;
        }
        skip_space();
        const size_t start = pos_;
        if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
            while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
            return std::stoll(text_.substr(start, pos_ - start));
        }
        while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
        const std::string name = text_.substr(start, pos_ - start);
        const auto found = values_.find(name);
        if (name.empty() || found == values_.end()) throw std::runtime_error("unknown name '" + name + "' in constraint: " + text_);
        return found->second;
    }

    const std::string &text_;
    const KnobValues &values_;
    size_t pos_ = 0;
};

inline KnobValues default_knob_values(const KnobManifest &manifest) {
    KnobValues values;
    for (const Knob &knob : manifest.knobs) values[knob.define] = knob.default_value;
    return values;
}

// The first violated constraint, or nullopt when `values` is a legal combination.
inline std::optional<std::string> violated_constraint(const KnobManifest &manifest, const KnobValues &values) {
    for (const std::string &constraint : manifest.constraints) {
        try {
            if (ConstraintParser(constraint, values).evaluate() == 0) return constraint;
        } catch (const std::exception &error) {
            return constraint + " (" + error.what() + ")";
        }
    }
    for (const Knob &knob : manifest.knobs) {
        const int64_t value = values.at(knob.define);
        if (std::find(knob.domain.begin(), knob.domain.end(), value) == knob.domain.end()) {
            return knob.define + "=" + std::to_string(value) + " is outside its domain";
        }
    }
    return std::nullopt;
}

}  // namespace hp::test
