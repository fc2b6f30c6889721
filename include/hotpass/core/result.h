// Result<T>: a value or an error message. Failures at a boundary (a bad file, a bad config, a
// plugin that will not load) are data returned to the caller; broken invariants use HP_CHECK.
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

#include "hotpass/core/check.h"

namespace hp {

struct Error {
    std::string message;
};

// Builds an Error with fmt formatting: `return hp::error("tensor {} missing", name);`
template <typename... Args>
Error error(fmt::format_string<Args...> format, Args &&...args) {
    return Error{fmt::format(format, std::forward<Args>(args)...)};
}

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : state_(std::move(value)) {}
    Result(Error error) : state_(std::move(error)) {}

    bool ok() const { return std::holds_alternative<T>(state_); }
    explicit operator bool() const { return ok(); }

    T &value() & {
        HP_CHECK(ok(), "Result::value() on an error: {}", std::get<Error>(state_).message);
        return std::get<T>(state_);
    }
    const T &value() const & {
        HP_CHECK(ok(), "Result::value() on an error: {}", std::get<Error>(state_).message);
        return std::get<T>(state_);
    }
    // By value: `for (auto &x : f().value())` would otherwise iterate a temporary that is gone.
    T value() && {
        HP_CHECK(ok(), "Result::value() on an error: {}", std::get<Error>(state_).message);
        return std::get<T>(std::move(state_));
    }
    const std::string &error() const {
        HP_CHECK(!ok(), "Result::error() on a value");
        return std::get<Error>(state_).message;
    }
    T *operator->() { return &value(); }
    const T *operator->() const { return &value(); }
    T &operator*() & { return value(); }
    const T &operator*() const & { return value(); }

private:
    std::variant<T, Error> state_;
};

// Status: a Result with no value.
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(Error error) : message_(std::move(error.message)), ok_(false) {}
    static Status success() { return Status(); }

    bool ok() const { return ok_; }
    explicit operator bool() const { return ok_; }
    const std::string &error() const { return message_; }

private:
    std::string message_;
    bool ok_ = true;
};

}  // namespace hp

// Propagates an error from a Status or Result expression out of the current function.
#define HP_TRY(expr)                                               \
    do {                                                           \
        auto &&hp_try_result_ = (expr);                            \
        if (!hp_try_result_.ok()) return ::hp::Error{hp_try_result_.error()}; \
    } while (0)
