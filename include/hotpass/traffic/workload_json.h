// Workload <-> JSON ("schema": "hotpass.workload/1"; documented in docs/traffic.md, read by the
// executor and the runner).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "hotpass/core/result.h"
#include "hotpass/traffic/workload.h"

namespace hp::traffic {

inline constexpr std::string_view kWorkloadSchema = "hotpass.workload/1";

std::string workload_to_json(const Workload &workload, int indent = 2);
Result<Workload> workload_from_json(std::string_view text);
Result<Workload> load_workload(const std::filesystem::path &path);

}  // namespace hp::traffic
