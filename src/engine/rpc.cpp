#include "hotpass/engine/rpc.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hotpass/core/clock.h"

namespace hp::engine {

LineChannel::~LineChannel() { close(); }

LineChannel &LineChannel::operator=(LineChannel &&other) noexcept {
    if (this != &other) {
        close();
        fd_ = other.fd_;
        pending_ = std::move(other.pending_);
        other.fd_ = -1;
    }
    return *this;
}

void LineChannel::close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

Result<std::string> LineChannel::read_line(double timeout_seconds) {
    const double deadline = now_seconds() + timeout_seconds;
    char buffer[65536];
    while (true) {
        const size_t newline = pending_.find('\n');
        if (newline != std::string::npos) {
            std::string line = pending_.substr(0, newline);
            pending_.erase(0, newline + 1);
            return line;
        }
        int wait_ms = -1;
        if (timeout_seconds >= 0) {
            const double left = deadline - now_seconds();
            if (left <= 0) return error("timed out after {:.1f} s waiting for a reply", timeout_seconds);
            wait_ms = int(left * 1000) + 1;
        }
        pollfd poll_fd{fd_, POLLIN, 0};
        const int ready = poll(&poll_fd, 1, wait_ms);
        if (ready < 0) {
            if (errno == EINTR) continue;
            return error("poll: {}", std::strerror(errno));
        }
        if (ready == 0) continue;
        const ssize_t n = ::read(fd_, buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) continue;
            return error("read: {}", std::strerror(errno));
        }
        if (n == 0) return error("connection closed");
        pending_.append(buffer, size_t(n));
    }
}

Status LineChannel::write_line(const std::string &line) {
    std::string data = line;
    data += '\n';
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            return error("write: {}", std::strerror(errno));
        }
        done += size_t(n);
    }
    return Status::success();
}

namespace {

Result<sockaddr_un> socket_address(const std::filesystem::path &path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.string().size() >= sizeof address.sun_path) return error("socket path too long: {}", path.string());
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    return address;
}

}  // namespace

Result<int> listen_unix(const std::filesystem::path &path) {
    auto address = socket_address(path);
    if (!address.ok()) return Error{address.error()};
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return error("socket: {}", std::strerror(errno));
    // A stale socket from an earlier executor is replaced; any other file there is not ours to delete.
    if (struct stat existing; ::lstat(path.c_str(), &existing) == 0) {
        if (!S_ISSOCK(existing.st_mode)) {
            ::close(fd);
            return error("cannot listen on {}: it exists and is not a socket", path.string());
        }
        ::unlink(path.c_str());
    }
    const mode_t previous = ::umask(0077);  // the socket file is created owner-only
    const int bound = ::bind(fd, reinterpret_cast<const sockaddr *>(&*address), sizeof(sockaddr_un));
    ::umask(previous);
    if (bound != 0 || ::listen(fd, 4) != 0) {
        const int saved = errno;
        ::close(fd);
        return error("cannot listen on {}: {}", path.string(), std::strerror(saved));
    }
    ::chmod(path.c_str(), 0600);
    return fd;
}

Result<LineChannel> connect_unix(const std::filesystem::path &path, double timeout_seconds) {
    auto address = socket_address(path);
    if (!address.ok()) return Error{address.error()};
    const double deadline = now_seconds() + timeout_seconds;
    while (true) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return error("socket: {}", std::strerror(errno));
        if (::connect(fd, reinterpret_cast<const sockaddr *>(&*address), sizeof(sockaddr_un)) == 0) return LineChannel(fd);
        const int saved = errno;
        ::close(fd);
        if (now_seconds() > deadline) return error("cannot connect to {}: {}", path.string(), std::strerror(saved));
        ::usleep(20000);
    }
}

}  // namespace hp::engine
