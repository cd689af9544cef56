#pragma once
/// @file
/// `pmix_bootstrap`: the `bootstrap` concept over PMIx, for processes started by a PMIx launcher
/// (`mpirun` of Open MPI 4.1 or later, `prterun`, `srun --mpi=pmix`) that need no MPI. The only
/// rdmacxx header that includes `<pmix.h>`; include it where PMIx is already a dependency (Meson:
/// the `pmix` feature option builds rdmacxx's PMIx example and tests when Meson finds `pmix`).

#include "rdmacxx/bootstrap/bootstrap.hpp"
#include "rdmacxx/error.hpp"

// pmix_common.h defines inline helpers with C casts and int-to-size_t conversions: its warnings
// are PMIx's, not the includer's.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <pmix.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace rdmacxx {
inline namespace v0 {

namespace detail {

/// The number of the next PMIx collective of this process, shared by every `pmix_bootstrap` in
/// it: keys are never reused, so a value a peer cached from an earlier collective (PMIx keeps
/// remote data it has fetched) can never be taken for a later one. Every rank calls the same
/// collectives in the same order, so every rank counts the same.
inline std::atomic<std::uint64_t> pmix_next_collective{0};

/// One collective's non-blocking PMIx calls in flight: what they read until they complete (PMIx
/// reads the info array, the procs and the keys after the call returns) and what they bring
/// back. Shared by the caller and every callback, so that a caller that gave up waiting leaves
/// nothing dangling behind it.
struct pmix_round {
    std::mutex mutex;
    std::condition_variable finished;
    std::size_t pending = 0;
    pmix_status_t status = PMIX_SUCCESS; // the first failure
    std::string failed_call;             // the call that failed first, with its rank
    std::string failure_text;            // when it is not PMIx's own text for `status`
    std::vector<pmix_info_t> info;
    std::vector<pmix_proc_t> procs;  // the rank each Get reads from
    std::vector<std::string> keys;   // the key each Get reads
    std::vector<std::size_t> expect; // the bytes each Get must bring
    std::vector<std::vector<std::byte>> values;

    pmix_round() = default;
    pmix_round(pmix_round const&) = delete;
    pmix_round& operator=(pmix_round const&) = delete;
    ~pmix_round() {
        for (auto& i : info)
            ::PMIx_Value_destruct(&i.value);
    }

    void fail(pmix_status_t rc, std::string call, std::string text = {}) {
        if (status != PMIX_SUCCESS) return;
        status = rc;
        failed_call = std::move(call);
        failure_text = std::move(text);
    }
};

/// What one callback receives as its `cbdata`: its round, and which Get it is (none for a fence).
struct pmix_callback {
    std::shared_ptr<pmix_round> round;
    std::size_t get = 0;
};

} // namespace detail

/// A bootstrap over PMIx: the processes of this process's PMIx namespace (the job its launcher
/// started) are the ranks, in PMIx rank order. Needs no MPI: `mpirun -np 3 ./prog` of Open MPI
/// (which hosts a PMIx server) or any PMIx launcher gives each process what `PMIx_Init(3)`
/// needs.
///
/// How each collective works, and what PMIx moves (PMIx 4.2; a PMIx server runs on each node,
/// the launcher's daemon, and moves data between nodes):
/// - `allgather`: `PMIx_Put` of key `rdmacxx.<n>` (n counts this process's PMIx collectives),
///   `PMIx_Commit`, `PMIx_Fence` with `PMIX_COLLECT_DATA` true, then a `PMIx_Get` from every other
///   rank, served by this node's server. The collecting fence moves everything each process has
///   put, earlier collectives' keys included, to every node.
/// - `alltoall`: one `PMIx_Put` per other rank (`rdmacxx.<n>.<destination>`), `PMIx_Commit`, a
///   fence that collects no data, then one `PMIx_Get` per other rank of the key meant for this
///   rank only. A rank on another node is reached by direct modex: this node's server asks that
///   rank's server, which answers with everything that rank has put (PMIx 4.2 moves a process's
///   data as a whole, not key by key). So each rank receives O(size()) bytes as the concept
///   promises, but between PMIx servers each rank's whole put set (this alltoall's size() blocks
///   and every earlier collective's bytes) crosses to each node that reads from it.
/// - `barrier`: a fence that collects no data.
/// Put data stays in the PMIx servers until the job ends (PMIx cannot withdraw a put): a
/// bootstrap is for setting up, not for a data path.
///
/// Every collective is bounded by `timeout()`: the fence and the Gets are non-blocking calls
/// (`PMIx_Fence_nb`, `PMIx_Get_nb`, which also get `PMIX_TIMEOUT`) waited for at most that long
/// in all. A collective that ran out throws a `bootstrap_error` with code `std::errc::timed_out`,
/// and the bootstrap is broken for good: every later collective throws one too (the ranks no
/// longer agree on which collective is which).
///
/// Initialises PMIx in its constructor and finalises it in its destructor; PMIx counts these,
/// so several bootstraps (and the application's own PMIx use) may live together, and only the
/// last `PMIx_Finalize` ends the connection to the server. Move-only.
/// Thread-safety: one thread at a time per bootstrap, and one collective at a time per process
/// (every bootstrap of a process counts collectives together); PMIx's own progress thread runs
/// the callbacks.
/// @see PMIx_Init(3), PMIx_Put(3), PMIx_Commit(3), PMIx_Fence(3), PMIx_Get(3), PMIx_Finalize(3)
class pmix_bootstrap {
public:
    /// Initialises PMIx (connects to the node's PMIx server on the first initialisation of this
    /// process) and reads the job's size (`PMIX_JOB_SIZE`).
    /// @param timeout  the bound of each collective (whole seconds, positive)
    /// @throws argument_error when `timeout` is not positive; bootstrap_error when PMIx_Init fails
    ///         (the process was not started by a PMIx launcher, or its server is gone) or the job
    ///         size cannot be read.
    explicit pmix_bootstrap(std::chrono::seconds timeout = std::chrono::seconds{60}) : timeout_(timeout) {
        if (timeout.count() <= 0) [[unlikely]]
            detail::throw_argument("pmix_bootstrap: the timeout must be positive, not " +
                                   std::to_string(timeout.count()) + " s");
        if (pmix_status_t const rc = ::PMIx_Init(&proc_, nullptr, 0); rc != PMIX_SUCCESS) [[unlikely]]
            fail(rc, "PMIx_Init",
                 std::string(::PMIx_Error_string(rc)) + " (no PMIx server: was this process started by a PMIx "
                                                        "launcher such as mpirun, prterun or srun --mpi=pmix?)");
        initialised_ = true;
        try {
            pmix_proc_t job{};
            std::memcpy(job.nspace, proc_.nspace, sizeof job.nspace);
            job.rank = PMIX_RANK_WILDCARD;
            pmix_info_t info{};
            load_timeout(info);
            pmix_value_t* value = nullptr;
            pmix_status_t const rc = ::PMIx_Get(&job, PMIX_JOB_SIZE, &info, 1, &value);
            ::PMIx_Value_destruct(&info.value);
            check(rc, "PMIx_Get(PMIX_JOB_SIZE)");
            bool const ok = value != nullptr && value->type == PMIX_UINT32 && value->data.uint32 >= 1 &&
                            value->data.uint32 <= static_cast<std::uint32_t>(INT32_MAX);
            if (ok) size_ = static_cast<int>(value->data.uint32);
            if (value != nullptr) {
                ::PMIx_Value_destruct(value);
                std::free(value); // NOLINT(cppcoreguidelines-no-malloc): PMIx allocated it with malloc
            }
            if (!ok) throw bootstrap_error("PMIx_Get(PMIX_JOB_SIZE)", PMIX_ERR_TYPE_MISMATCH, "no job size");
            if (proc_.rank >= static_cast<pmix_rank_t>(size_))
                throw bootstrap_error("PMIx_Init", PMIX_ERR_BAD_PARAM,
                                      "rank " + std::to_string(proc_.rank) + " is outside the job of " +
                                          std::to_string(size_));
        } catch (...) {
            release();
            throw;
        }
    }

    pmix_bootstrap(pmix_bootstrap const&) = delete;
    pmix_bootstrap& operator=(pmix_bootstrap const&) = delete;
    /// Takes `other`'s PMIx initialisation; `other` is left without one.
    pmix_bootstrap(pmix_bootstrap&& other) noexcept
        : proc_(other.proc_), size_(other.size_), timeout_(other.timeout_),
          initialised_(std::exchange(other.initialised_, false)), broken_(std::move(other.broken_)) {}
    /// Finalises this one's PMIx initialisation, then takes `other`'s.
    pmix_bootstrap& operator=(pmix_bootstrap&& other) noexcept {
        if (this != &other) {
            release();
            proc_ = other.proc_;
            size_ = other.size_;
            timeout_ = other.timeout_;
            initialised_ = std::exchange(other.initialised_, false);
            broken_ = std::move(other.broken_);
        }
        return *this;
    }
    /// Finalises PMIx (PMIx_Finalize(3); PMIx ends only with the process's last one).
    ~pmix_bootstrap() { release(); }

    /// This process's PMIx rank.
    [[nodiscard]] int rank() const noexcept { return static_cast<int>(proc_.rank); }
    /// The number of processes in this process's PMIx namespace (its job).
    [[nodiscard]] int size() const noexcept { return size_; }
    /// The bound of each collective.
    [[nodiscard]] std::chrono::seconds timeout() const noexcept { return timeout_; }
    /// This process's PMIx name (namespace and rank).
    [[nodiscard]] pmix_proc_t const& native_handle() const noexcept { return proc_; }

    /// Every rank's `in` (the same size on every rank), concatenated in rank order into `out`.
    /// @throws argument_error when `out.size() != in.size() * size()`; bootstrap_error when a
    ///         PMIx call fails, a rank put another number of bytes, or the ranks did not all
    ///         arrive within `timeout()` (`std::errc::timed_out`).
    void allgather(std::span<std::byte const> in, std::span<std::byte> out) {
        detail::check_allgather_sizes("pmix_bootstrap::allgather", in.size(), out.size(), size_);
        usable();
        std::string const key = "rdmacxx." + std::to_string(detail::pmix_next_collective++);
        auto const block = in.size();
        auto const me = static_cast<std::size_t>(rank());
        if (block != 0) {
            put(key, in);
            commit();
        }
        auto const deadline = std::chrono::steady_clock::now() + timeout_;
        fence(block != 0, deadline);
        if (block == 0) return;
        std::memcpy(out.data() + me * block, in.data(), block);
        gather([&](std::size_t) { return std::string(key); }, block, out, deadline);
    }

    /// Personalised exchange: `in` holds `size()` blocks of equal size (the same on every rank),
    /// block r for rank r; `out` (as many bytes as `in`) receives rank r's block for this rank at
    /// offset `r × block`. Each rank gets only its own column (see the class for what PMIx moves
    /// between nodes to deliver it).
    /// @throws argument_error when `in.size()` is not a multiple of `size()` or `out.size() !=
    ///         in.size()`; bootstrap_error when a PMIx call fails, a rank put a block of another
    ///         size, or the ranks did not all arrive within `timeout()` (`std::errc::timed_out`).
    void alltoall(std::span<std::byte const> in, std::span<std::byte> out) {
        auto const n = static_cast<std::size_t>(size_);
        std::size_t const block =
            detail::check_alltoall_sizes("pmix_bootstrap::alltoall", in.size(), out.size(), size_);
        usable();
        std::string const prefix = "rdmacxx." + std::to_string(detail::pmix_next_collective++) + ".";
        auto const me = static_cast<std::size_t>(rank());
        if (block != 0) {
            for (std::size_t to = 0; to < n; ++to)
                if (to != me) put(prefix + std::to_string(to), in.subspan(to * block, block));
            commit();
        }
        auto const deadline = std::chrono::steady_clock::now() + timeout_;
        fence(false, deadline);
        if (block == 0) return;
        std::memcpy(out.data() + me * block, in.data() + me * block, block);
        std::string const mine = std::to_string(me);
        gather([&](std::size_t) { return prefix + mine; }, block, out, deadline);
    }

    /// Returns once every rank has called it (a fence that collects no data).
    /// @throws bootstrap_error when PMIx_Fence fails or the ranks did not all arrive within
    ///         `timeout()` (`std::errc::timed_out`).
    void barrier() {
        usable();
        fence(false, std::chrono::steady_clock::now() + timeout_);
    }

private:
    [[noreturn]] static void fail(pmix_status_t rc, std::string const& call, std::string const& text = {}) {
        throw bootstrap_error(call, static_cast<int>(rc), text.empty() ? ::PMIx_Error_string(rc) : text,
                              rc == PMIX_ERR_TIMEOUT ? std::errc::timed_out : std::errc::io_error);
    }
    static void check(pmix_status_t rc, char const* call) {
        if (rc != PMIX_SUCCESS) [[unlikely]]
            fail(rc, call);
    }

    void load_timeout(pmix_info_t& info) const {
        auto const seconds = static_cast<int>(timeout_.count());
        (void)::PMIx_Info_load(&info, PMIX_TIMEOUT, &seconds, PMIX_INT);
    }

    void usable() const {
        if (!initialised_) [[unlikely]]
            throw bootstrap_error("pmix_bootstrap", PMIX_ERR_BAD_PARAM, "this bootstrap was moved from");
        if (!broken_.empty()) [[unlikely]]
            throw bootstrap_error("pmix_bootstrap", PMIX_ERR_TIMEOUT,
                                  "unusable since an earlier collective: " + broken_, std::errc::timed_out);
    }

    static void put(std::string const& key, std::span<std::byte const> bytes) {
        pmix_value_t value{};
        value.type = PMIX_BYTE_OBJECT;
        // PMIx_Put copies the bytes; it never writes through the pointer.
        value.data.bo.bytes = const_cast<char*>(reinterpret_cast<char const*>(bytes.data()));
        value.data.bo.size = bytes.size();
        if (pmix_status_t const rc = ::PMIx_Put(PMIX_GLOBAL, key.c_str(), &value); rc != PMIX_SUCCESS) [[unlikely]]
            fail(rc, "PMIx_Put(" + key + ")");
    }
    static void commit() { check(::PMIx_Commit(), "PMIx_Commit"); }

    // Waits for `round`'s calls until `deadline`, then throws its first failure, if any.
    void wait(detail::pmix_round& round, std::chrono::steady_clock::time_point deadline, char const* what) {
        std::unique_lock lock(round.mutex);
        if (!round.finished.wait_until(lock, deadline, [&] { return round.pending == 0; })) {
            std::string const text = "rank " + std::to_string(rank()) + " waited " + std::to_string(timeout_.count()) +
                                     " s: a rank did not arrive or its PMIx server did not answer";
            broken_ = std::string(what) + " failed: " + text;
            throw bootstrap_error(what, PMIX_ERR_TIMEOUT, text, std::errc::timed_out);
        }
        if (round.status != PMIX_SUCCESS) {
            if (round.status == PMIX_ERR_TIMEOUT) broken_ = round.failed_call + " timed out in PMIx";
            fail(round.status, round.failed_call, round.failure_text);
        }
    }

    void fence(bool collect, std::chrono::steady_clock::time_point deadline) {
        auto round = std::make_shared<detail::pmix_round>();
        round->info.resize(2);
        bool const flag = collect;
        (void)::PMIx_Info_load(&round->info[0], PMIX_COLLECT_DATA, &flag, PMIX_BOOL);
        load_timeout(round->info[1]);
        round->pending = 1;
        auto callback = std::make_unique<detail::pmix_callback>(detail::pmix_callback{round, 0});
        pmix_status_t const rc =
            ::PMIx_Fence_nb(nullptr, 0, round->info.data(), round->info.size(), &fence_done, callback.get());
        if (rc == PMIX_OPERATION_SUCCEEDED) return; // done at once, no callback
        if (rc != PMIX_SUCCESS) [[unlikely]]
            fail(rc, "PMIx_Fence");
        (void)callback.release(); // fence_done deletes it
        wait(*round, deadline, "PMIx_Fence");
    }

    // A PMIx_Get_nb from every other rank r of key_of(r) (`block` bytes each) into its
    // place in `out`, all in flight together.
    template <class KeyOf>
    void gather(KeyOf key_of, std::size_t block, std::span<std::byte> out,
                std::chrono::steady_clock::time_point deadline) {
        auto const n = static_cast<std::size_t>(size_);
        auto const me = static_cast<std::size_t>(rank());
        auto round = std::make_shared<detail::pmix_round>();
        round->info.resize(1);
        load_timeout(round->info[0]);
        round->procs.resize(n);
        round->keys.resize(n);
        round->expect.assign(n, block);
        round->values.resize(n);
        {
            std::lock_guard lock(round->mutex);
            round->pending = n - 1;
        }
        for (std::size_t r = 0; r < n; ++r) {
            if (r == me) continue;
            round->procs[r] = proc_;
            round->procs[r].rank = static_cast<pmix_rank_t>(r);
            round->keys[r] = key_of(r);
            auto callback = std::make_unique<detail::pmix_callback>(detail::pmix_callback{round, r});
            pmix_status_t const rc = ::PMIx_Get_nb(&round->procs[r], round->keys[r].c_str(), round->info.data(),
                                                   round->info.size(), &get_done, callback.get());
            if (rc == PMIX_SUCCESS) {
                (void)callback.release(); // get_done deletes it
                continue;
            }
            // No callback will come for this Get, nor for those not started.
            std::size_t not_started = 0;
            for (std::size_t q = r; q < n; ++q)
                not_started += q != me ? 1U : 0U;
            std::lock_guard lock(round->mutex);
            round->fail(rc, "PMIx_Get_nb(rank " + std::to_string(r) + ", " + round->keys[r] + ")");
            round->pending -= not_started;
            break;
        }
        wait(*round, deadline, "PMIx_Get");
        for (std::size_t r = 0; r < n; ++r)
            if (r != me) std::memcpy(out.data() + r * block, round->values[r].data(), block);
    }

    static void finish(detail::pmix_callback* callback) {
        std::unique_ptr<detail::pmix_callback> const owned(callback);
        auto& round = *owned->round;
        std::lock_guard lock(round.mutex);
        if (--round.pending == 0) round.finished.notify_all();
    }

    static void fence_done(pmix_status_t status, void* cbdata) {
        auto* callback = static_cast<detail::pmix_callback*>(cbdata);
        if (status != PMIX_SUCCESS) {
            std::lock_guard lock(callback->round->mutex);
            callback->round->fail(status, "PMIx_Fence");
        }
        finish(callback);
    }

    static void get_done(pmix_status_t status, pmix_value_t* value, void* cbdata) {
        auto* callback = static_cast<detail::pmix_callback*>(cbdata);
        auto& round = *callback->round;
        std::size_t const r = callback->get;
        std::string const call = "PMIx_Get(rank " + std::to_string(r) + ", " + round.keys[r] + ")";
        {
            std::lock_guard lock(round.mutex);
            if (status != PMIX_SUCCESS) {
                round.fail(status, call);
            } else if (value == nullptr || value->type != PMIX_BYTE_OBJECT) {
                round.fail(PMIX_ERR_TYPE_MISMATCH, call, "the value is not a byte object");
            } else if (value->data.bo.size != round.expect[r]) {
                round.fail(PMIX_ERR_BAD_PARAM, call,
                           "rank " + std::to_string(r) + " put " + std::to_string(value->data.bo.size) +
                               " bytes where this rank put " + std::to_string(round.expect[r]));
            } else {
                auto const* bytes = reinterpret_cast<std::byte const*>(value->data.bo.bytes);
                round.values[r].assign(bytes, bytes + value->data.bo.size);
            }
        }
        finish(callback);
    }

    void release() noexcept {
        if (!std::exchange(initialised_, false)) return;
        (void)::PMIx_Finalize(nullptr, 0);
    }

    pmix_proc_t proc_{};
    int size_ = 1;
    std::chrono::seconds timeout_;
    bool initialised_ = false;
    std::string broken_; // why every collective now throws; empty while none has timed out
};

static_assert(bootstrap<pmix_bootstrap>);

} // namespace v0
} // namespace rdmacxx
