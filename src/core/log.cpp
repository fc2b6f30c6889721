#include "hotpass/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace hp {

void log_setup(std::string_view level) {
    auto logger = spdlog::stderr_color_mt("hotpass");
    logger->set_pattern("[%H:%M:%S.%e] %^%l%$ %v");
    logger->set_level(spdlog::level::from_str(std::string(level)));
    spdlog::set_default_logger(logger);
}

}  // namespace hp
