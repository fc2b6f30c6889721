// A campaign killed with SIGKILL mid-run resumes from the store and loses at most the candidates
// that were in flight: runs the real `hotpass optimize` (tiny-llama, one fast-tier layer), kills
// it once the first candidates have fast-tier verdicts, resumes it with --resume and checks the store.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "hotpass/core/clock.h"
#include "hotpass/store/store.h"

namespace hp::campaign {
namespace {
namespace fs = std::filesystem;

pid_t spawn(const std::vector<std::string> &args, const fs::path &log) {
    const pid_t pid = fork();
    if (pid == 0) {
        FILE *out = std::fopen(log.c_str(), "w");
        if (out) {
            dup2(fileno(out), STDOUT_FILENO);
            dup2(fileno(out), STDERR_FILENO);
        }
        std::vector<char *> argv;
        for (const std::string &arg : args) argv.push_back(const_cast<char *>(arg.c_str()));
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

int count_verdicts(store::Store &store, int64_t campaign, const std::string &tier) {
    auto verdicts = store.campaign_verdicts(campaign);
    if (!verdicts.ok()) return 0;
    int n = 0;
    for (const auto &v : *verdicts) n += v.tier == tier;
    return n;
}

TEST(CampaignResume, KillNineThenResumeLosesAtMostTheInFlightCandidates) {
    const fs::path root = fs::temp_directory_path() / ("hotpass-resume-" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root);
    const fs::path db = root / "store.db";
    const std::vector<std::string> common = {"--store", db.string(), "--out", (root / "out").string(), "--no-final"};
    std::vector<std::string> first = {HOTPASS_CLI, "optimize", "--model", "preset:tiny-llama", "--fast-layers", "1",
                                      "--budget", "15m,4", "--agent-seed", "3"};
    first.insert(first.end(), common.begin(), common.end());
    const pid_t pid = spawn(first, root / "first.log");
    ASSERT_GT(pid, 0);

    // Wait for the first fast-tier verdict (builds take tens of seconds on a small machine).
    auto store = store::Store::open(db).value();
    int64_t campaign = 0;
    const double deadline = now_seconds() + 900;
    while (now_seconds() < deadline) {
        auto campaigns = store->campaigns();
        if (campaigns.ok() && !campaigns->empty()) campaign = campaigns->front().id;
        if (campaign && count_verdicts(*store, campaign, "fast") + count_verdicts(*store, campaign, "build") >= 1) break;
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "hotpass optimize ended early; see " << (root / "first.log");
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ASSERT_NE(campaign, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    const auto before = store->candidates(campaign).value();
    const int fast_before = count_verdicts(*store, campaign, "fast") + count_verdicts(*store, campaign, "build");
    EXPECT_EQ(store->campaign(campaign).value().status, "running") << "a killed campaign cannot have said it finished";
    int in_flight = 0;
    for (const auto &c : before) in_flight += c.state == "evaluating" || c.state == "evaluating_slow";
    EXPECT_LE(in_flight, 1) << "one worker: at most one candidate is being evaluated";

    std::vector<std::string> resume = {HOTPASS_CLI, "optimize", "--resume", std::to_string(campaign)};
    resume.insert(resume.end(), common.begin(), common.end());
    const pid_t resumed = spawn(resume, root / "resume.log");
    ASSERT_GT(resumed, 0);
    ASSERT_EQ(waitpid(resumed, &status, 0), resumed);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << (root / "resume.log");

    const auto after = store->candidates(campaign).value();
    const auto record = store->campaign(campaign).value();
    EXPECT_EQ(record.status, "finished");
    EXPECT_GE(record.elapsed_s, 1.0);
    // Everything decided before the kill is still there; only the in-flight ones were lost.
    EXPECT_GE(after.size(), before.size());
    int lost = 0, unfinished = 0;
    for (const auto &c : after) {
        lost += c.state == "lost";
        unfinished += c.state == "evaluating" || c.state == "evaluating_slow";
    }
    EXPECT_EQ(lost, in_flight);
    EXPECT_EQ(unfinished, 0);
    const int fast_after = count_verdicts(*store, campaign, "fast") + count_verdicts(*store, campaign, "build");
    EXPECT_GT(fast_after, fast_before) << "the resumed campaign evaluated more candidates";
    EXPECT_GE(fast_after, 4 - lost) << "the candidate budget (4) is honoured across the kill";
    EXPECT_TRUE(fs::exists(root / "out/report.json"));
    fs::remove_all(root);
}

}  // namespace
}  // namespace hp::campaign
