// libFuzzer target: MADs from the wire. Any bytes up to 256 make a packet (more are refused);
// every layout decodes from any bytes and encodes back to exactly the same bytes (its fields tile
// it); print_packet and the error a reply's Status makes never fail on what was received.
#include "fuzz.hpp"
#include "rdmacxx/mad/error.hpp"
#include "rdmacxx/mad/packet.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>

namespace mad = rdmacxx::mad;

namespace {
template <class A>
void round_trip(std::span<std::byte const> in) {
    if (in.size() < A::size) {
        try {
            (void)mad::decode<A>(in);
            FUZZ_CHECK(false);
        } catch (rdmacxx::argument_error const&) {}
        return;
    }
    A const a = mad::decode<A>(in);
    auto const out = mad::encode(a);
    FUZZ_CHECK(std::equal(out.begin(), out.end(), in.begin())); // encode(decode(x)) == x
    FUZZ_CHECK(mad::decode<A>(out) == a);
    std::ostringstream os;
    mad::print(os, a);
    FUZZ_CHECK(!os.str().empty());
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::span<std::byte const> const in{reinterpret_cast<std::byte const*>(data), size};
    round_trip<mad::mad_header>(in);
    round_trip<mad::rmpp_header>(in);
    round_trip<mad::sa_header>(in);
    round_trip<mad::class_port_info>(in);
    round_trip<mad::path_record>(in);
    round_trip<mad::port_counters>(in);
    if (size > mad::mad_size) {
        try {
            mad::packet const p{in};
            FUZZ_CHECK(false);
        } catch (rdmacxx::argument_error const&) {}
        return 0;
    }
    mad::packet const p{in};
    FUZZ_CHECK(std::memcmp(p.bytes().data(), data, size) == 0);
    std::ostringstream os;
    mad::print_packet(os, p, "", size);
    FUZZ_CHECK(os.str().find("MADHeader") == 0);
    mad::mad_header const h = p.header();
    if (h.status != 0) {
        try {
            mad::detail::throw_status("RPC", p, p);
        } catch (mad::mad_class_error const& e) {
            FUZZ_CHECK((h.status & 0xffU) == 0 && e.class_status() == (h.status >> 8));
        } catch (mad::mad_error const& e) {
            FUZZ_CHECK((h.status & 0xffU) != 0 || (h.status >> 8) == 0);
            FUZZ_CHECK(e.status() == h.status);
        }
    }
    return 0;
}
