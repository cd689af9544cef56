#pragma once
// Test support for the peer group over any bootstrap: a bootstrap that counts the bytes each
// collective delivers to its rank and may tamper with them (to hand one rank a bad endpoint),
// and threads as ranks with every wait bounded.

#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/bootstrap/threads.hpp"
#include "rdmacxx/endpoint.hpp"
#include "rdmacxx/gid.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

namespace test {

/// Wraps a bootstrap: counts the bytes each collective delivers to this rank (its own block
/// included) and calls `tamper(call, out)` on what was received, when set.
template <rdmacxx::bootstrap Inner>
struct counting_bootstrap {
    Inner& inner;
    std::function<void(char const* call, std::span<std::byte> out)> tamper{};
    std::size_t received = 0; // bytes delivered by allgather and alltoall
    std::size_t collectives = 0;

    [[nodiscard]] int rank() const { return static_cast<int>(inner.rank()); }
    [[nodiscard]] int size() const { return static_cast<int>(inner.size()); }
    void allgather(std::span<std::byte const> in, std::span<std::byte> out) {
        inner.allgather(in, out);
        done("allgather", out);
    }
    void alltoall(std::span<std::byte const> in, std::span<std::byte> out) {
        inner.alltoall(in, out);
        done("alltoall", out);
    }
    void barrier() {
        inner.barrier();
        ++collectives;
    }

private:
    void done(char const* call, std::span<std::byte> out) {
        received += out.size();
        ++collectives;
        if (tamper) tamper(call, out);
    }
};

/// A `counting_bootstrap::tamper` that corrupts the endpoint received from rank `from` in the
/// peer group's alltoall (a reserved bit of its QPN set): connecting to it is refused when the
/// endpoint is decoded, before anything reaches the device.
inline std::function<void(char const*, std::span<std::byte>)> corrupt_endpoint_from(int from) {
    return [from](char const* call, std::span<std::byte> out) {
        if (std::string_view{call} != "alltoall") return;
        out[static_cast<std::size_t>(from) * rdmacxx::endpoint::wire_size + 8] = std::byte{0x80}; // QPN's top byte
    };
}

/// A `counting_bootstrap::tamper` that rewrites the endpoint received from rank `from` in the
/// peer group's alltoall to GID :: (a valid encoding): the kernel finds no route to it, and
/// ibv_modify_qp(3) refuses to move the QP to RTR (EINVAL).
inline std::function<void(char const*, std::span<std::byte>)> unroutable_endpoint_from(int from) {
    return [from](char const* call, std::span<std::byte> out) {
        if (std::string_view{call} != "alltoall") return;
        auto const block =
            out.subspan(static_cast<std::size_t>(from) * rdmacxx::endpoint::wire_size, rdmacxx::endpoint::wire_size);
        rdmacxx::endpoint e = rdmacxx::endpoint::from_bytes(block);
        e.gid = rdmacxx::gid{};
        auto const bytes = e.to_bytes();
        std::copy(bytes.begin(), bytes.end(), block.begin());
    };
}

/// Runs `body(bootstrap)` on one thread per rank of `world` and returns each rank's exception
/// (null where it returned). Every collective inside is bounded by the world's timeout.
inline std::vector<std::exception_ptr> run_ranks(rdmacxx::thread_world& world,
                                                 std::function<void(rdmacxx::thread_bootstrap&)> const& body) {
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world.size()));
    std::vector<std::thread> threads;
    threads.reserve(errors.size());
    for (int r = 0; r < world.size(); ++r)
        threads.emplace_back([&errors, &body, r, boot = world.bootstrap(r)]() mutable {
            try {
                body(boot);
            } catch (...) {
                errors[static_cast<std::size_t>(r)] = std::current_exception();
            }
        });
    for (auto& t : threads)
        t.join();
    return errors;
}

} // namespace test
