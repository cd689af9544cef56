#pragma once
// A child process for the device tests whose peers die: the device_tests program re-executed
// with RDMACXX_CM_FAULT_CHILD=spec (cm_fault_test.cpp's entry runs the spec before doctest
// starts), its lines read from a pipe with a bound, killed with SIGKILL and reaped when the
// object goes.
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace test {

// A child process running `spec`, whose lines arrive on a pipe; killed (SIGKILL) and reaped on
// destruction if still there.
class child_process {
public:
    /// `program`: the test program to run (default: this one).
    explicit child_process(std::string const& spec, std::string program = "/proc/self/exe") {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        // Everything the child needs is made before fork: only async-signal-safe calls after it.
        std::vector<std::string> env_strings{"RDMACXX_CM_FAULT_CHILD=" + spec,
                                             "RDMACXX_CM_FAULT_FD=" + std::to_string(fds[1])};
        for (char** e = environ; *e != nullptr; ++e)
            if (std::strncmp(*e, "RDMACXX_CM_FAULT_", 17) != 0) env_strings.emplace_back(*e);
        std::vector<char*> envp;
        for (auto& e : env_strings)
            envp.push_back(e.data());
        envp.push_back(nullptr);
        char arg0[] = "device_tests";
        char* argv[] = {arg0, nullptr};
        pid_ = ::fork();
        REQUIRE(pid_ >= 0);
        if (pid_ == 0) {
            ::close(fds[0]);
            (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
            ::execve(program.c_str(), argv, envp.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        in_ = fds[0];
    }
    child_process(child_process const&) = delete;
    child_process& operator=(child_process const&) = delete;
    ~child_process() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            (void)::waitpid(pid_, nullptr, 0);
        }
        ::close(in_);
    }

    // The next line the child says, within `limit` (zero: what has arrived); empty when none came.
    std::string line(std::chrono::milliseconds limit) {
        auto const deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            if (auto nl = buf_.find('\n'); nl != std::string::npos) {
                std::string l = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return l;
            }
            auto const left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd pfd{in_, POLLIN, 0}; // a limit of zero still reads what is there
            if (::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) <= 0) {
                if (left.count() <= 0) return {};
                continue;
            }
            char chunk[256];
            ssize_t const n = ::read(in_, chunk, sizeof chunk);
            if (n <= 0) return {};
            buf_.append(chunk, static_cast<std::size_t>(n));
        }
    }

    // SIGKILL to the child (still there: not reaped by `wait`).
    void kill() {
        REQUIRE(pid_ > 0); // kill(-1, …) would signal every process of the user
        REQUIRE(::kill(pid_, SIGKILL) == 0);
    }

    // The exit status (as waitpid reports it) within `limit`; nullopt when the child still runs,
    // or was reaped already.
    std::optional<int> wait(std::chrono::milliseconds limit) {
        if (pid_ <= 0) return std::nullopt; // waitpid(-1, …) would reap another child
        auto const deadline = std::chrono::steady_clock::now() + limit;
        for (;;) {
            int status = 0;
            pid_t const r = ::waitpid(pid_, &status, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return status;
            }
            if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
            std::this_thread::sleep_for(std::chrono::milliseconds{10});
        }
    }

private:
    pid_t pid_ = -1;
    int in_ = -1;
    std::string buf_;
};

} // namespace test
