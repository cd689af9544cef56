// The verbs-only consumer: a program that includes rdmacxx/verbs.hpp and nothing else of rdmacxx,
// built with -libverbs alone (tools/consumers, route verbs_only, which also checks that the
// binary does not load librdmacm). It opens the test device, makes a PD, a CQ, two memory
// regions and an RC loopback pair, and moves one message, checking it.
//
// Usage: verbs_consumer ROUTE     (ROUTE names the way rdmacxx was pulled in; it is printed back)
#include <rdmacxx/verbs.hpp>

// Nothing of librdmacm came in with the verbs umbrella (<rdma/rdma_cma.h>'s include guard).
#if defined(RDMA_CMA_H)
#error "rdmacxx/verbs.hpp includes <rdma/rdma_cma.h>"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <vector>

namespace rx = rdmacxx;

int main(int argc, char** argv) {
    char const* const route = argc > 1 ? argv[1] : "unknown";
    try {
        rx::device_list const devices;
        std::printf("verbs consumer (%s): rdmacxx %s, %s\n", route, RDMACXX_VERSION_STRING, devices.describe().c_str());
        if (devices.empty()) return 1;
        char const* const name = std::getenv("RDMACXX_DEVICE");
        rx::context ctx = name != nullptr ? devices.find(name).open() : devices[0].open();
        rx::end_port const port(ctx);
        rx::protection_domain pd(ctx);
        std::string const text = std::string{"hello, verbs alone, through "} + route;
        std::vector<char> src(text.begin(), text.end()), dst(text.size(), '\0');
        rx::memory_region src_mr = pd.register_memory(std::span{src}, rx::access::local_write);
        rx::memory_region dst_mr = pd.register_memory(std::span{dst}, rx::access::local_write);
        rx::completion_queue<rx::busy_poll> cq(ctx, 8);
        rx::queue_pair<rx::rc, rx::busy_poll> a(pd, cq, cq), b(pd, cq, cq);
        a.connect(port, b.local_endpoint(port));
        b.connect(port, a.local_endpoint(port));
        b.post_recv(rx::recv{dst_mr.span<char>()}.id(2));
        a.post(rx::send{src_mr.span<char>()}.id(1));
        for (int seen = 0; seen < 2; ++seen)
            cq.wait_one().throw_if_error();
        bool const same = std::memcmp(src.data(), dst.data(), src.size()) == 0;
        std::printf("verbs consumer (%s): moved %zu bytes over RC on %s: %s\n", route, dst.size(),
                    port.to_string().c_str(), same ? "intact" : "CORRUPTED");
        return same ? 0 : 1;
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 2);
    } catch (std::exception const& e) {
        std::cerr << "E: " << e.what() << '\n';
    }
    return 1;
}
