// rdmacxx-perf's statistics and output (see report.hpp).

#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string_view>

namespace perf {
namespace {

constexpr char const* rule =
    "---------------------------------------------------------------------------------------\n";

// perftest's print_report_lat leaves out the largest samples (LAT_MEASURE_TAIL) before it
// takes the median, average, stdev and percentiles; the first sample of a run, which pays for
// cold caches and (under emulation) for translating the loop, is one of them.
constexpr std::size_t measure_tail = 2;

// perftest's percentile: the sample at index ceil(p * kept) of all sorted samples.
double at_fraction(std::vector<double> const& sorted, std::size_t kept, double p) {
    auto const i = static_cast<std::size_t>(std::ceil(p * static_cast<double>(kept)));
    return sorted[std::min(sorted.size() - 1, i)];
}

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out += c;
    }
    return out + "\"";
}

std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

} // namespace

latency_row latency_stats(std::size_t bytes, std::vector<double>& samples_us) {
    latency_row r;
    r.bytes = bytes;
    r.iterations = samples_us.size();
    if (samples_us.empty()) return r;
    std::sort(samples_us.begin(), samples_us.end());
    std::size_t const kept = samples_us.size() > measure_tail ? samples_us.size() - measure_tail : samples_us.size();
    auto const first = samples_us.begin();
    auto const last = first + static_cast<std::ptrdiff_t>(kept);
    double const n = static_cast<double>(kept);
    r.t_min = samples_us.front();
    r.t_max = samples_us[std::min(kept, samples_us.size() - 1)]; // perftest's: the first left out
    r.t_typical = kept % 2 == 0 ? (samples_us[kept / 2] + samples_us[kept / 2 - 1]) / 2 : samples_us[kept / 2];
    r.t_avg = std::accumulate(first, last, 0.0) / n;
    double sq = 0;
    for (auto it = first; it != last; ++it)
        sq += (*it - r.t_avg) * (*it - r.t_avg);
    r.t_stdev = std::sqrt(sq / n);
    r.p99 = at_fraction(samples_us, kept, 0.99);
    r.p999 = at_fraction(samples_us, kept, 0.999);
    return r;
}

report::report(options const& opt, std::string device, std::string gid, std::uint32_t inline_size, std::uint32_t mtu)
    : opt_(opt), device_(std::move(device)), gid_(std::move(gid)), inline_size_(inline_size), mtu_(mtu) {}

void report::begin() const {
    if (opt_.json) return;
    bool const lat = opt_.what == kind::latency;
    std::printf("%s", rule);
    std::printf("                    rdmacxx-perf %s (%s)\n", opt_.test.c_str(), opt_.server ? "client" : "server");
    std::printf(" Device          : %s, GID %s\n", device_.c_str(), gid_.c_str());
    std::printf(" Transport       : RC, path MTU %u, %s\n", mtu_, opt_.events ? "completion events" : "busy-poll");
    std::printf(" TX depth        : %u, post list %u, one in %u signaled%s\n", opt_.tx_depth, opt_.post_list,
                opt_.cq_mod, opt_.bidirectional ? ", bidirectional" : "");
    std::printf(" Inline data     : up to %u bytes\n", inline_size_);
    if (opt_.duration_s > 0) std::printf(" Duration        : %.0f s\n", opt_.duration_s);
    std::printf("%s", rule);
    if (!opt_.server) return; // the server has no figures to print: the client measures
    if (lat)
        std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
                    "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
    else if (opt_.report_gbits)
        std::printf(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
    else
        std::printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
}

void report::add(latency_row const& r) {
    lat_.push_back(r);
    if (opt_.json || !opt_.server) return;
    std::printf(" %-7zu %-10llu %-7.2f        %-7.2f      %-7.2f          %-7.2f        %-7.2f          %-7.2f "
                "               %-7.2f\n",
                r.bytes, static_cast<unsigned long long>(r.iterations), r.t_min, r.t_max, r.t_typical, r.t_avg,
                r.t_stdev, r.p99, r.p999);
    std::fflush(stdout);
}

void report::add(bandwidth_row const& r) {
    bw_.push_back(r);
    if (opt_.json || !opt_.server) return;
    auto const unit = [&](double bps) { return opt_.report_gbits ? bps * 8 / 1e9 : bps / 1048576.0; };
    std::printf(" %-10zu %-10llu       %-10.2f         %-10.2f           %-10.6f\n", r.bytes,
                static_cast<unsigned long long>(r.iterations), unit(r.peak_bps), unit(r.avg_bps), r.msg_rate / 1e6);
    std::fflush(stdout);
}

void report::end() const {
    if (!opt_.json) {
        std::printf("%s", rule);
        return;
    }
    std::string s =
        "{\"tool\":\"rdmacxx-perf\",\"test\":" + json_string(opt_.test) +
        ",\"role\":" + json_string(opt_.server ? "client" : "server") + ",\"device\":" + json_string(device_) +
        ",\"gid\":" + json_string(gid_) + ",\"config\":{\"tx_depth\":" + std::to_string(opt_.tx_depth) +
        ",\"post_list\":" + std::to_string(opt_.post_list) + ",\"cq_mod\":" + std::to_string(opt_.cq_mod) +
        ",\"inline_size\":" + std::to_string(inline_size_) + ",\"mtu\":" + std::to_string(mtu_) +
        ",\"events\":" + (opt_.events ? "true" : "false") +
        ",\"bidirectional\":" + (opt_.bidirectional ? "true" : "false") + ",\"duration_s\":" + num(opt_.duration_s) +
        ",\"iterations\":" + std::to_string(opt_.iterations) +
        "},\"unit\":" + json_string(opt_.what == kind::latency ? "usec" : "bytes/sec, messages/sec") + ",\"results\":[";
    bool first = true;
    for (latency_row const& r : lat_) {
        s += std::string{first ? "" : ","} + "{\"bytes\":" + std::to_string(r.bytes) +
             ",\"iterations\":" + std::to_string(r.iterations) + ",\"t_min\":" + num(r.t_min) +
             ",\"t_max\":" + num(r.t_max) + ",\"t_typical\":" + num(r.t_typical) + ",\"t_avg\":" + num(r.t_avg) +
             ",\"t_stdev\":" + num(r.t_stdev) + ",\"p99\":" + num(r.p99) + ",\"p99_9\":" + num(r.p999) + "}";
        first = false;
    }
    for (bandwidth_row const& r : bw_) {
        s += std::string{first ? "" : ","} + "{\"bytes\":" + std::to_string(r.bytes) +
             ",\"iterations\":" + std::to_string(r.iterations) + ",\"bw_peak\":" + num(r.peak_bps) +
             ",\"bw_average\":" + num(r.avg_bps) + ",\"msg_rate\":" + num(r.msg_rate) + "}";
        first = false;
    }
    s += "]}";
    std::printf("%s\n", s.c_str());
}

} // namespace perf
