// Each CLI subcommand group registers itself on the root CLI11 app. A callback stores its exit
// code in `exit_code`; commands print results to stdout and diagnostics to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace hp::cli {

void add_model_commands(CLI::App &app, int &exit_code);
void add_generate_command(CLI::App &app, int &exit_code);
void add_traffic_commands(CLI::App &app, int &exit_code);
void add_executor_commands(CLI::App &app, int &exit_code);
void add_campaign_commands(CLI::App &app, int &exit_code);

}  // namespace hp::cli
