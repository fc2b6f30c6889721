// Human-readable rendering of a Profile for the CLI: headline figures and small text histograms.
#pragma once

#include <string>

#include "hotpass/traffic/distribution.h"
#include "hotpass/traffic/profile.h"
#include "hotpass/traffic/trace_reader.h"

namespace hp::traffic {

std::string format_tokens(double tokens);  // 812, 2.7k, 33k, 1.2M
// One bar per octave ([1,2), [2,4), ...) between the distribution's min and max, width 40.
std::string text_histogram(const Distribution &distribution, std::string_view unit);
std::string format_profile(const Profile &profile);
std::string format_read_stats(const ReadStats &stats);  // bad-row summary; empty when all good

}  // namespace hp::traffic
