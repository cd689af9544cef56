// rdmacxx-perf: perftest's latency and bandwidth tests written with rdmacxx.
//
//   rdmacxx-perf TEST [options]        the server: waits for one client
//   rdmacxx-perf TEST [options] HOST   the client: connects to HOST, measures, prints
//
// TEST is send_lat, write_lat, read_lat, atomic_lat, send_bw, write_bw, read_bw or atomic_bw;
// the options are perftest's (-d -i -x -s -a -n -D -t -r -l -Q -I -e -m -p -b --report_gbits)
// plus --json. Both sides take the same options; they exchange QPN, PSN, GID, the buffer's
// address and rkey over TCP (-p) and check that they agree. Where perftest leaves a choice to the
// device, rdmacxx-perf makes rdmacxx's: inline up to the device's limit unless -I says otherwise.
//
// Exit status: 0 done; 1 the run failed (the error is printed); 2 a usage error.

#include "options.hpp"
#include "report.hpp"
#include "session.hpp"

#include <cstdio>
#include <iostream>

namespace {

template <class Completion>
int run(perf::options const& opt) {
    perf::session<Completion> s(opt);
    perf::report rep(opt, s.device_name, s.gid_text(), s.inline_size, s.mtu_bytes());
    rep.begin();
    if (opt.what == perf::kind::latency)
        perf::run_latency(s, rep);
    else
        perf::run_bandwidth(s, rep);
    rep.end();
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    perf::options opt;
    try {
        opt = perf::parse(std::vector<std::string>(argv + 1, argv + argc));
    } catch (perf::usage_error const& e) {
        std::fprintf(stderr, "rdmacxx-perf: %s\n", e.what());
        return 2;
    }
    if (opt.help) {
        std::printf("%s", perf::usage().c_str());
        return 0;
    }
    try {
        return opt.events ? run<rdmacxx::event_driven>(opt) : run<rdmacxx::busy_poll>(opt);
    } catch (rdmacxx::error const& e) {
        e.dump_detailed(std::cerr, "rdmacxx-perf: ", 1);
    } catch (std::exception const& e) {
        std::fprintf(stderr, "rdmacxx-perf: %s\n", e.what());
    }
    return 1;
}
