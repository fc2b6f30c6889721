// Runs the hotpass CLI: exit codes (0 ok / no drift, 1 drift, 2 bad input), outputs and --help.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "hotpass/traffic/profile_json.h"
#include "hotpass/traffic/workload_json.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

struct CliRun {
    int exit_code = -1;
    std::string out;
};

// stdout only, or stdout and stderr together (to check messages) with `with_stderr`.
CliRun run(const std::string &arguments, bool with_stderr = false) {
    const std::string command =
        std::string(HOTPASS_CLI) + " " + arguments + (with_stderr ? " 2>&1" : " 2>/dev/null");
    CliRun result;
    FILE *pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    std::array<char, 4096> buffer;
    size_t got;
    while ((got = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
        result.out.append(buffer.data(), got);
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

std::string trace(const char *name) {
    return (testing::traces_dir() / name).string();
}

std::string contents(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

bool contains(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

TEST(TrafficCli, ProfileThenWorkload) {
    testing::TempDir dir;
    const std::string profile = (dir.path() / "conv.profile.json").string();
    CliRun profiled =
        run("traffic profile " + trace("azure_llm_2023_conv.csv") + " --out " + profile);
    EXPECT_EQ(profiled.exit_code, 0);
    EXPECT_NE(profiled.out.find("19366 requests"), std::string::npos) << profiled.out;
    EXPECT_TRUE(load_profile(profile).ok());
    const std::string workload = (dir.path() / "w.json").string();
    CliRun derived = run("traffic workload " + profile + " --tier fast --out " + workload);
    EXPECT_EQ(derived.exit_code, 0) << derived.out;
    Result<Workload> loaded = load_workload(workload);
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(loaded->shapes.size(), 4u);
    EXPECT_EQ(run("traffic workload " + profile + " --tier fast --max-shapes 5").exit_code, 2);
}

TEST(TrafficCli, DriftExitCodes) {
    EXPECT_EQ(run("traffic drift " + trace("azure_llm_2023_code.csv") + " " +
                  trace("azure_llm_2023_conv.csv"))
                  .exit_code,
              1);
    testing::TempDir dir;
    const std::string steady = (dir.path() / "steady.jsonl").string();
    const std::string drifting = (dir.path() / "drifting.jsonl").string();
    ASSERT_EQ(run("traffic synth --preset chat --duration 1h --out " + steady).exit_code, 0);
    ASSERT_EQ(
        run("traffic synth --preset chat --duration 1h --drift 2 --out " + drifting).exit_code, 0);
    EXPECT_EQ(run("traffic drift " + steady + " --split").exit_code, 0);
    CliRun drifted = run("traffic drift " + drifting + " --split --json");
    EXPECT_EQ(drifted.exit_code, 1);
    EXPECT_NE(drifted.out.find("\"decision\": \"drift\""), std::string::npos) << drifted.out;
    EXPECT_EQ(run("traffic watch " + drifting + " --window 10m").exit_code, 1);
    EXPECT_EQ(run("traffic watch " + steady + " --window 10m").exit_code, 0);
}

TEST(TrafficCli, BadInputIsExitCodeTwo) {
    testing::TempDir dir;
    EXPECT_EQ(run("traffic profile " + (dir.path() / "missing.csv").string()).exit_code, 2);
    EXPECT_EQ(run("traffic profile " + dir.write("x.csv", "a,b\n1,2\n").string()).exit_code, 2);
    const std::string bad = dir.write("bad.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:00:00.0,1,1\n2023-11-16 18:00:01.0,x,1\n")
                                .string();
    EXPECT_EQ(run("traffic profile " + bad).exit_code, 0);
    EXPECT_EQ(run("traffic profile --strict " + bad).exit_code, 2);
    EXPECT_EQ(run("traffic synth --preset poetry").exit_code, 2);
    EXPECT_EQ(run("traffic synth --duration 10x").exit_code, 2);
    EXPECT_EQ(run("traffic watch " + bad + " --window 0s").exit_code, 2);
}

// What the command-line parser rejects is bad usage too: exit 2 like the commands' own checks, not
// CLI11's internal codes (104-109).
TEST(TrafficCli, ParserErrorsAreExitCodeTwo) {
    EXPECT_EQ(run("traffic drift --bogus").exit_code, 2);                  // unknown flag
    EXPECT_EQ(run("traffic drift").exit_code, 2);                          // missing argument
    EXPECT_EQ(run("traffic profile x.csv --max-batch abc").exit_code, 2);  // value does not parse
    EXPECT_EQ(run("no-such-command").exit_code, 2);
    EXPECT_EQ(run("").exit_code, 2);  // a subcommand is required
    EXPECT_EQ(run("--version").exit_code, 0);
}

// Engine options outside what the simulation can run on are usage errors that name the option
// and its range in words (not an abort in the simulator, a hang on NaN, or CLI11's 300-digit
// bounds), on every command that takes them. Here and below the first bad value accepted stops
// the test: the later ones would make a regressed binary run forever.
TEST(TrafficCli, EngineOptionsOutOfRangeAreUsageErrors) {
    const std::string code = trace("azure_llm_2023_code.csv");
    const struct {
        const char *option;
        const char *message;
    } cases[] = {
        {"--max-batch 0", "--max-batch: must be a whole number of sequences from 1 to 4294967295"},
        {"--max-batch -1", "--max-batch: must be a whole number of sequences from 1"},
        {"--max-batched-tokens 0", "--max-batched-tokens: must be a whole number of tokens from 1"},
        {"--step-base-ms 0",
         "--step-base-ms: must be a finite number of ms > 0 and <= 3600000 "
         "(every engine step takes some time), got `0`"},
        {"--step-base-ms nan", "--step-base-ms: must be a finite number of ms > 0"},
        {"--step-per-token-ms nan", "--step-per-token-ms: must be a finite number of ms >= 0"},
        {"--step-per-token-ms -1", "--step-per-token-ms: must be a finite number of ms >= 0"},
        {"--step-per-kv-token-ms inf", "--step-per-kv-token-ms: must be a finite number of ms"},
        {"--samples -1", "--samples: must be a whole number of requests from 0"},
    };
    for (const auto &c : cases)
        for (const char *command : {"profile", "workload"}) {
            CliRun rejected =
                run(std::string("traffic ") + command + " " + code + " " + c.option, true);
            ASSERT_EQ(rejected.exit_code, 2) << command << " " << c.option;
            EXPECT_TRUE(contains(rejected.out, c.message)) << rejected.out;
            EXPECT_FALSE(contains(rejected.out, "not in range")) << rejected.out;
        }
}

// synth checks every option before it creates --out, and writes through a temporary renamed into
// place, so a rejected run leaves an existing file as it was.
TEST(TrafficCli, SynthNeverDestroysItsOutputOnError) {
    testing::TempDir dir;
    const auto kept = dir.write("keep.jsonl", "precious\n");
    for (const char *options : {"--preset bogus", "--rate -5", "--rate nan", "--duration inf",
                                "--drift poetry", "--duration 100d --rate 100"}) {
        EXPECT_EQ(
            run(std::string("traffic synth ") + options + " --out " + kept.string()).exit_code, 2)
            << options;
        ASSERT_EQ(contents(kept), "precious\n") << options;
    }
    EXPECT_EQ(run("traffic synth --duration 1m --out " + kept.string()).exit_code, 0);
    EXPECT_TRUE(contains(contents(kept), "\"input_tokens\""));
    EXPECT_FALSE(std::filesystem::exists(kept.string() + ".tmp"));
}

// Infinite or NaN rates and durations used to write forever (or silently use the preset's rate);
// a window that cuts a trace into billions of pieces used to run for hours. All exit 2 and say
// what would work.
TEST(TrafficCli, NonFiniteRatesDurationsAndTinyWindowsAreUsageErrors) {
    const struct {
        std::string arguments, message;
    } cases[] = {
        {"traffic synth --rate nan", "--rate: must be a finite number of requests per second > 0"},
        {"traffic synth --rate 0", "--rate: must be a finite number of requests per second > 0"},
        {"traffic synth --rate inf --duration 10s",
         "--rate: must be a finite number of requests per second > 0, got `inf`"},
        {"traffic synth --duration inf", "bad duration `inf` (a finite number > 0 with a unit"},
        {"traffic synth --duration nan", "bad duration `nan`"},
        {"traffic synth --duration 1e306d", "too long to count in seconds"},
        {"traffic synth --drift-at nan", "bad duration `nan`"},
        {"traffic synth --duration 100d --rate 100",
         "8.64e+06 s at 100 req/s is about 8.64e+08 requests, more than the 20000000 a synthetic "
         "log may hold; shorten --duration or lower --rate"},
        {"traffic watch " + trace("azure_llm_2023_conv.csv") + " --window 1e-6s",
         "more than 100000; use a window of at least 0.0354 s"},
        {"traffic watch " + trace("azure_llm_2023_conv.csv") + " --window inf",
         "bad duration `inf`"},
        {"traffic drift " + trace("azure_llm_2023_code.csv") + " --split --ks nan",
         "--ks: must be a finite number of KS D >= 0 and <= 1, got `nan`"},
        {"traffic drift " + trace("azure_llm_2023_code.csv") + " --split --ks-alpha 0",
         "--ks-alpha: must be a finite number of probability > 0 and <= 1"},
        {"traffic watch " + trace("azure_llm_2023_conv.csv") + " --psi -1",
         "--psi: must be a finite number of PSI >= 0"},
    };
    for (const auto &c : cases) {
        CliRun rejected = run(c.arguments, true);
        ASSERT_EQ(rejected.exit_code, 2) << c.arguments;
        EXPECT_TRUE(contains(rejected.out, c.message)) << c.arguments << "\n" << rejected.out;
    }
}

// A trace where no row is valid (often: read in the wrong format) is an error that quotes the
// first bad rows and suggests --format; the --no-sim advice appears only for a --no-sim profile.
TEST(TrafficCli, TraceWithNoValidRowIsAnError) {
    testing::TempDir dir;
    const std::string bad = dir.write("bad.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:00:00.0,x,1\n2023-11-16 18:00:01.0,y,1\n")
                                .string();
    CliRun profiled = run("traffic profile " + bad, true);
    EXPECT_EQ(profiled.exit_code, 2);
    EXPECT_TRUE(contains(profiled.out,
                         "no valid request: all 2 rows are bad in the azure format (first: line "
                         "2: ContextTokens is not an integer (x); line 3:"))
        << profiled.out;
    EXPECT_TRUE(contains(profiled.out, "name it with --format")) << profiled.out;
    CliRun as_mooncake =
        run("traffic profile " + trace("azure_llm_2023_code.csv") + " --format mooncake", true);
    EXPECT_EQ(as_mooncake.exit_code, 2);
    EXPECT_TRUE(contains(as_mooncake.out, "all 8820 rows are bad in the mooncake format"))
        << as_mooncake.out;
    for (const char *command : {"workload", "watch", "drift --split"}) {
        CliRun rejected = run(std::string("traffic ") + command + " " + bad, true);
        EXPECT_EQ(rejected.exit_code, 2) << command;
        EXPECT_TRUE(contains(rejected.out, "no valid request")) << rejected.out;
        EXPECT_FALSE(contains(rejected.out, "--no-sim")) << rejected.out;
    }
    const std::string log = (dir.path() / "t.jsonl").string();
    const std::string unsimulated = (dir.path() / "p.json").string();
    ASSERT_EQ(run("traffic synth --duration 2m --out " + log).exit_code, 0);
    ASSERT_EQ(run("traffic profile " + log + " --no-sim --out " + unsimulated).exit_code, 0);
    CliRun derived = run("traffic workload " + unsimulated, true);
    EXPECT_EQ(derived.exit_code, 2);
    EXPECT_TRUE(contains(derived.out, "it was made with --no-sim")) << derived.out;
}

// workload cannot run without the simulation, so it has no --no-sim; on a Profile JSON the trace
// and engine options do nothing, and it says so.
TEST(TrafficCli, WorkloadOptionsThatCannotApplyAreNotSilent) {
    testing::TempDir dir;
    const std::string log = (dir.path() / "t.jsonl").string();
    const std::string profile = (dir.path() / "p.json").string();
    ASSERT_EQ(run("traffic synth --duration 2m --out " + log).exit_code, 0);
    ASSERT_EQ(run("traffic profile " + log + " --out " + profile).exit_code, 0);
    EXPECT_FALSE(contains(run("traffic workload --help").out, "--no-sim"));
    EXPECT_TRUE(contains(run("traffic profile --help").out, "--no-sim"));
    EXPECT_EQ(run("traffic workload " + log + " --no-sim").exit_code, 2);
    CliRun derived = run("traffic workload " + profile + " --max-batch 4 --step-base-ms 2", true);
    EXPECT_EQ(derived.exit_code, 0) << derived.out;
    EXPECT_TRUE(contains(derived.out, "warning: --max-batch has no effect on " + profile +
                                          ": it is a Profile JSON, read and simulated when it "
                                          "was made; pass the trace to apply --max-batch"))
        << derived.out;
    EXPECT_TRUE(contains(derived.out, "warning: --step-base-ms has no effect")) << derived.out;
    EXPECT_FALSE(contains(run("traffic workload " + profile, true).out, "warning"));
    EXPECT_TRUE(contains(run("traffic workload " + log + " --max-batch 4", true).out,
                         "workload (slow tier)"));
}

TEST(TrafficCli, HelpTeachesWithAnExample) {
    for (const char *command : {"profile", "drift", "watch", "synth", "workload"}) {
        CliRun help = run(std::string("traffic ") + command + " --help");
        EXPECT_EQ(help.exit_code, 0) << command;
        EXPECT_NE(help.out.find("Example"), std::string::npos) << command;
    }
}

}  // namespace
}  // namespace hp::traffic
