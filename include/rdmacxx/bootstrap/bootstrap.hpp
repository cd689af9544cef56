#pragma once
/// @file
/// The bootstrap concept: the out-of-band exchange a group of processes needs before its QPs
/// can talk (rank, size, an allgather of equal-size byte blobs, a barrier), shaped like UCC's
/// out-of-band allgather (`ucc_oob_coll`). Engines adapt to it in their own headers
/// (`rdmacxx/bootstrap/mpi.hpp` over an `MPI_Comm`); this header names no engine.

#include "rdmacxx/error.hpp"

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// What a bootstrap engine must offer: `rank()` in [0, size()), `size()` ≥ 1, and three
/// collectives that every rank calls in the same order:
/// - `allgather(in, out)`: each rank contributes `in` (the same number of bytes on every rank);
///   `out` (exactly `in.size() * size()` bytes) receives rank r's bytes at offset
///   `r * in.size()` (MPI_Allgather);
/// - `alltoall(in, out)`: `in` holds `size()` blocks of equal size (the same on every rank),
///   block r meant for rank r; `out` (as many bytes as `in`) receives, at offset `r * block`,
///   the block rank r meant for this rank (MPI_Alltoall): each rank receives only its own
///   column, O(size()) bytes where an allgather of every rank's blocks would be O(size()²);
/// - `barrier()`: returns on a rank once every rank has called it.
/// All block until done and throw an `rdmacxx::error` (a `bootstrap_error` for the adapters
/// rdmacxx ships) on failure.
template <class B>
concept bootstrap = requires(B& b, B const& cb, std::span<std::byte const> in, std::span<std::byte> out) {
    { cb.rank() } -> std::convertible_to<int>;
    { cb.size() } -> std::convertible_to<int>;
    b.allgather(in, out);
    b.alltoall(in, out);
    b.barrier();
};

namespace detail {
/// Refuses an allgather whose `out` is not `in_bytes × ranks` bytes: an `argument_error` naming
/// `who` (e.g. "mpi_bootstrap::allgather"), thrown before the engine sees the call.
inline void check_allgather_sizes(char const* who, std::size_t in_bytes, std::size_t out_bytes, int ranks) {
    if (out_bytes != in_bytes * static_cast<std::size_t>(ranks)) [[unlikely]]
        throw_argument(std::string(who) + ": the output holds " + std::to_string(out_bytes) + " bytes, not " +
                       std::to_string(in_bytes) + " bytes × " + std::to_string(ranks) + " ranks");
}

/// Refuses an alltoall whose `in` is not `ranks` equal blocks or whose `out` is not as large: an
/// `argument_error` naming `who`, thrown before the engine sees the call. Returns the block size.
inline std::size_t check_alltoall_sizes(char const* who, std::size_t in_bytes, std::size_t out_bytes, int ranks) {
    auto const n = static_cast<std::size_t>(ranks);
    if (in_bytes % n != 0 || out_bytes != in_bytes) [[unlikely]]
        throw_argument(std::string(who) + ": " + std::to_string(in_bytes) + " bytes in and " +
                       std::to_string(out_bytes) + " out are not the same number of equal blocks for " +
                       std::to_string(n) + " ranks");
    return in_bytes / n;
}
} // namespace detail

/// A bootstrap engine's call that failed: names the call (e.g. "MPI_Allgather") and carries the
/// engine's own error text and code. Its `code()` is `std::errc::io_error` (the engine's codes
/// are not errno values), or `std::errc::timed_out` when ranks did not arrive within a bound.
class bootstrap_error : public error {
public:
    /// @param call         the engine function that failed, e.g. "MPI_Allgather"
    /// @param engine_code  the engine's own error code (an MPI error class for MPI; 0 for none)
    /// @param engine_text  the engine's description of it
    /// @param code         `std::errc::io_error`, or `std::errc::timed_out` for a wait that ran out
    bootstrap_error(std::string call, int engine_code, std::string const& engine_text,
                    std::errc code = std::errc::io_error)
        : error(std::make_error_code(code), call + " failed: " + engine_text), call_(std::move(call)),
          engine_code_(engine_code) {}

    /// The engine function that failed.
    [[nodiscard]] std::string const& call() const noexcept { return call_; }
    /// The engine's own error code.
    [[nodiscard]] int engine_code() const noexcept { return engine_code_; }

protected:
    void dump_attributes(std::ostream& os, std::string const& lead) const override {
        os << lead << "call: " << call_ << '\n' << lead << "engine code: " << engine_code_ << '\n';
    }

private:
    std::string call_;
    int engine_code_;
};

} // namespace v0
} // namespace rdmacxx
