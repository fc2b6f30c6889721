// Builds forward/cpu/baseline with given knob values into its own uniquely named .so, as the
// builder will: g++ -O3 -march=native, hidden visibility, -fno-gnu-unique, one exported symbol.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "knob_manifest.h"

namespace hp::test {

struct VariantBuild {
    bool ok = false;
    std::string path;  // the .so
    std::string log;   // compiler output
};

inline std::string knob_flags(const KnobValues &values) {
    std::string flags;
    for (const auto &[define, value] : values) flags += " -D" + define + "=" + std::to_string(value);
    return flags;
}

inline VariantBuild build_variant(const KnobValues &values, const std::string &tag) {
    const std::string source = std::string(HOTPASS_SOURCE_DIR);
    const std::string dir = (std::filesystem::temp_directory_path() / ("hotpass_cpu_variants_" + std::to_string(getpid()) + "_" + tag)).string();
    std::filesystem::create_directories(dir);
    VariantBuild build;
    build.path = dir + "/libhp_forward_cpu_variant_" + tag + ".so";
    const std::string flags = "-std=c++20 -O3 -march=native -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -fno-gnu-unique -I" +
                              source + "/include" + knob_flags(values);
    // Two compilers at a time (the machine has few cores), then one link.
    const std::string command = "cd " + dir + " && ls " + source + "/forward/cpu/baseline/*.cpp | xargs -P2 -I{} sh -c 'g++ " + flags +
                                " -c {} -o $(basename {}).o' 2>&1 && g++ -shared -pthread -Wl,--version-script=" + source +
                                "/forward/cpu/baseline/exports.map *.o -o " + build.path + " 2>&1";
    FILE *pipe = popen(command.c_str(), "r");
    char buffer[4096];
    while (pipe && fgets(buffer, sizeof buffer, pipe)) build.log += buffer;
    build.ok = pipe && pclose(pipe) == 0 && std::filesystem::exists(build.path);
    return build;
}

}  // namespace hp::test
