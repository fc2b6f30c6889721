// Builder: compiles a candidate directory into a forward-pass plugin (.so) with the project's
// flags, against the ABI header only, with a time limit, into a content-addressed cache keyed by
// sources + flags + compiler version. A build failure is data: the compiler's diagnostics.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "hotpass/core/result.h"
#include "hotpass/tune/candidate.h"

namespace hp::tune {

struct BuildOptions {
    std::filesystem::path cache_dir;    // artifacts land in cache_dir/<key>/
    std::filesystem::path include_dir;  // holds hotpass/forward_abi.h
    std::string compiler = "g++";
    std::vector<std::string> flags = {"-std=c++20", "-O3", "-march=native", "-fPIC", "-shared",
                                      "-fvisibility=hidden", "-fno-gnu-unique", "-pthread"};
    std::string soname_flag = "-Wl,-soname,";  // followed by the artifact's SONAME
    double timeout_seconds = 120;
};

// Options for CUDA candidates (.cu sources): nvcc ($HOTPASS_NVCC, else the compiler this build
// used, else /usr/local/cuda/bin/nvcc), the build's HOTPASS_CUDA_ARCHS as -gencode targets, the
// shared CUDA runtime (one runtime for the executor and every plugin) and cuBLAS; words of
// $HOTPASS_NVCC_FLAGS are added (e.g. -L/path/of/libcublas.so).
BuildOptions cuda_build_options();

struct Artifact {
    std::filesystem::path path;  // unique per key, with a matching SONAME
    std::string key;             // xxh128 of sources + flags + compiler version
    bool cached = false;
    double build_seconds = 0;
};

struct BuildOutcome {
    bool ok = false;
    Artifact artifact;
    std::string diagnostics;  // compiler output on failure (and warnings on success)
    std::string failure;      // one sentence: "compile error", "timed out after 120 s", ...
};

BuildOutcome build_candidate(const Candidate &candidate, const BuildOptions &options);

// Names of the dynamic symbols an artifact defines (nm -D --defined-only).
Result<std::vector<std::string>> exported_symbols(const std::filesystem::path &artifact);

// The ABI include directory of this installation (source tree or next to the executable).
std::filesystem::path default_include_dir();

}  // namespace hp::tune
