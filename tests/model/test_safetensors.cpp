#include "hotpass/model/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace hp::model {
namespace {

// A safetensors file from a header text (padded with spaces to 8 bytes, as writers do) and a
// data section of `data_bytes`; `declared_length` overrides the header length field.
std::string raw_file(std::string header, size_t data_bytes, uint64_t declared_length = 0) {
    while (header.size() % 8 != 0) header += ' ';
    const uint64_t length = declared_length ? declared_length : header.size();
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((length >> (8 * i)) & 0xff);
    return bytes + header + std::string(data_bytes, '\x01');
}

std::string header_error(const std::string &file) {
    auto parsed = parse_safetensors_header(file, file.size());
    EXPECT_FALSE(parsed.ok());
    return parsed.ok() ? "" : parsed.error();
}

const std::string kTwoTensors =
    R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";

TEST(Safetensors, ParsesAValidHeader) {
    const std::string file = raw_file(kTwoTensors, 20);
    auto header = parse_safetensors_header(file, file.size());
    ASSERT_TRUE(header.ok()) << header.error();
    ASSERT_EQ(header->entries.size(), 2u);
    EXPECT_EQ(header->entries[0].name, "a");
    EXPECT_EQ(header->entries[0].shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(header->entries[1].dtype_name, "F32");
    EXPECT_EQ(header->data_offset % 8, 0u);
}

TEST(Safetensors, RejectsEachKindOfBadFile) {
    EXPECT_NE(header_error(std::string(5, '\0')).find("too small"), std::string::npos);
    EXPECT_NE(header_error(raw_file(kTwoTensors, 20, 1000)).find("runs past the end of the file"), std::string::npos);
    EXPECT_NE(header_error(raw_file(kTwoTensors, 20, 100'000'001)).find("exceeds the 100 MB limit"), std::string::npos);
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":)", 0)).find("not valid JSON"), std::string::npos);
    EXPECT_NE(header_error(raw_file("{\"\xff\xfe\":1}", 0)).find("UTF-8"), std::string::npos);
    EXPECT_NE(header_error(raw_file(R"([1,2])", 0)).find("start with"), std::string::npos);
    // Overlap: b starts inside a.
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12))
                  .find("overlap"),
              std::string::npos);
    // Gap: b starts after a ends.
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", 20))
                  .find("gap"),
              std::string::npos);
    // Byte count does not match shape x dtype.
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", 24)).find("needs 12 bytes"),
              std::string::npos);
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})", 2)).find("unknown dtype 'Q4'"),
              std::string::npos);
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)).find("non-negative"),
              std::string::npos);
    // Data section longer than the tensors (truncated or trailing bytes both break this).
    EXPECT_NE(header_error(raw_file(kTwoTensors, 24)).find("file holds 24 data bytes"), std::string::npos);
    EXPECT_NE(header_error(raw_file(kTwoTensors, 16)).find("file holds 16 data bytes"), std::string::npos);
    // Duplicate names.
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8))
                  .find("'a' appears twice"),
              std::string::npos);
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F32","shape":[1]}})", 0)).find("no 'data_offsets'"), std::string::npos);
    // Found by the fuzzer: shape x element size wrapped around 2^64 and matched offsets [0, 0].
    EXPECT_NE(header_error(raw_file(R"({"a":{"dtype":"F64","shape":[1099511627776,4194304],"data_offsets":[0,0]}})", 0))
                  .find("overflows"),
              std::string::npos);
}

// A shape nested 100k deep: an error naming the tensor, bounded in size (writing the value into
// the message whole overflowed the stack).
TEST(Safetensors, ADeeplyNestedShapeIsABoundedError) {
    const std::string header = R"({"a":{"dtype":"F32","shape":)" + std::string(100000, '[') + std::string(100000, ']') + R"(,"data_offsets":[0,0]}})";
    const std::string message = header_error(raw_file(header, 0));
    EXPECT_NE(message.find("tensor 'a'"), std::string::npos) << message.substr(0, 200);
    EXPECT_LT(message.size(), 300u);
}

TEST(Safetensors, WriteThenOpenRoundTrips) {
    const auto path = std::filesystem::temp_directory_path() / "hotpass-test-roundtrip.safetensors";
    const std::vector<uint16_t> a = {1, 2, 3, 4, 5, 6};
    const std::vector<float> b = {1.5f, -2.5f};
    ASSERT_TRUE(write_safetensors(path, {{"z.first", DType::bf16, {2, 3}, a.data()}, {"a.second", DType::f32, {2}, b.data()}}).ok());
    auto file = open_safetensors(path);
    ASSERT_TRUE(file.ok()) << file.error();
    ASSERT_EQ(file->header.entries.size(), 2u);
    EXPECT_EQ(file->header.entries[0].name, "z.first");  // file order kept
    EXPECT_EQ(file->header.data_offset % 8, 0u);          // header padded to 8 bytes
    EXPECT_EQ(file->header.metadata.at("format"), "pt");
    EXPECT_EQ(std::memcmp(file->data(file->header.entries[0]), a.data(), 12), 0);
    EXPECT_EQ(std::memcmp(file->data(file->header.entries[1]), b.data(), 8), 0);
    std::filesystem::remove(path);
}

TEST(Safetensors, TruncatedFileOnDiskIsAnError) {
    const auto path = std::filesystem::temp_directory_path() / "hotpass-test-truncated.safetensors";
    const std::string file = raw_file(kTwoTensors, 20);
    std::ofstream(path, std::ios::binary).write(file.data(), std::streamsize(file.size() - 3));
    auto opened = open_safetensors(path);
    ASSERT_FALSE(opened.ok());
    EXPECT_NE(opened.error().find(path.string()), std::string::npos);
    EXPECT_NE(opened.error().find("data bytes"), std::string::npos);
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace hp::model
