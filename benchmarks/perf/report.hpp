#pragma once
// rdmacxx-perf's figures and how they are printed: perftest's columns as text, or one JSON
// object (--json). One concern: turning samples into the reported statistics.

#include "options.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace perf {

/// One latency row: perftest's columns, in microseconds.
struct latency_row {
    std::size_t bytes = 0;
    std::uint64_t iterations = 0;
    double t_min = 0, t_max = 0, t_typical = 0, t_avg = 0, t_stdev = 0, p99 = 0, p999 = 0;
};

/// The row for `samples_us` (one per iteration; sorted in place), by perftest's print_report_lat:
/// the two largest samples are left out; t_typical is the median of the rest, t_avg and t_stdev
/// are theirs, t_max is the largest sample after them (the first one left out) and the 99% and
/// 99.9% columns are the samples at index ceil(p * kept) of all sorted samples.
[[nodiscard]] latency_row latency_stats(std::size_t bytes, std::vector<double>& samples_us);

/// One bandwidth row: bytes per second (peak and average) and messages per second.
struct bandwidth_row {
    std::size_t bytes = 0;
    std::uint64_t iterations = 0; ///< messages moved (both directions with -b)
    double peak_bps = 0, avg_bps = 0, msg_rate = 0;
};

/// The run's description and its rows; prints them as perftest does, or as JSON.
class report {
public:
    /// `device`, `gid`, `inline_size` and `mtu` describe what the run really used.
    report(options const& opt, std::string device, std::string gid, std::uint32_t inline_size, std::uint32_t mtu);

    /// Prints the header (text only).
    void begin() const;
    /// Adds (and, as text, prints) a row.
    void add(latency_row const& row);
    /// Adds (and, as text, prints) a row.
    void add(bandwidth_row const& row);
    /// Prints the footer, or the whole JSON object.
    void end() const;

private:
    options const& opt_;
    std::string device_, gid_;
    std::uint32_t inline_size_, mtu_;
    std::vector<latency_row> lat_;
    std::vector<bandwidth_row> bw_;
};

} // namespace perf
