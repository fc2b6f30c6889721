#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hotpass/traffic/line_reader.h"
#include "temp_dir.h"

namespace hp::traffic {
namespace {

std::vector<std::string> read_all(const std::filesystem::path &path, size_t max_line_bytes,
                                  std::vector<uint64_t> *errors = nullptr) {
    Result<LineReader> reader = LineReader::open(path, max_line_bytes);
    EXPECT_TRUE(reader.ok());
    std::vector<std::string> lines;
    std::string_view line;
    for (;;) {
        Result<bool> got = reader->next(line);
        if (!got.ok()) {
            if (errors) errors->push_back(reader->line_number());
            continue;
        }
        if (!*got) break;
        lines.emplace_back(line);
    }
    return lines;
}

TEST(TrafficLineReader, CrlfAndNoFinalNewline) {
    testing::TempDir dir;
    const auto file = dir.write("a.csv", "h\r\n1,2\r\n\r\nlast");
    EXPECT_EQ(read_all(file, 1 << 20), (std::vector<std::string>{"h", "1,2", "", "last"}));
}

TEST(TrafficLineReader, LinesLongerThanTheBufferSpillIntact) {
    testing::TempDir dir;
    const std::string long_line(3 * LineReader::kBufferBytes + 17, 'x');
    const auto file = dir.write("long.txt", "a\n" + long_line + "\nb\n");
    const std::vector<std::string> lines = read_all(file, 1 << 20);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[1], long_line);
    EXPECT_EQ(lines[2], "b");
}

TEST(TrafficLineReader, OverlongLineIsAnErrorWithItsNumberAndReadingContinues) {
    testing::TempDir dir;
    const auto file = dir.write("x.txt", "ok\n" + std::string(100, 'y') + "\nafter");
    std::vector<uint64_t> errors;
    EXPECT_EQ(read_all(file, 50, &errors), (std::vector<std::string>{"ok", "after"}));
    EXPECT_EQ(errors, std::vector<uint64_t>{2});
}

TEST(TrafficLineReader, EmptyFileAndMissingFile) {
    testing::TempDir dir;
    EXPECT_TRUE(read_all(dir.write("empty", ""), 1 << 20).empty());
    EXPECT_FALSE(LineReader::open(dir.path() / "missing").ok());
}

}  // namespace
}  // namespace hp::traffic
