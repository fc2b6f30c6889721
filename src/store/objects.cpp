#include "hotpass/store/objects.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "hotpass/core/hash.h"
#include "hotpass/core/mapped_file.h"

namespace hp::store {
namespace fs = std::filesystem;

namespace {

Result<std::vector<fs::path>> source_files(const fs::path &dir) {
    std::vector<fs::path> files;
    std::error_code code;
    for (auto it = fs::recursive_directory_iterator(dir, code); !code && it != fs::recursive_directory_iterator(); it.increment(code)) {
        if (it->is_regular_file() && it->path().filename() != "candidate.json") files.push_back(fs::relative(it->path(), dir));
    }
    if (code) return error("cannot list {}: {}", dir.string(), code.message());
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

Result<std::string> hash_source_dir(const fs::path &dir) {
    auto files = source_files(dir);
    if (!files.ok()) return Error{files.error()};
    if (files->empty()) return error("{} holds no files", dir.string());
    std::string keyed;
    for (const fs::path &file : *files) {
        auto contents = read_text_file(dir / file);
        if (!contents.ok()) return Error{contents.error()};
        keyed += file.string() + '\0' + *contents + '\0';
    }
    return hash_hex(keyed);
}

std::string candidate_hash(const std::string &source_hash, const std::map<std::string, std::string> &knobs) {
    std::string keyed = source_hash + '\n';
    for (const auto &[name, value] : knobs) keyed += name + '=' + value + '\n';
    return hash_hex(keyed);
}

Result<std::string> ObjectStore::put_sources(const fs::path &dir) {
    auto hash = hash_source_dir(dir);
    if (!hash.ok()) return hash;
    const fs::path target = sources(*hash);
    if (fs::exists(target)) return hash;
    auto files = source_files(dir);
    if (!files.ok()) return Error{files.error()};
    const fs::path temporary = target.parent_path() / fmt::format(".tmp.{}.{}", hash->substr(0, 8), getpid());
    std::error_code code;
    fs::remove_all(temporary, code);
    for (const fs::path &file : *files) {
        fs::create_directories((temporary / file).parent_path(), code);
        if (!code) fs::copy_file(dir / file, temporary / file, fs::copy_options::overwrite_existing, code);
        if (code) return error("cannot copy {} into the store: {}", (dir / file).string(), code.message());
    }
    fs::rename(temporary, target, code);
    if (code && !fs::exists(target)) return error("cannot store sources at {}: {}", target.string(), code.message());
    fs::remove_all(temporary, code);
    return hash;
}

}  // namespace hp::store
