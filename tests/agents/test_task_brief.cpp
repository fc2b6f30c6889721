#include "hotpass/agents/task_brief.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "hotpass/core/mapped_file.h"

namespace hp::agents {
namespace {

// The codes listed in verdict.h's comment: the leading identifier of each comma-separated item
// before the column of explanations.
std::vector<std::string> verdict_codes() {
    const std::string header = read_text_file(std::string(HOTPASS_SOURCE_DIR) + "/include/hotpass/tune/verdict.h").value();
    std::vector<std::string> codes;
    std::istringstream lines(header.substr(header.find("// Codes"), header.find("struct Verdict") - header.find("// Codes")));
    std::string line;
    std::getline(lines, line);
    const std::regex item("^\\s*([a-z_]+)");
    while (std::getline(lines, line)) {
        if (line.rfind("//   ", 0) != 0 || line.size() < 6 || line[5] == ' ') continue;  // continuation lines
        const std::string listed = line.substr(5, line.find("   ", 5) - 5);
        std::istringstream items(listed);
        std::string entry;
        while (std::getline(items, entry, ',')) {
            std::smatch match;
            if (std::regex_search(entry, match, item)) codes.push_back(match[1]);
        }
    }
    return codes;
}

TEST(TaskBrief, TheVerdictGuideExplainsEveryVerdictCode) {
    const std::vector<std::string> codes = verdict_codes();
    ASSERT_GE(codes.size(), 20u) << "verdict.h's list was not found";
    const std::string guide = verdict_guide();
    for (const std::string &code : codes) EXPECT_NE(guide.find("`" + code + "`"), std::string::npos) << code;
}

TEST(TaskBrief, RulesStateTheGoalAndTheDevicesBuild) {
    const std::string cpu = task_rules(), cuda = task_rules("cuda");
    EXPECT_NE(cpu.find("as fast as possible while staying correct"), std::string::npos);
    EXPECT_NE(cpu.find("g++ -std=c++20"), std::string::npos);
    EXPECT_NE(cuda.find("nvcc -std=c++20"), std::string::npos);
    EXPECT_NE(cuda.find("hp_forward_entry"), std::string::npos);
}

TEST(TaskBrief, ResultsListTheBestMeasuredFirstAndFailuresWithReasons) {
    AgentContext context;
    context.results.push_back({"aaaa11112222", "knob-random-1", "baseline", {{"HP_X", "2"}}, "fast", "not_faster", 0.97, false, ""});
    context.results.push_back({"bbbb33334444", "llm-1", "baseline", {}, "fast", "faster", 1.12, true, ""});
    context.results.push_back({"cccc55556666", "command-1", "baseline", {}, "build", "build_failed", 0, false, "compile error: x.cpp:3"});
    const std::string text = results_text(context);
    EXPECT_LT(text.find("bbbb33334444"), text.find("aaaa11112222"));
    EXPECT_NE(text.find("1.120x (significant)"), std::string::npos);
    EXPECT_NE(text.find("compile error: x.cpp:3"), std::string::npos);
    context.notes.push_back({1, "campaign", "", "new incumbent", 12});
    EXPECT_NE(notes_text(context).find("campaign: new incumbent"), std::string::npos);
}

}  // namespace
}  // namespace hp::agents
