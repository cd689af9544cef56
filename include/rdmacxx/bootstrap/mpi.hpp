#pragma once
/// @file
/// `mpi_bootstrap`: the `bootstrap` concept over an MPI communicator. The only rdmacxx header
/// that includes `<mpi.h>`; include it where MPI is already a dependency (Meson: the `mpi`
/// feature option builds rdmacxx's MPI examples and tests when Meson finds MPI).

#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/error.hpp"

// MPI's own C++ bindings (deprecated since MPI-2.2) are not wanted: only the C API is used.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

namespace rdmacxx {
inline namespace v0 {

/// A bootstrap over a duplicate of an MPI communicator, so that rdmacxx's collectives never
/// match the application's own messages. MPI errors on it are returned, not fatal, and thrown
/// as `bootstrap_error` with MPI's error string.
///
/// MPI must be initialised before one is made and finalised only after every one is destroyed
/// (the destructor frees the duplicate with MPI_Comm_free(3), which is collective in the sense
/// that every rank should destroy its bootstrap; a destructor that runs after MPI_Finalize
/// frees nothing). Move-only.
/// Thread-safety: one thread at a time, as for the communicator it wraps (MPI_THREAD_SERIALIZED
/// or more is needed if that thread is not the one that initialised MPI).
/// @see MPI_Comm_dup(3), MPI_Allgather(3), MPI_Alltoall(3), MPI_Barrier(3)
class mpi_bootstrap {
public:
    /// Duplicates `comm` (collective over it: every rank of `comm` must make one).
    /// @throws bootstrap_error when MPI is not initialised or MPI_Comm_dup fails.
    explicit mpi_bootstrap(MPI_Comm comm = MPI_COMM_WORLD) {
        int initialized = 0;
        (void)::MPI_Initialized(&initialized);
        if (initialized == 0) [[unlikely]]
            throw bootstrap_error("MPI_Comm_dup", MPI_ERR_OTHER, "MPI is not initialised (call MPI_Init first)");
        check(::MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
        check(::MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        check(::MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
        check(::MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    }

    mpi_bootstrap(mpi_bootstrap const&) = delete;
    mpi_bootstrap& operator=(mpi_bootstrap const&) = delete;
    /// Takes `other`'s communicator; `other` is left without one.
    mpi_bootstrap(mpi_bootstrap&& other) noexcept
        : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), rank_(other.rank_), size_(other.size_) {}
    /// Frees this one's communicator, then takes `other`'s.
    mpi_bootstrap& operator=(mpi_bootstrap&& other) noexcept {
        if (this != &other) {
            release();
            comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
            rank_ = other.rank_;
            size_ = other.size_;
        }
        return *this;
    }
    /// Frees the duplicate communicator (nothing after MPI_Finalize).
    ~mpi_bootstrap() { release(); }

    /// This process's rank in the communicator.
    [[nodiscard]] int rank() const noexcept { return rank_; }
    /// The number of processes in the communicator.
    [[nodiscard]] int size() const noexcept { return size_; }
    /// The duplicate communicator rdmacxx uses.
    [[nodiscard]] MPI_Comm native_handle() const noexcept { return comm_; }

    /// Every rank's `in` (the same size on every rank), concatenated in rank order into `out`.
    /// @throws argument_error when `out.size() != in.size() * size()` or `in` is over INT_MAX
    ///         bytes; bootstrap_error when MPI_Allgather fails.
    void allgather(std::span<std::byte const> in, std::span<std::byte> out) {
        if (in.size() > static_cast<std::size_t>(INT_MAX)) [[unlikely]]
            detail::throw_argument("mpi_bootstrap::allgather: " + std::to_string(in.size()) +
                                   " bytes per rank exceed MPI's int count");
        detail::check_allgather_sizes("mpi_bootstrap::allgather", in.size(), out.size(), size_);
        int const count = static_cast<int>(in.size());
        check(::MPI_Allgather(in.data(), count, MPI_BYTE, out.data(), count, MPI_BYTE, comm_), "MPI_Allgather");
    }

    /// Personalised exchange: `in` holds `size()` blocks of equal size (the same on every rank),
    /// block r for rank r; `out` (as many bytes as `in`) receives rank r's block for this rank at
    /// offset `r × block`.
    /// @throws argument_error when `in.size()` is not a multiple of `size()`, `out.size() !=
    ///         in.size()`, or a block is over INT_MAX bytes; bootstrap_error when MPI_Alltoall fails.
    /// @see MPI_Alltoall(3)
    void alltoall(std::span<std::byte const> in, std::span<std::byte> out) {
        std::size_t const block = detail::check_alltoall_sizes("mpi_bootstrap::alltoall", in.size(), out.size(), size_);
        if (block > static_cast<std::size_t>(INT_MAX)) [[unlikely]]
            detail::throw_argument("mpi_bootstrap::alltoall: " + std::to_string(block) +
                                   " bytes per block exceed MPI's int count");
        int const count = static_cast<int>(block);
        check(::MPI_Alltoall(in.data(), count, MPI_BYTE, out.data(), count, MPI_BYTE, comm_), "MPI_Alltoall");
    }

    /// Returns once every rank has called it.
    /// @throws bootstrap_error when MPI_Barrier fails.
    void barrier() { check(::MPI_Barrier(comm_), "MPI_Barrier"); }

private:
    static void check(int rc, char const* call) {
        if (rc == MPI_SUCCESS) [[likely]]
            return;
        char text[MPI_MAX_ERROR_STRING] = {};
        int length = 0;
        if (::MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
        throw bootstrap_error(call, rc, std::string(text, static_cast<std::size_t>(length)));
    }

    void release() noexcept {
        if (comm_ == MPI_COMM_NULL) return;
        int finalized = 0;
        (void)::MPI_Finalized(&finalized);
        if (finalized == 0) (void)::MPI_Comm_free(&comm_);
        comm_ = MPI_COMM_NULL;
    }

    MPI_Comm comm_ = MPI_COMM_NULL;
    int rank_ = 0;
    int size_ = 1;
};

static_assert(bootstrap<mpi_bootstrap>);

} // namespace v0
} // namespace rdmacxx
