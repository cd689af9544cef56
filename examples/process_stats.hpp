// process_stats.hpp: what the server examples report about their own process: threads and open
// descriptors (/proc/self/task, /proc/self/fd) and resident memory (VmRSS).
#pragma once

#include <dirent.h>

#include <cstddef>
#include <fstream>
#include <string>

namespace process_stats {

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

} // namespace process_stats
