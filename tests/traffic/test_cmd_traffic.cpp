// Runs the hotpass CLI: exit codes (0 ok / no drift, 1 drift, 2 bad input), outputs and --help.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
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

CliRun run(const std::string &arguments) {
    const std::string command = std::string(HOTPASS_CLI) + " " + arguments + " 2>/dev/null";
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
    EXPECT_EQ(run("traffic drift --bogus").exit_code, 2);           // unknown flag
    EXPECT_EQ(run("traffic drift").exit_code, 2);                   // missing argument
    EXPECT_EQ(run("traffic profile x.csv --max-batch abc").exit_code, 2);  // value does not parse
    EXPECT_EQ(run("no-such-command").exit_code, 2);
    EXPECT_EQ(run("").exit_code, 2);                                // a subcommand is required
    EXPECT_EQ(run("--version").exit_code, 0);
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
