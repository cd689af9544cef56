// libFuzzer target: cm::address::resolve refuses any host text holding a NUL before it reaches
// getaddrinfo(3), and a numeric host it resolves prints (to_string) as text that resolves back
// to the same address. Only numeric hosts (inet_pton accepts them) are resolved: a name would
// ask DNS.
#include "fuzz.hpp"
#include "rdmacxx/cm/address.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rx = rdmacxx;
namespace cm = rdmacxx::cm;

namespace {
bool numeric(std::string const& host) {
    unsigned char buf[sizeof(in6_addr)];
    return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

bool same(cm::address const& a, cm::address const& b) {
    if (a.family() != b.family() || a.port() != b.port()) return false;
    if (a.family() == AF_INET)
        return std::memcmp(&reinterpret_cast<sockaddr_in const*>(a.native())->sin_addr,
                           &reinterpret_cast<sockaddr_in const*>(b.native())->sin_addr, sizeof(in_addr)) == 0;
    return std::memcmp(&reinterpret_cast<sockaddr_in6 const*>(a.native())->sin6_addr,
                       &reinterpret_cast<sockaddr_in6 const*>(b.native())->sin6_addr, sizeof(in6_addr)) == 0;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    if (size < 2) return 0;
    auto const port = static_cast<std::uint16_t>((data[0] << 8) | data[1]);
    std::string const host{reinterpret_cast<char const*>(data) + 2, size - 2};
    if (host.find('\0') != std::string::npos) {
        try {
            (void)cm::address::resolve(host, port);
            FUZZ_CHECK(!"a host with a NUL was resolved");
        } catch (rx::argument_error const&) {}
        return 0;
    }
    if (!numeric(host)) return 0;
    cm::address const a = cm::address::resolve(host, port);
    FUZZ_CHECK(a.port() == port);
    std::string const text = a.to_string(); // "198.18.0.1:7471" or "[fe80::1]:7471"
    auto const colon = text.rfind(':');
    FUZZ_CHECK(colon != std::string::npos);
    std::string back = text.substr(0, colon);
    if (a.family() == AF_INET6) {
        FUZZ_CHECK(back.size() >= 2 && back.front() == '[' && back.back() == ']');
        back = back.substr(1, back.size() - 2);
    }
    FUZZ_CHECK(text.substr(colon + 1) == std::to_string(port));
    FUZZ_CHECK(same(cm::address::resolve(back, port), a)); // parse(format(x)) == x
    return 0;
}
