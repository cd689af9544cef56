// rdmacxx-perf's command line (benchmarks/perf/options.hpp): perftest's flags and defaults, and
// a clear usage_error for every value that cannot run.
#include "../../benchmarks/perf/options.hpp"
#include "../../benchmarks/perf/report.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {
perf::options parse(std::vector<std::string> args) { return perf::parse(args); }
std::string refusal(std::vector<std::string> args) {
    try {
        (void)perf::parse(args);
    } catch (perf::usage_error const& e) {
        return e.what();
    }
    return "accepted";
}
} // namespace

TEST_CASE("rdmacxx-perf: the test, the role and perftest's defaults") {
    auto const lat = parse({"send_lat"});
    CHECK(lat.op == perf::verb::send);
    CHECK(lat.what == perf::kind::latency);
    CHECK_FALSE(lat.server.has_value());
    CHECK(lat.sizes == std::vector<std::size_t>{2});
    CHECK(lat.iterations == 1000);
    CHECK(lat.tx_depth == 1);
    CHECK(lat.cq_mod == 1); // perftest: min(-Q, -t)
    CHECK(lat.port == "18515");

    auto const bw = parse({"write_bw", "-d", "rxe0", "198.18.0.1"});
    CHECK(bw.op == perf::verb::write);
    CHECK(bw.what == perf::kind::bandwidth);
    CHECK(bw.server == "198.18.0.1");
    CHECK(bw.device == "rxe0");
    CHECK(bw.sizes == std::vector<std::size_t>{65536});
    CHECK(bw.iterations == 5000);
    CHECK(bw.tx_depth == 128);
    CHECK(bw.cq_mod == 64);    // rdmacxx's own choice
    CHECK(bw.post_list == 16); // rdmacxx's own choice
    CHECK_FALSE(bw.inline_size.has_value());

    auto const atomic = parse({"atomic_lat"});
    CHECK(atomic.op == perf::verb::atomic);
    CHECK(atomic.sizes == std::vector<std::size_t>{8});
}

TEST_CASE("rdmacxx-perf: every flag, short and long, joined and separate") {
    auto const o =
        parse({"send_bw", "-s",  "8",    "-n2000", "--tx-depth=64", "-l", "16", "-Q", "16", "-I", "0",
               "-e",      "-m",  "1024", "-p",     "19000",         "-x", "1",  "-i", "1",  "-b", "--report_gbits",
               "--json",  "host"});
    CHECK(o.sizes == std::vector<std::size_t>{8});
    CHECK(o.iterations == 2000);
    CHECK(o.tx_depth == 64);
    CHECK(o.post_list == 16);
    CHECK(o.cq_mod == 16);
    CHECK(o.inline_size == 0U);
    CHECK(o.events);
    CHECK(o.mtu == 1024);
    CHECK(o.port == "19000");
    CHECK(o.gid_index == 1);
    CHECK(o.bidirectional);
    CHECK(o.report_gbits);
    CHECK(o.json);
    CHECK(o.server == "host");

    auto const all = parse({"write_lat", "-a"});
    REQUIRE(all.sizes.size() == 23);
    CHECK(all.sizes.front() == 2);
    CHECK(all.sizes.back() == std::size_t{1} << 23);

    auto const timed = parse({"read_bw", "-D", "5"});
    CHECK(timed.duration_s == 5);

    CHECK(parse({"send_lat", "-t", "16", "-Q", "8"}).cq_mod == 8);
    CHECK(parse({"send_lat", "-Q", "8"}).cq_mod == 1); // clamped to -t 1, as perftest does
    CHECK(parse({"send_bw", "-t", "16"}).cq_mod + parse({"send_bw", "-t", "16"}).post_list - 1 <= 16);
    CHECK(parse({"-h"}).help);
}

TEST_CASE("rdmacxx-perf: values that cannot run are refused with the flag's name") {
    CHECK(refusal({}) == "no test given: one of send_lat … atomic_bw (see --help)");
    CHECK(refusal({"ping_lat"}) == "unknown test 'ping_lat': one of send_lat … atomic_bw");
    CHECK(refusal({"send_lat", "-s", "abc"}) == "-s: 'abc' is not a non-negative whole number");
    CHECK(refusal({"send_lat", "-s", "0"}).find("-s: 0 is out of range") == 0);
    CHECK(refusal({"send_lat", "-n", "-5"}).find("-n: '-5' is not") == 0);
    CHECK(refusal({"send_lat", "-m", "1000"}) == "-m: 1000 is not a path MTU (256, 512, 1024, 2048 or 4096)");
    CHECK(refusal({"send_lat", "-p", "70000"}).find("-p: 70000 is out of range") == 0);
    CHECK(refusal({"send_lat", "-z"}) == "unknown option -z (see --help)");
    CHECK(refusal({"send_lat", "--sizes=4"}) == "unknown option --sizes=4 (see --help)");
    CHECK(refusal({"send_lat", "-s"}) == "-s needs a value");
    CHECK(refusal({"send_lat", "--events=1"}) == "-e takes no value");
    CHECK(refusal({"send_lat", "-b"}) == "-b applies to the bandwidth tests only");
    CHECK(refusal({"send_lat", "-l", "4"}) == "-l applies to the bandwidth tests only");
    CHECK(refusal({"send_lat", "-n", "10", "-D", "2"}) == "-n and -D exclude each other");
    CHECK(refusal({"send_lat", "-a", "-s", "8"}) == "-a and -s exclude each other");
    CHECK(refusal({"atomic_bw", "-s", "64"}) == "-s: atomics move 8 bytes, not 64");
    CHECK(refusal({"send_bw", "-t", "8", "-Q", "16"}).find("-Q 16 is over the tx depth -t 8") == 0);
    CHECK(refusal({"send_bw", "-t", "16", "-Q", "16", "-l", "8"}).find("-Q 16 with -l 8 needs a tx depth") == 0);
    CHECK(refusal({"send_bw", "a", "b"}) == "more than one server host given: 'b'");
}

TEST_CASE("rdmacxx-perf: latency columns as perftest's print_report_lat (the two largest samples left out)") {
    // 10 samples, the first of the run (cold) the largest: 1000, then 1 ... 9 in a shuffled order.
    std::vector<double> samples{1000, 5, 3, 9, 1, 7, 2, 8, 4, 6};
    auto const r = perf::latency_stats(8, samples);
    CHECK(r.iterations == 10);
    CHECK(r.t_min == doctest::Approx(1));
    CHECK(r.t_max == doctest::Approx(9));       // the largest left out first: 1000 and 9 go, t_max is the 9
    CHECK(r.t_typical == doctest::Approx(4.5)); // 8 kept (1 ... 8): an even count, the two middle ones averaged
    CHECK(r.t_avg == doctest::Approx(4.5));
    CHECK(r.t_stdev == doctest::Approx(2.29129).epsilon(1e-4)); // population stdev of 1 ... 8
    CHECK(r.p99 == doctest::Approx(9));                         // index ceil(0.99 * 8) = 8 of all 10 sorted
    std::vector<double> odd{3, 1, 2, 100, 50};                  // 3 kept: 1, 2, 3
    auto const o = perf::latency_stats(8, odd);
    CHECK(o.t_typical == doctest::Approx(2));
    CHECK(o.t_max == doctest::Approx(50));
}
