// Logging goes through spdlog; this sets it up once for the CLI and the tests.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace hp {

// level: "trace", "debug", "info", "warn", "error", "off". Logs go to stderr.
void log_setup(std::string_view level);

}  // namespace hp
