// Test helper: profiles of synthetic traffic split at a time, for the drift and watch tests.
#pragma once

#include <utility>

#include "hotpass/traffic/profile_builder.h"
#include "hotpass/traffic/synth.h"

namespace hp::traffic::testing {

inline std::pair<Profile, Profile> synth_halves(SynthOptions options, bool simulate = false) {
    ProfileOptions profile_options;
    profile_options.simulate = simulate;
    ProfileBuilder first(profile_options), second(profile_options);
    const double middle_s = options.duration_s / 2;
    Status done = synthesize(options, [&](const Request &request) {
        (request.arrival_s < middle_s ? first : second).add(request);
    });
    HP_CHECK(done.ok(), "synthesize: {}", done.ok() ? "" : done.error());
    return {first.finish("first half", "synthetic"), second.finish("second half", "synthetic")};
}

}  // namespace hp::traffic::testing
