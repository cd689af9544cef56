// rdmacxx-perf's command line (see options.hpp). A small parser of its own rather than
// getopt_long: it is reentrant (the unit tests call it many times) and its messages name the
// flag as the user wrote it.

#include "options.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace perf {
namespace {

struct flag {
    char short_name;       // 0: long only
    std::string_view name; // long name, without the dashes
    bool takes_value;
};

constexpr std::array flags{
    flag{'d', "ib-dev", true},         flag{'i', "ib-port", true},
    flag{'x', "gid-index", true},      flag{'s', "size", true},
    flag{'n', "iters", true},          flag{'a', "all", false},
    flag{'D', "duration", true},       flag{'t', "tx-depth", true},
    flag{'r', "rx-depth", true},       flag{'l', "post_list", true},
    flag{'Q', "cq-mod", true},         flag{'I', "inline_size", true},
    flag{'e', "events", false},        flag{'m', "mtu", true},
    flag{'p', "port", true},           flag{0, "report_gbits", false},
    flag{'b', "bidirectional", false}, flag{0, "json", false},
    flag{'h', "help", false},
};

constexpr std::array<std::string_view, 8> tests{"send_lat", "write_lat", "read_lat", "atomic_lat",
                                                "send_bw",  "write_bw",  "read_bw",  "atomic_bw"};

std::string shown(flag const& f) {
    return f.short_name != 0 ? std::string{"-"} + f.short_name : "--" + std::string{f.name};
}

// An unsigned integer in [lo, hi], or usage_error naming the flag.
std::uint64_t number(flag const& f, std::string const& text, std::uint64_t lo, std::uint64_t hi) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
        throw usage_error(shown(f) + ": '" + text + "' is not a non-negative whole number");
    errno = 0;
    unsigned long long const v = std::strtoull(text.c_str(), nullptr, 10);
    if (errno == ERANGE || v < lo || v > hi)
        throw usage_error(shown(f) + ": " + text + " is out of range (" + std::to_string(lo) + " … " +
                          std::to_string(hi) + ")");
    return v;
}

} // namespace

std::vector<std::string_view> test_names() { return {tests.begin(), tests.end()}; }

std::string usage() {
    return "Usage: rdmacxx-perf TEST [options]            server: waits for a client\n"
           "       rdmacxx-perf TEST [options] HOST       client: connects to the server on HOST\n"
           "TEST: send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw atomic_bw\n"
           "Give both sides the same options. Options (perftest's):\n"
           "  -d, --ib-dev=DEV        RDMA device (default: the first one)\n"
           "  -i, --ib-port=PORT      port of the device (default 1)\n"
           "  -x, --gid-index=N       GID index (default: the port's best RoCE v2 GID)\n"
           "  -s, --size=BYTES        message size (default 2 latency, 65536 bandwidth; 8 atomics)\n"
           "  -a, --all               every size 2 … 2^23 (atomics: 8)\n"
           "  -n, --iters=N           iterations (default 1000 latency, 5000 bandwidth)\n"
           "  -D, --duration=S        run S seconds instead of -n iterations\n"
           "  -t, --tx-depth=N        requests outstanding (default 1 latency, 128 bandwidth)\n"
           "  -r, --rx-depth=N        receives kept posted (SEND tests; default 512)\n"
           "  -l, --post_list=N       requests per post: one chain, one doorbell (bandwidth;\n"
           "                          default 16, within -t)\n"
           "  -Q, --cq-mod=N          one request in N signaled (latency: min(-Q, -t) as perftest,\n"
           "                          so every one by default; bandwidth: default 64, within -t)\n"
           "  -I, --inline_size=B     inline messages up to B bytes (default: the device's limit)\n"
           "  -e, --events            sleep on completion events instead of busy-polling\n"
           "  -m, --mtu=BYTES         path MTU: 256 512 1024 2048 4096 (default: the port's)\n"
           "  -p, --port=PORT         TCP port of the out-of-band exchange (default 18515)\n"
           "  -b, --bidirectional     both sides stream (bandwidth tests)\n"
           "      --report_gbits      bandwidth in Gb/s instead of MB/s (MiB/s, as perftest)\n"
           "      --json              one JSON object on stdout instead of the table\n"
           "  -h, --help              this text\n";
}

options parse(std::vector<std::string> const& args) {
    options o;
    std::vector<std::string> positional;
    bool all = false, size_given = false, iters_given = false, tx_given = false, q_given = false, l_given = false;
    std::size_t size = 0;
    auto apply = [&](flag const& f, std::string const& v) {
        switch (f.short_name) {
        case 'd':
            o.device = v;
            break;
        case 'i':
            o.ib_port = static_cast<std::uint8_t>(number(f, v, 1, 255));
            break;
        case 'x':
            o.gid_index = static_cast<int>(number(f, v, 0, 255));
            break;
        case 's':
            size = static_cast<std::size_t>(number(f, v, 1, std::uint64_t{1} << 31));
            size_given = true;
            break;
        case 'n':
            o.iterations = number(f, v, 1, std::uint64_t{1} << 40);
            iters_given = true;
            break;
        case 'a':
            all = true;
            break;
        case 'D': {
            o.duration_s = static_cast<double>(number(f, v, 1, 3600));
            break;
        }
        case 't':
            o.tx_depth = static_cast<std::uint32_t>(number(f, v, 1, 16384));
            tx_given = true;
            break;
        case 'r':
            o.rx_depth = static_cast<std::uint32_t>(number(f, v, 1, 16384));
            break;
        case 'l':
            o.post_list = static_cast<std::uint32_t>(number(f, v, 1, 4096));
            l_given = true;
            break;
        case 'Q':
            o.cq_mod = static_cast<std::uint32_t>(number(f, v, 1, 16384));
            q_given = true;
            break;
        case 'I':
            o.inline_size = static_cast<std::uint32_t>(number(f, v, 0, 65536));
            break;
        case 'e':
            o.events = true;
            break;
        case 'm': {
            auto const m = static_cast<std::uint32_t>(number(f, v, 256, 4096));
            if (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096)
                throw usage_error("-m: " + v + " is not a path MTU (256, 512, 1024, 2048 or 4096)");
            o.mtu = m;
            break;
        }
        case 'p':
            (void)number(f, v, 1, 65535);
            o.port = v;
            break;
        case 'b':
            o.bidirectional = true;
            break;
        case 'h':
            o.help = true;
            break;
        default:
            if (f.name == "report_gbits") o.report_gbits = true;
            if (f.name == "json") o.json = true;
        }
    };
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string const& a = args[i];
        if (a.size() < 2 || a[0] != '-') {
            positional.push_back(a);
            continue;
        }
        flag const* f = nullptr;
        std::optional<std::string> value;
        if (a[1] == '-') {
            std::string_view name{a};
            name.remove_prefix(2);
            if (auto eq = name.find('='); eq != std::string_view::npos) {
                value = std::string{name.substr(eq + 1)};
                name = name.substr(0, eq);
            }
            auto it = std::find_if(flags.begin(), flags.end(), [&](flag const& g) { return g.name == name; });
            if (it == flags.end()) throw usage_error("unknown option " + a + " (see --help)");
            f = &*it;
            if (!f->takes_value && value) throw usage_error(shown(*f) + " takes no value");
        } else {
            auto it = std::find_if(flags.begin(), flags.end(), [&](flag const& g) { return g.short_name == a[1]; });
            if (it == flags.end()) throw usage_error("unknown option " + a + " (see --help)");
            f = &*it;
            if (a.size() > 2) {
                if (!f->takes_value) throw usage_error("unknown option " + a + " (see --help)");
                value = a.substr(2);
            }
        }
        if (f->takes_value && !value) {
            if (i + 1 >= args.size()) throw usage_error(shown(*f) + " needs a value");
            value = args[++i];
        }
        apply(*f, value.value_or(""));
    }
    if (o.help) return o;
    if (positional.empty()) throw usage_error("no test given: one of send_lat … atomic_bw (see --help)");
    o.test = positional[0];
    auto const t = std::find(tests.begin(), tests.end(), o.test);
    if (t == tests.end()) throw usage_error("unknown test '" + o.test + "': one of send_lat … atomic_bw");
    auto const index = static_cast<std::size_t>(t - tests.begin());
    o.op = static_cast<verb>(index % 4);
    o.what = index < 4 ? kind::latency : kind::bandwidth;
    if (positional.size() > 2) throw usage_error("more than one server host given: '" + positional[2] + "'");
    if (positional.size() == 2) o.server = positional[1];

    bool const lat = o.what == kind::latency;
    if (!iters_given) o.iterations = lat ? 1000 : 5000;
    if (iters_given && o.duration_s > 0) throw usage_error("-n and -D exclude each other");
    if (o.bidirectional && lat) throw usage_error("-b applies to the bandwidth tests only");
    if (lat && o.post_list != 1) throw usage_error("-l applies to the bandwidth tests only");
    if (!tx_given) o.tx_depth = lat ? 1 : 128;
    if (lat) {
        // perftest's rule: one in min(-Q, -t) signaled, every request with the default -t 1.
        o.cq_mod = std::min(q_given ? o.cq_mod : 100U, o.tx_depth);
    } else {
        // rdmacxx's own choices where the user said nothing: chains of 16, one in 64 signaled,
        // within what the tx depth allows.
        if (q_given && o.cq_mod > o.tx_depth)
            throw usage_error("-Q " + std::to_string(o.cq_mod) + " is over the tx depth -t " +
                              std::to_string(o.tx_depth) + ": no request would ever be signaled in time");
        if (l_given && o.post_list > o.tx_depth)
            throw usage_error("-l " + std::to_string(o.post_list) + " is over the tx depth -t " +
                              std::to_string(o.tx_depth));
        if (!q_given) o.cq_mod = std::max(1U, std::min(64U, o.tx_depth - (l_given ? o.post_list - 1 : 0)));
        if (!l_given) o.post_list = std::max(1U, std::min(16U, o.tx_depth - o.cq_mod + 1));
        if (o.cq_mod + o.post_list - 1 > o.tx_depth)
            throw usage_error("-Q " + std::to_string(o.cq_mod) + " with -l " + std::to_string(o.post_list) +
                              " needs a tx depth -t of at least " + std::to_string(o.cq_mod + o.post_list - 1) +
                              " (-Q + -l - 1), not " + std::to_string(o.tx_depth));
    }
    if (o.op == verb::atomic) {
        if (size_given && size != 8) throw usage_error("-s: atomics move 8 bytes, not " + std::to_string(size));
        o.sizes = {8};
    } else if (all) {
        if (size_given) throw usage_error("-a and -s exclude each other");
        for (std::size_t s = 2; s <= (std::size_t{1} << 23); s *= 2)
            o.sizes.push_back(s);
    } else {
        o.sizes = {size_given ? size : (lat ? 2 : 65536)};
    }
    return o;
}

} // namespace perf
