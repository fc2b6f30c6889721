// Profile <-> JSON ("schema": "hotpass.profile/1"; documented in docs/traffic.md).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "hotpass/core/result.h"
#include "hotpass/traffic/profile.h"

namespace hp::traffic {

inline constexpr std::string_view kProfileSchema = "hotpass.profile/1";

std::string profile_to_json(const Profile &profile, int indent = 2);
Result<Profile> profile_from_json(std::string_view text);
Result<Profile> load_profile(const std::filesystem::path &path);

}  // namespace hp::traffic
