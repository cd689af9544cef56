// server_modes.hpp: what the server examples (cm_shared_server, asio_echo_server) share for
// their server and client modes across nodes: the options of those modes, and what a server
// reports about its own process (threads and open descriptors from /proc/self/task and
// /proc/self/fd, resident memory from VmRSS).
#pragma once

#include <dirent.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace server_modes {

// -m server|client, -w clients, -i first-id, -t seconds, -a ACK timeout (ms).
struct options {
    std::string mode;
    std::uint32_t expected = 0, first_id = 0;
    std::chrono::seconds limit{600};
    std::chrono::milliseconds ack_timeout{0}; // 0: the default
};
// The getopt letters of those options.
inline constexpr char letters[] = "m:w:i:t:a:";
// Takes getopt's option `c` with argument `arg` when it is one of them; false otherwise.
inline bool take(int c, char const* arg, options& o) {
    switch (c) {
    case 'm':
        o.mode = arg;
        return true;
    case 'w':
        o.expected = static_cast<std::uint32_t>(std::stoul(arg));
        return true;
    case 'i':
        o.first_id = static_cast<std::uint32_t>(std::stoul(arg));
        return true;
    case 't':
        o.limit = std::chrono::seconds{std::stol(arg)};
        return true;
    case 'a':
        o.ack_timeout = std::chrono::milliseconds{std::stol(arg)};
        return true;
    default:
        return false;
    }
}

// Entries of a /proc directory, dot entries left out (the count of /proc/self/fd includes the
// descriptor that reads it).
inline std::size_t entries(char const* dir) {
    std::size_t n = 0;
    if (DIR* d = ::opendir(dir)) {
        while (dirent const* e = ::readdir(d))
            n += e->d_name[0] != '.' ? 1 : 0;
        ::closedir(d);
    }
    return n;
}
inline std::size_t threads() { return entries("/proc/self/task"); }
inline std::size_t descriptors() { return entries("/proc/self/fd"); }

// Resident memory of this process in KiB (VmRSS), -1 when /proc does not say.
inline long rss_kib() {
    std::ifstream in{"/proc/self/status"};
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

} // namespace server_modes
