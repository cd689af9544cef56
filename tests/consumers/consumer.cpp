// The program every consumer test builds, each pulling rdmacxx in its own way: it lists the RDMA
// devices and moves one message over an RC loopback connection on the test device, checking it.
//
// Usage: consumer ROUTE     (ROUTE names the way rdmacxx was pulled in; it is printed back)
#include <rdmacxx/rdmacxx.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

namespace rx = rdmacxx;

int main(int argc, char** argv) {
    char const* const route = argc > 1 ? argv[1] : "unknown";
    try {
        rx::device_list const devices;
        std::printf("consumer (%s): rdmacxx %s, %s\n", route, RDMACXX_VERSION_STRING, devices.describe().c_str());
        if (devices.empty()) return 1;
        char const* const name = std::getenv("RDMACXX_DEVICE");
        rx::context ctx = name != nullptr ? devices.find(name).open() : devices[0].open();
        rx::end_port const port(ctx);
        rx::protection_domain pd(ctx);
        std::string const text = std::string{"hello through "} + route;
        std::vector<char> src(text.begin(), text.end()), dst(text.size(), '\0');
        auto src_mr = pd.register_memory(std::span{src}, rx::access::local_write);
        auto dst_mr = pd.register_memory(std::span{dst}, rx::access::local_write);
        rx::completion_queue<rx::busy_poll> cq(ctx, 8);
        rx::queue_pair<rx::rc, rx::busy_poll> a(pd, cq, cq), b(pd, cq, cq);
        a.connect(port, b.local_endpoint(port));
        b.connect(port, a.local_endpoint(port));
        b.post_recv(rx::recv{dst_mr.span<char>()}.id(2));
        a.post(rx::send{src_mr.span<char>()}.id(1));
        for (int seen = 0; seen < 2; ++seen)
            cq.wait_one().throw_if_error();
        bool const same = std::memcmp(src.data(), dst.data(), src.size()) == 0;
        std::printf("consumer (%s): moved %zu bytes over RC on %s: %s\n", route, dst.size(), port.to_string().c_str(),
                    same ? "intact" : "CORRUPTED");
        return same ? 0 : 1;
    } catch (rx::error const& e) {
        e.dump_detailed(std::cerr, "E:", 2);
    } catch (std::exception const& e) {
        std::cerr << "E: " << e.what() << '\n';
    }
    return 1;
}
