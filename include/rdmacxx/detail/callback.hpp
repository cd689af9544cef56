#pragma once
/// @file
/// `detail::callback<R(Args...)>`: a move-only, type-erased callable (what C++23 calls
/// `std::move_only_function`), for the user's callbacks the CM engine keeps (`on_request`,
/// `on_end`). Its own header because <functional> brings <unordered_map> along in libstdc++,
/// which the umbrella header keeps out (tests/unit/lean_include_test.cpp).

#include <memory>
#include <type_traits>
#include <utility>

namespace rdmacxx {
inline namespace v0 {
namespace detail {

template <class Signature>
class callback;

/// A move-only callable of signature `R(Args...)`, empty or holding any callable (move-only ones
/// too) on the heap. Calling an empty one is a precondition violation.
/// Thread-safety: as the callable it holds.
template <class R, class... Args>
class callback<R(Args...)> {
public:
    /// Empty.
    callback() noexcept = default;
    /// Holds `fn`.
    /// @throws std::bad_alloc
    template <class Fn>
        requires(!std::is_same_v<std::remove_cvref_t<Fn>, callback> && std::is_invocable_r_v<R, Fn&, Args...>)
    callback(Fn&& fn) // NOLINT(google-explicit-constructor,bugprone-forwarding-reference-overload): a callable converts
        : held_(std::make_unique<holder<std::decay_t<Fn>>>(std::forward<Fn>(fn))) {}

    /// True when it holds a callable.
    explicit operator bool() const noexcept { return held_ != nullptr; }
    /// Calls the callable held.
    R operator()(Args... args) const { return held_->call(std::forward<Args>(args)...); }

private:
    struct base {
        base() = default;
        base(base const&) = delete;
        base& operator=(base const&) = delete;
        virtual ~base() = default;
        virtual R call(Args... args) = 0;
    };
    template <class Fn>
    struct holder final : base {
        explicit holder(Fn f) : fn(std::move(f)) {}
        R call(Args... args) override { return fn(std::forward<Args>(args)...); }
        Fn fn;
    };
    std::unique_ptr<base> held_;
};

} // namespace detail
} // namespace v0
} // namespace rdmacxx
