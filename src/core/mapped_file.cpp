#include "hotpass/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hp {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::filesystem::path &path) {
    // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever; only regular files map.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return error("cannot open {}: {}", path.string(), std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        const int saved = errno;
        ::close(fd);
        return error("cannot stat {}: {}", path.string(), std::strerror(saved));
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        return error("cannot map {}: not a regular file", path.string());
    }
    std::shared_ptr<MappedFile> file(new MappedFile());
    file->path_ = path;
    file->size_ = size_t(info.st_size);
    if (file->size_ > 0) {
        void *mapped = ::mmap(nullptr, file->size_, PROT_READ, MAP_SHARED, fd, 0);
        if (mapped == MAP_FAILED) {
            const int saved = errno;
            ::close(fd);
            return error("cannot mmap {}: {}", path.string(), std::strerror(saved));
        }
        file->data_ = static_cast<const uint8_t *>(mapped);
    }
    ::close(fd);
    return file;
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t *>(data_), size_);
}

Result<std::string> read_text_file(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error("cannot open {}: {}", path.string(), std::strerror(errno));
    std::ostringstream contents;
    contents << in.rdbuf();
    if (in.bad()) return error("cannot read {}", path.string());
    return contents.str();
}

Status write_file_atomic(const std::filesystem::path &path, const std::function<Status(std::ostream &)> &write) {
    std::error_code code;
    if (std::filesystem::is_directory(path, code)) return error("cannot write {}: it is a folder (give a file name)", path.string());
    const std::filesystem::path temporary = path.string() + ".tmp";
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return error("cannot create {}: {}", temporary.string(), std::strerror(errno));
    Status written = write(out);
    out.close();
    if (written.ok() && !out) written = error("cannot write {}: {}", temporary.string(), std::strerror(errno));
    if (written.ok()) {
        std::filesystem::rename(temporary, path, code);
        if (code) written = error("cannot rename {} to {}: {}", temporary.string(), path.string(), code.message());
    }
    if (!written.ok()) std::filesystem::remove(temporary, code);  // nothing is left behind
    return written;
}

Status write_file_atomic(const std::filesystem::path &path, std::string_view contents) {
    return write_file_atomic(path, [&](std::ostream &out) {
        out.write(contents.data(), std::streamsize(contents.size()));
        return Status::success();
    });
}

}  // namespace hp
