// Each CLI subcommand group registers itself on the root CLI11 app. A callback stores its exit
// code in `exit_code`; commands print results to stdout and diagnostics to stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace hp::cli {

// A finite number of at least `min` (above it where `strict`), with a message a person can read
// (CLI11's PositiveNumber prints the largest double in its range).
inline CLI::Validator at_least(double min, bool strict = false) {
    std::string bound = (strict ? "> " : ">= ") + CLI::detail::to_string(min);
    return CLI::Validator(
        [min, strict, bound](std::string &value) -> std::string {
            double number = 0;
            if (!CLI::detail::lexical_cast(value, number) || !std::isfinite(number) || number < min || (strict && number == min)) {
                return "'" + value + "' is not a number " + bound;
            }
            return {};
        },
        "NUMBER " + bound);
}
inline CLI::Validator positive() { return at_least(0, true); }

void add_model_commands(CLI::App &app, int &exit_code);
void add_generate_command(CLI::App &app, int &exit_code);
void add_traffic_commands(CLI::App &app, int &exit_code);
void add_executor_commands(CLI::App &app, int &exit_code);
void add_campaign_commands(CLI::App &app, int &exit_code);

}  // namespace hp::cli
