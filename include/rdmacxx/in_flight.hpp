#pragma once
/// @file
/// `in_flight_error`, the error of work still in flight where it must not be (or of a checked
/// queue pair used against its contract), and the handler that destructors and pollers report
/// it to (`set_in_flight_handler`). See checked.hpp for the tracking that finds it.

#include "rdmacxx/error.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <ostream>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// Work still in flight where it must not be: a memory region deregistered, or a queue pair
/// destroyed, while requests posted through it had not completed. Code EBUSY
/// (`std::errc::device_or_resource_busy`).
class in_flight_error : public error {
public:
    /// @param message    what was destroyed and what was in flight
    /// @param sends      send-queue requests in flight
    /// @param receives   receive-queue requests in flight
    in_flight_error(std::string message, std::uint64_t sends, std::uint64_t receives)
        : error(std::make_error_code(std::errc::device_or_resource_busy), std::move(message)), sends_(sends),
          receives_(receives) {}

    /// Send-queue requests in flight (for a region: requests of any queue that use it).
    [[nodiscard]] std::uint64_t sends() const noexcept { return sends_; }
    /// Receive-queue requests in flight (0 for a region, which counts all under `sends()`).
    [[nodiscard]] std::uint64_t receives() const noexcept { return receives_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "sends in flight: " << sends_ << '\n' << lead << "receives in flight: " << receives_ << '\n';
    }

private:
    std::uint64_t sends_;
    std::uint64_t receives_;
};

/// What a destructor does with an `in_flight_error` (destructors do not throw): the default
/// prints `dump_detailed(…, "E:", 2)` to stderr and calls std::terminate(), as `std::thread`'s
/// destructor does for a thread still joinable, except while an exception unwinds the stack
/// (then it only prints, and the exception in flight goes on).
using in_flight_handler = void (*)(in_flight_error const&) noexcept;

namespace detail {
inline void default_in_flight_handler(in_flight_error const& e) noexcept {
    try {
        std::ostringstream out; // not std::cerr: <iostream> stays out of every user's build
        e.dump_detailed(out, "E:", 2);
        std::fputs(out.str().c_str(), stderr);
    } catch (...) { // NOLINT(bugprone-empty-catch): nothing more to do on the way to terminate
    }
    if (std::uncaught_exceptions() == 0) std::terminate(); // while unwinding, the first error goes on
}
inline std::atomic<in_flight_handler>& in_flight_handler_slot() noexcept {
    static std::atomic<in_flight_handler> slot{&default_in_flight_handler};
    return slot;
}
inline void report_in_flight(in_flight_error const& e) noexcept { in_flight_handler_slot().load()(e); }
} // namespace detail

/// Installs `handler` for the `in_flight_error`s found by destructors and returns the previous
/// one; nullptr restores the default. Thread-safety: safe to call from any thread.
inline in_flight_handler set_in_flight_handler(in_flight_handler handler) noexcept {
    return detail::in_flight_handler_slot().exchange(handler != nullptr ? handler : &detail::default_in_flight_handler);
}

} // namespace v0
} // namespace rdmacxx
