#pragma once
// rdmacxx-perf's command line: perftest's flags, parsed and checked before anything touches a
// device. One concern: turning argv into `perf::options`, or a `perf::usage_error` that says
// which flag was wrong and why.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace perf {

/// The operation a test measures.
enum class verb { send, write, read, atomic };

/// What a run measures: the round trip (latency) or a stream (bandwidth and message rate).
enum class kind { latency, bandwidth };

/// A command line that cannot run: the message names the flag, the value and what is allowed.
struct usage_error : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

/// Everything the command line says, with perftest's defaults filled in where the user said
/// nothing and rdmacxx's own choices where perftest leaves the choice to the device.
struct options {
    verb op = verb::send;
    kind what = kind::latency;
    std::string test;                         ///< "send_lat" …
    std::string device;                       ///< -d: empty = the first device
    std::uint8_t ib_port = 1;                 ///< -i
    int gid_index = -1;                       ///< -x: -1 = the best RoCE v2 GID
    std::vector<std::size_t> sizes;           ///< -s, or every power of two of -a
    std::uint64_t iterations = 0;             ///< -n (perftest: 1000 latency, 5000 bandwidth)
    double duration_s = 0;                    ///< -D: seconds instead of -n (0 = use -n)
    std::uint32_t tx_depth = 0;               ///< -t (perftest: 1 latency, 128 bandwidth)
    std::uint32_t rx_depth = 512;             ///< -r: receives kept posted (SEND tests)
    std::uint32_t post_list = 1;              ///< -l: requests per ibv_post_send, one doorbell
    std::uint32_t cq_mod = 0;                 ///< -Q: one request in cq_mod signaled (0 = rdmacxx's choice)
    std::optional<std::uint32_t> inline_size; ///< -I: empty = as much as the device allows
    bool events = false;                      ///< -e: sleep on completion events
    std::uint32_t mtu = 0;                    ///< -m: path MTU in bytes (0 = the port's)
    std::string port = "18515";               ///< -p: the TCP port of the out-of-band exchange
    bool report_gbits = false;                ///< --report_gbits: Gb/s instead of MB/s
    bool bidirectional = false;               ///< -b: both sides stream (bandwidth tests)
    bool json = false;                        ///< --json: one JSON object instead of the table
    std::optional<std::string> server;        ///< the server's host: given = client
    bool help = false;                        ///< -h
};

/// Parses `args` (argv without the program name): `TEST [flags] [server host]`.
/// @throws usage_error for an unknown test or flag, a value that is not a number or out of
///         range, a flag that does not apply to the test, or more than one host.
[[nodiscard]] options parse(std::vector<std::string> const& args);

/// The help text.
[[nodiscard]] std::string usage();

/// The test names, in perftest's order.
[[nodiscard]] std::vector<std::string_view> test_names();

} // namespace perf
