#include "hotpass/agents/knob_manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <set>

#include "hotpass/core/mapped_file.h"

namespace hp::agents {

namespace {

// Recursive descent over C's precedence levels; the first error sticks and ends the parse. As in C,
// && and || do not evaluate their right side when the left decides (`B == 0 || A % B == 0`): that
// side is still parsed, but its arithmetic errors (division by zero, overflow) are not errors.
// Arithmetic is int64 with overflow an error, not C's undefined behaviour.
class ConstraintParser {
public:
    ConstraintParser(const std::string &text, const KnobValues &values) : text_(text), values_(values) {}

    Result<int64_t> evaluate() {
        const int64_t value = parse_or();
        skip_space();
        if (error_.empty() && pos_ != text_.size()) fail("unexpected text at offset " + std::to_string(pos_));
        if (!error_.empty()) return error("constraint '{}': {}", text_, error_);
        return value;
    }

private:
    void fail(const std::string &message) {
        if (error_.empty()) error_ = message;
    }
    void skip_space() {
        while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    }
    bool eat(std::string_view op) {
        skip_space();
        if (!error_.empty() || text_.compare(pos_, op.size(), op) != 0) return false;
        const char next = pos_ + op.size() < text_.size() ? text_[pos_ + op.size()] : '\0';
        if ((op == "<" || op == ">" || op == "!" || op == "=") && next == '=') return false;
        pos_ += op.size();
        return true;
    }
    // An arithmetic error: ends the parse unless it happens where C would not evaluate.
    int64_t arithmetic_error(const char *what) {
        if (skip_ == 0) fail(what);
        return 0;
    }
    int64_t parse_or() {
        int64_t value = parse_and();
        while (eat("||")) {
            const bool decided = value != 0;
            skip_ += decided;
            const int64_t rhs = parse_and();
            skip_ -= decided;
            value = decided || rhs != 0;
        }
        return value;
    }
    int64_t parse_and() {
        int64_t value = parse_equality();
        while (eat("&&")) {
            const bool decided = value == 0;
            skip_ += decided;
            const int64_t rhs = parse_equality();
            skip_ -= decided;
            value = !decided && rhs != 0;
        }
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
            int64_t result = 0;
            if (eat("+")) value = __builtin_add_overflow(value, parse_product(), &result) ? arithmetic_error("overflow") : result;
            else if (eat("-")) value = __builtin_sub_overflow(value, parse_product(), &result) ? arithmetic_error("overflow") : result;
            else return value;
        }
    }
    int64_t parse_product() {
        int64_t value = parse_unary();
        while (true) {
            if (eat("*")) {
                int64_t result = 0;
                value = __builtin_mul_overflow(value, parse_unary(), &result) ? arithmetic_error("overflow") : result;
            } else if (eat("/") || eat("%")) {
                const bool divide = text_[pos_ - 1] == '/';
                const int64_t rhs = parse_unary();
                if (rhs == 0) value = arithmetic_error("division by zero");
                else if (rhs == -1 && value == INT64_MIN) value = arithmetic_error("overflow");
                else value = divide ? value / rhs : value % rhs;
            } else {
                return value;
            }
        }
    }
    int64_t parse_unary() {
        if (!error_.empty()) return 0;
        struct Depth {  // unary operators and parentheses nest by recursion: bounded
            int &depth;
            explicit Depth(int &d) : depth(++d) {}
            ~Depth() { --depth; }
        } depth(depth_);
        if (depth_ > kMaxDepth) {
            fail("nested more than " + std::to_string(kMaxDepth) + " deep");
            return 0;
        }
        if (eat("-")) {
            const int64_t value = parse_unary();
            return value == INT64_MIN ? arithmetic_error("overflow") : -value;
        }
        if (eat("!")) return parse_unary() == 0;
        if (eat("(")) {
            const int64_t value = parse_or();
            if (!eat(")")) fail("missing )");
            return value;
        }
        skip_space();
        const size_t start = pos_;
        if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
            while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
            int64_t value = 0;
            const auto [end, code] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
            if (code != std::errc() || end != text_.data() + pos_) fail("the number " + text_.substr(start, pos_ - start) + " does not fit in 64 bits");
            return value;
        }
        while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
        const std::string name = text_.substr(start, pos_ - start);
        const auto found = values_.find(name);
        if (name.empty()) fail("expected a number or a name at offset " + std::to_string(start));
        else if (found == values_.end()) fail("unknown name '" + name + "'");
        return found == values_.end() ? 0 : found->second;
    }

    static constexpr int kMaxDepth = 256;
    const std::string &text_;
    const KnobValues &values_;
    size_t pos_ = 0;
    int skip_ = 0;   // > 0: inside a side of && / || that C would not evaluate
    int depth_ = 0;  // parse_unary recursion
    std::string error_;
};

}  // namespace

Result<KnobManifest> parse_knob_manifest(const std::string &text) {
    const auto json = nlohmann::json::parse(text, nullptr, false);
    if (json.is_discarded() || !json.is_object()) return error("knob manifest: not a JSON object");
    if (!json.contains("schema") || json["schema"] != "hotpass-knobs/1") return error("knob manifest: schema must be \"hotpass-knobs/1\"");
    KnobManifest manifest;
    try {
        manifest.plugin = json.value("plugin", "");
        for (const auto &knob : json.at("knobs")) {
            KnobSpec spec{knob.at("name"), knob.at("define"), knob.at("domain").get<std::vector<int64_t>>(), knob.at("default").get<int64_t>(),
                          knob.value("changes", "")};
            if (spec.domain.empty()) return error("knob manifest: knob {} has an empty domain", spec.name);
            manifest.knobs.push_back(std::move(spec));
        }
        for (const auto &constraint : json.value("constraints", nlohmann::json::array())) {
            manifest.constraints.push_back({constraint.at("expr"), constraint.value("why", "")});
        }
    } catch (const nlohmann::json::exception &failure) {
        return error("knob manifest: {}", failure.what());
    }
    // What every later use assumes: one knob per define, defaults in their domains, and constraints
    // that parse and hold at the defaults (so a broken manifest is refused here, by name, rather
    // than leaving the search with nothing legal to propose).
    std::set<std::string> defines;
    for (const KnobSpec &knob : manifest.knobs) {
        if (!defines.insert(knob.define).second) return error("knob manifest: two knobs define {}", knob.define);
        if (std::find(knob.domain.begin(), knob.domain.end(), knob.default_value) == knob.domain.end()) {
            return error("knob manifest: knob {}'s default {} is not in its domain", knob.name, knob.default_value);
        }
    }
    const KnobValues defaults = default_knob_values(manifest);
    for (const KnobConstraint &constraint : manifest.constraints) {
        auto holds = evaluate_constraint(constraint.expr, defaults);
        if (!holds.ok()) return error("knob manifest: {}", holds.error());
        if (*holds == 0) return error("knob manifest: constraint '{}' does not hold at the defaults", constraint.expr);
    }
    return manifest;
}

Result<KnobManifest> load_knob_manifest(const std::filesystem::path &path) {
    auto text = read_text_file(path);
    if (!text.ok()) return Error{text.error()};
    auto manifest = parse_knob_manifest(*text);
    if (!manifest.ok()) return error("{}: {}", path.string(), manifest.error());
    return manifest;
}

KnobValues default_knob_values(const KnobManifest &manifest) {
    KnobValues values;
    for (const KnobSpec &knob : manifest.knobs) values[knob.define] = knob.default_value;
    return values;
}

Result<int64_t> evaluate_constraint(const std::string &expr, const KnobValues &values) {
    return ConstraintParser(expr, values).evaluate();
}

std::optional<std::string> knob_violation(const KnobManifest &manifest, const KnobValues &given) {
    KnobValues values = default_knob_values(manifest);
    for (const auto &[define, value] : given) {
        if (!values.count(define)) return define + " is not a knob of " + manifest.plugin;
        values[define] = value;
    }
    for (const KnobSpec &knob : manifest.knobs) {
        const int64_t value = values.at(knob.define);
        if (std::find(knob.domain.begin(), knob.domain.end(), value) == knob.domain.end()) {
            return knob.define + "=" + std::to_string(value) + " is outside its domain";
        }
    }
    for (const KnobConstraint &constraint : manifest.constraints) {
        auto result = evaluate_constraint(constraint.expr, values);
        if (!result.ok()) return result.error();
        if (*result == 0) return constraint.expr + (constraint.why.empty() ? "" : " (" + constraint.why + ")");
    }
    return std::nullopt;
}

}  // namespace hp::agents
