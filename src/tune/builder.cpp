#include "hotpass/tune/builder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "hotpass/core/clock.h"
#include "hotpass/core/hash.h"
#include "hotpass/core/mapped_file.h"
#include "hotpass/core/subprocess.h"

namespace hp::tune {
namespace fs = std::filesystem;

namespace {

ProcessOptions timeout_only(double seconds) {
    ProcessOptions options;
    options.timeout_seconds = seconds;
    return options;
}

bool is_source(const fs::path &path) {
    const std::string ext = path.extension().string();
    return ext == ".cpp" || ext == ".cc" || ext == ".c" || ext == ".cu";
}

std::string compiler_version(const std::string &compiler) {
    static std::mutex mutex;
    static std::map<std::string, std::string> versions;
    std::lock_guard lock(mutex);
    auto found = versions.find(compiler);
    if (found != versions.end()) return found->second;
    auto result = run_process({compiler, "--version"}, timeout_only(10));
    std::string version = result.ok() ? result->output.substr(0, result->output.find('\n')) : "unknown";
    versions[compiler] = version;
    return version;
}

}  // namespace

fs::path default_include_dir() {
    std::error_code code;
    const fs::path exe = fs::read_symlink("/proc/self/exe", code);
    for (const fs::path &candidate : {exe.parent_path().parent_path() / "include", fs::path(HOTPASS_SOURCE_INCLUDE_DIR)}) {
        if (fs::exists(candidate / "hotpass/forward_abi.h")) return candidate;
    }
    return HOTPASS_SOURCE_INCLUDE_DIR;
}

Result<std::vector<std::string>> exported_symbols(const fs::path &artifact) {
    auto result = run_process({"nm", "-D", "--defined-only", "--format=posix", artifact.string()},
                              timeout_only(30));
    if (!result.ok()) return Error{result.error()};
    if (!result->ok()) return error("nm failed on {}: {}", artifact.string(), result->output);
    // posix format: "name type value size"; weak (W/V) template instantiations are tolerated:
    // the plugin is loaded RTLD_LOCAL, so they never enter the global scope.
    std::vector<std::string> strong;
    std::istringstream lines(result->output);
    std::string line;
    while (std::getline(lines, line)) {
        std::istringstream fields(line);
        std::string name, type;
        fields >> name >> type;
        if (type.empty() || type == "W" || type == "V" || type == "w" || type == "v") continue;
        strong.push_back(name);
    }
    return strong;
}

BuildOptions cuda_build_options() {
    BuildOptions options;
    const char *nvcc = std::getenv("HOTPASS_NVCC");
    options.compiler = nvcc && *nvcc ? nvcc : HOTPASS_NVCC_DEFAULT;
    // --diag-error: a host function called from device code (e.g. std::max in a __host__ __device__
    // helper) is a warning that fails on the device at run time; a candidate gets it as a build error.
    options.flags = {"-std=c++20", "-O3", "-shared", "-cudart=shared", "-Xcompiler=-fPIC,-fvisibility=hidden,-fno-gnu-unique",
                     "-Xcompiler=-Wno-unused-parameter", "--diag-error=20011,20013,20014,20015"};
    std::istringstream archs(HOTPASS_CUDA_ARCHS_DEFAULT);  // "90a,90"
    std::string arch;
    while (std::getline(archs, arch, ',')) {
        if (!arch.empty()) options.flags.push_back(fmt::format("-gencode=arch=compute_{0},code=sm_{0}", arch));
    }
    // $HOTPASS_NVCC_FLAGS: extra flags, e.g. -L for a cuBLAS outside the toolkit.
    if (const char *extra = std::getenv("HOTPASS_NVCC_FLAGS")) {
        std::istringstream words(extra);
        std::string word;
        while (words >> word) options.flags.push_back(word);
    }
    options.flags.push_back("-lcublas");
    options.soname_flag = "-Xlinker=-soname,";
    options.timeout_seconds = 300;  // nvcc is slower than g++
    return options;
}

// Every file of a candidate goes into its cache key (read whole): a folder past this is refused.
constexpr uintmax_t kMaxCandidateBytes = uintmax_t(64) << 20;

BuildOutcome build_candidate(const Candidate &candidate, const BuildOptions &options) {
    BuildOutcome outcome;
    const double start = now_seconds();
    // Sources and every other file of the candidate (headers, manifests), in a stable order; the
    // cache key covers all of them, so folders behind symbolic links are walked too (their files
    // are what the compiler reads). A candidate must be self-contained: an #include reaching
    // outside its folder is not part of the key.
    std::vector<fs::path> files, sources;
    std::error_code code;
    uintmax_t n_byte = 0;
    for (auto it = fs::recursive_directory_iterator(candidate.dir, fs::directory_options::follow_directory_symlink, code);
         !code && it != fs::recursive_directory_iterator(); it.increment(code)) {
        if (it.depth() > 32) {
            code = std::make_error_code(std::errc::too_many_symbolic_link_levels);
            break;
        }
        if (it->is_regular_file() && it->path().filename() != "candidate.json") {
            files.push_back(it->path());
            n_byte += it->file_size(code);
            if (n_byte > kMaxCandidateBytes) break;
        }
    }
    if (!code && n_byte > kMaxCandidateBytes) {  // every file is read into the key: sources, not data
        outcome.failure = "candidate too large";
        outcome.diagnostics = fmt::format("{} holds {} MB of files; a candidate is sources, at most {} MB", candidate.dir.string(),
                                          n_byte >> 20, kMaxCandidateBytes >> 20);
        return outcome;
    }
    if (code) {  // a partial list would key the artifact on part of the sources
        outcome.failure = "unreadable source";
        outcome.diagnostics = fmt::format("cannot list {}: {}", candidate.dir.string(), code.message());
        return outcome;
    }
    std::sort(files.begin(), files.end());
    // What is compiled: the sources of the folder itself; those behind a linked folder are only
    // keyed (what they hold may be included), as before links were followed.
    auto behind_link = [&](const fs::path &file) {
        fs::path prefix = candidate.dir;
        const fs::path relative = file.lexically_relative(candidate.dir);  // not fs::relative: it resolves the links
        for (auto part = relative.begin(); part != relative.end() && std::next(part) != relative.end(); ++part) {
            prefix /= *part;
            if (fs::is_symlink(prefix, code)) return true;
        }
        return false;
    };
    for (const fs::path &file : files) {
        if (is_source(file) && !behind_link(file)) sources.push_back(file);
    }
    code.clear();
    if (sources.empty()) {
        outcome.failure = "no sources";
        outcome.diagnostics = fmt::format("{} holds no .cpp, .cc, .c or .cu file", candidate.dir.string());
        return outcome;
    }
    std::vector<std::string> flags = options.flags;
    flags.push_back("-I" + options.include_dir.string());
    flags.push_back("-I" + candidate.dir.string());
    for (const auto &[name, value] : candidate.knobs) flags.push_back(fmt::format("-D{}={}", name, value));

    std::string keyed = compiler_version(options.compiler) + "\n" + fmt::format("{}", fmt::join(flags, " ")) + "\n";
    for (const fs::path &file : files) {
        auto contents = read_text_file(file);
        if (!contents.ok()) {
            outcome.failure = "unreadable source";
            outcome.diagnostics = contents.error();
            return outcome;
        }
        keyed += fs::relative(file, candidate.dir).string() + '\0' + *contents + '\0';
    }
    // The ABI header is part of what the artifact was compiled against.
    if (auto abi = read_text_file(options.include_dir / "hotpass/forward_abi.h"); abi.ok()) keyed += *abi;
    outcome.artifact.key = hash_hex(keyed);

    const fs::path dir = options.cache_dir / outcome.artifact.key;
    // Unique file name and SONAME per artifact: glibc would return an already-loaded object for
    // a matching name.
    const std::string soname = fmt::format("libhp_candidate_{}.so", outcome.artifact.key.substr(0, 16));
    outcome.artifact.path = dir / soname;
    if (fs::exists(outcome.artifact.path)) {
        outcome.ok = true;
        outcome.artifact.cached = true;
        return outcome;
    }
    fs::create_directories(dir, code);
    if (code) {
        outcome.failure = "cannot create the cache directory";
        outcome.diagnostics = fmt::format("{}: {}", dir.string(), code.message());
        return outcome;
    }
    const fs::path temporary = dir / fmt::format("{}.tmp.{}", soname, getpid());
    std::vector<std::string> argv = {options.compiler};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(options.soname_flag + soname);
    for (const fs::path &source : sources) argv.push_back(source.string());
    argv.insert(argv.end(), {"-o", temporary.string()});
    auto result = run_process(argv, ProcessOptions{options.timeout_seconds, candidate.dir, size_t(1) << 20});
    outcome.artifact.build_seconds = now_seconds() - start;
    if (!result.ok()) {
        outcome.failure = "cannot run the compiler";
        outcome.diagnostics = result.error();
        return outcome;
    }
    outcome.diagnostics = result->output;
    if (result->timed_out) {
        outcome.failure = fmt::format("the build timed out after {:.0f} s", options.timeout_seconds);
        fs::remove(temporary, code);
        return outcome;
    }
    if (!result->ok()) {
        outcome.failure = "compile error";
        fs::remove(temporary, code);
        return outcome;
    }
    auto symbols = exported_symbols(temporary);
    if (!symbols.ok() || *symbols != std::vector<std::string>{"hp_forward_entry"}) {
        outcome.failure = "bad exports";
        outcome.diagnostics = symbols.ok() ? fmt::format("the plugin must export exactly hp_forward_entry; it exports: {}",
                                                         fmt::join(*symbols, ", "))
                                           : symbols.error();
        fs::remove(temporary, code);
        return outcome;
    }
    fs::rename(temporary, outcome.artifact.path, code);
    if (code) {
        outcome.failure = "cannot store the artifact";
        outcome.diagnostics = code.message();
        return outcome;
    }
    outcome.ok = true;
    return outcome;
}

}  // namespace hp::tune
