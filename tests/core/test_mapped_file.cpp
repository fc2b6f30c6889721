#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hotpass/core/mapped_file.h"

namespace hp {
namespace {

namespace fs = std::filesystem;

struct FileTest : testing::Test {
    fs::path root = fs::temp_directory_path() / fmt::format("hotpass-file-{}", getpid());
    void SetUp() override {
        fs::remove_all(root);
        fs::create_directories(root);
    }
    void TearDown() override { fs::remove_all(root); }
};

TEST_F(FileTest, WriteAtomicReplacesTheFileWhole) {
    ASSERT_TRUE(write_file_atomic(root / "a.json", "first").ok());
    ASSERT_TRUE(write_file_atomic(root / "a.json", "second").ok());
    EXPECT_EQ(read_text_file(root / "a.json").value(), "second");
    EXPECT_FALSE(fs::exists(root / "a.json.tmp"));
}

// A folder where a file was meant, or a folder that does not exist: an error, and no temporary
// file left behind (`--logits /tmp` used to leave /tmp.tmp).
TEST_F(FileTest, WriteAtomicFailsCleanly) {
    fs::create_directories(root / "folder");
    const Status into_folder = write_file_atomic(root / "folder", "x");
    ASSERT_FALSE(into_folder.ok());
    EXPECT_NE(into_folder.error().find("it is a folder"), std::string::npos) << into_folder.error();
    EXPECT_FALSE(fs::exists(root / "folder.tmp"));
    EXPECT_FALSE(write_file_atomic(root / "missing" / "a.json", "x").ok());
    EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()),
              1);  // only folder/
}

// A streamed write that fails leaves the old file as it was (`traffic synth --out` used to empty
// it).
TEST_F(FileTest, StreamedWriteKeepsTheOldFileOnError) {
    ASSERT_TRUE(write_file_atomic(root / "log.jsonl", "precious").ok());
    const Status failed = write_file_atomic(root / "log.jsonl", [](std::ostream &out) -> Status {
        out << "half";
        return error("the generator gave up");
    });
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.error(), "the generator gave up");
    EXPECT_EQ(read_text_file(root / "log.jsonl").value(), "precious");
    EXPECT_FALSE(fs::exists(root / "log.jsonl.tmp"));
    ASSERT_TRUE(write_file_atomic(root / "log.jsonl", [](std::ostream &out) {
                    out << "new";
                    return Status::success();
                }).ok());
    EXPECT_EQ(read_text_file(root / "log.jsonl").value(), "new");
}

// A FIFO or a folder where a weights file is expected: an error at once (opening a FIFO used to
// wait for a writer forever).
TEST_F(FileTest, MappingRefusesWhatIsNotARegularFile) {
    ASSERT_EQ(mkfifo((root / "fifo").c_str(), 0600), 0);
    auto fifo = MappedFile::open(root / "fifo");
    ASSERT_FALSE(fifo.ok());
    EXPECT_NE(fifo.error().find("not a regular file"), std::string::npos) << fifo.error();
    fs::create_directories(root / "folder");
    auto folder = MappedFile::open(root / "folder");
    ASSERT_FALSE(folder.ok());
    EXPECT_NE(folder.error().find("not a regular file"), std::string::npos) << folder.error();
}

TEST_F(FileTest, ReadTextFileErrorsNameThePath) {
    auto missing = read_text_file(root / "nope.txt");
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.error().find("nope.txt"), std::string::npos) << missing.error();
}

}  // namespace
}  // namespace hp
