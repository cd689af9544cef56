#pragma once
// Shared set-up of the device tests: the RDMA device to test on, and a pair of QPs on it
// connected to each other through the real kernel stack.

#include "rdmacxx/rdmacxx.hpp"

#include <dirent.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace test {

/// Entries of a /proc directory, dot entries left out: threads ("/proc/self/task") or open
/// descriptors ("/proc/self/fd") of this process.
inline std::size_t proc_entries(char const* dir) {
    std::size_t n = 0;
    if (DIR* d = ::opendir(dir)) {
        while (dirent const* e = ::readdir(d))
            n += e->d_name[0] != '.' ? 1 : 0;
        ::closedir(d);
    }
    return n;
}

/// The threads of this process, "TID:NAME" each (/proc/self/task/TID/comm), for a message that
/// says which thread came or went.
inline std::string thread_names() {
    std::string out;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (dirent const* e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            std::string name;
            if (FILE* f = std::fopen(("/proc/self/task/" + std::string{e->d_name} + "/comm").c_str(), "r")) {
                std::array<char, 64> buf{};
                if (std::fgets(buf.data(), static_cast<int>(buf.size()), f) != nullptr) name = buf.data();
                std::fclose(f);
            }
            if (!name.empty() && name.back() == '\n') name.pop_back();
            out += std::string{e->d_name} + ":" + name + " ";
        }
        ::closedir(d);
    }
    return out;
}

/// What `command` (run by /bin/sh) printed on stdout and stderr.
/// @throws std::runtime_error when it cannot be run or exits with a status other than 0.
inline std::string command_output(std::string const& command) {
    FILE* p = ::popen((command + " 2>&1").c_str(), "r");
    if (p == nullptr) throw std::runtime_error("cannot run " + command);
    std::string out;
    std::array<char, 512> buf{};
    while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr)
        out += buf.data();
    if (int const rc = ::pclose(p); rc != 0)
        throw std::runtime_error(command + " exited with " + std::to_string(rc) + ": " + out);
    return out;
}

/// The QPs of `type` ("RC", "UD", …) that this process holds on this node's devices, as
/// `rdma resource show qp` lists them (by the thread that made each: every thread alive now).
inline std::size_t rdma_qps_of_this_process(std::string const& type) {
    std::vector<std::string> tids;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (dirent const* e = ::readdir(d))
            if (e->d_name[0] != '.') tids.emplace_back(e->d_name);
        ::closedir(d);
    }
    std::istringstream lines{command_output("rdma resource show qp")};
    std::size_t n = 0;
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words{line};
        bool of_type = false, ours = false;
        for (std::string key, value; words >> key;) {
            if (key != "type" && key != "pid") continue;
            if (!(words >> value)) break;
            of_type = of_type || (key == "type" && value == type);
            ours = ours || (key == "pid" && std::find(tids.begin(), tids.end(), value) != tids.end());
        }
        n += of_type && ours ? 1 : 0;
    }
    return n;
}

namespace rx = rdmacxx;

/// The device named by RDMACXX_DEVICE (set by tools/softroce), else the first one. A host with
/// no device fails the test: device tests never skip.
inline rx::context open_test_device() {
    rx::device_list const devices;
    if (devices.empty())
        FAIL("no RDMA device on this host: run the device tests under tools/softroce (" << devices.describe() << ")");
    char const* const name = std::getenv("RDMACXX_DEVICE");
    return (name != nullptr && *name != '\0') ? devices.find(name).open() : devices[0].open();
}

/// Registered memory of `bytes` bytes, filled with `fill`.
struct buffer {
    buffer(rx::protection_domain& pd, std::size_t bytes, std::byte fill = std::byte{0},
           rx::access rights = rx::all_remote)
        : bytes_(bytes, fill), mr(pd.register_memory(std::span{bytes_}, rights)) {}
    std::vector<std::byte> bytes_;
    rx::memory_region mr;
    rx::local_span<std::byte> span() const { return mr.span(); }
};

/// Two QPs of one transport on one device, connected to each other (RC, UC), granting each
/// other every remote right unless `opt` says otherwise.
template <class Transport, class Completion, class Post = rx::legacy_post>
struct loopback {
    explicit loopback(rx::qp_capabilities caps = {}, rx::qp_settings const& opt = {.remote_access = rx::all_remote})
        : ctx(open_test_device()), port(ctx), pd(ctx), cq_a(ctx, 512), cq_b(ctx, 512), a(pd, cq_a, cq_a, caps),
          b(pd, cq_b, cq_b, caps) {
        a.connect(port, b.local_endpoint(port), opt);
        b.connect(port, a.local_endpoint(port), opt);
    }
    rx::context ctx;
    rx::end_port port;
    rx::protection_domain pd;
    rx::completion_queue<Completion> cq_a, cq_b;
    rx::queue_pair<Transport, Completion, Post> a, b;
};

/// A byte pattern that differs at every position and per seed.
inline void fill_pattern(std::span<std::byte> s, unsigned seed) {
    for (std::size_t i = 0; i < s.size(); ++i)
        s[i] = static_cast<std::byte>((i * 31 + seed * 7 + i / 251) & 0xff);
}

/// The IPv4 address of the test device's netdev (tools/softroce sets RDMACXX_ADDR). Device tests
/// never skip: no address is a failure.
inline std::string device_ip() {
    char const* a = std::getenv("RDMACXX_ADDR");
    if (a == nullptr || *a == '\0') FAIL("RDMACXX_ADDR is not set: run the device tests under tools/softroce");
    return a;
}

/// The next completion of `cq`, whatever its status, within `limit` (busy-polls, or sleeps on
/// the CQ's channel): a test never waits forever. @throws std::runtime_error when none came.
template <class Completion>
rx::work_completion next_completion(rx::completion_queue<Completion>& cq,
                                    std::chrono::milliseconds limit = std::chrono::seconds{30}) {
    auto wc = cq.wait_one(limit);
    if (!wc) throw std::runtime_error("no completion within " + std::to_string(limit.count()) + " ms");
    return *wc;
}

/// The next completion of `cq`, which must have succeeded, within `limit`.
/// @throws wc_error for a failed one; std::runtime_error when none came.
template <class Completion>
rx::work_completion wait_ok(rx::completion_queue<Completion>& cq,
                            std::chrono::milliseconds limit = std::chrono::seconds{30}) {
    auto wc = next_completion(cq, limit);
    wc.throw_if_error(); // a failed completion's opcode is undefined: no side from it
    return wc;
}

/// The test device's address with `port` (0: any), for the RDMA CM.
inline rx::cm::address device_address(std::uint16_t port = 0) { return rx::cm::address::resolve(device_ip(), port); }

/// Runs `f` on a thread; `join()` rethrows what it threw, so failures land in the test thread.
class background {
public:
    explicit background(std::function<void()> f)
        : thread_([this, g = std::move(f)] {
              try {
                  g();
              } catch (...) {
                  error_ = std::current_exception();
              }
          }) {}
    background(background const&) = delete;
    background& operator=(background const&) = delete;
    ~background() {
        if (thread_.joinable()) thread_.join();
    }
    void join() {
        thread_.join();
        if (error_) std::rethrow_exception(error_);
    }

private:
    std::exception_ptr error_;
    std::thread thread_;
};

} // namespace test
