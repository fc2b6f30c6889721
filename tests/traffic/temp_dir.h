// Test helpers: a temporary directory removed at the end of the test, file writing, and the
// path of the shared traces (../shared/data/traces from the repository root).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace hp::traffic::testing {

inline std::filesystem::path traces_dir() {
    return std::filesystem::path(HOTPASS_SHARED_DIR) / "data" / "traces";
}

class TempDir {
  public:
    TempDir() {
        const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = std::filesystem::temp_directory_path() /
                (std::string("hotpass_traffic_") + info->test_suite_name() + "_" + info->name() +
                 "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::filesystem::path write(const std::string &name, const std::string &contents) const {
        const std::filesystem::path file = path_ / name;
        std::ofstream(file, std::ios::binary) << contents;
        return file;
    }
    const std::filesystem::path &path() const { return path_; }

  private:
    std::filesystem::path path_;
};

}  // namespace hp::traffic::testing
