// libFuzzer target: the multi-rail connection's wire formats from the wire (a peer's address, a
// remote region, a message header and what follows it): every decode either refuses with
// argument_error or gives a value whose encoding decodes to the same value; a header's payload
// never reaches past what arrived; the receive window accepts only numbers in its window.
#include "fuzz.hpp"
#include "rdmacxx/multirail/window.hpp"
#include "rdmacxx/multirail/wire.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace rx = rdmacxx;
namespace mr = rdmacxx::multirail;

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::span<std::byte const> const in{reinterpret_cast<std::byte const*>(data), size};
    try {
        mr::rail_address const a = mr::rail_address::from_bytes(in);
        FUZZ_CHECK(!a.rails.empty() && a.rails.size() <= mr::max_rails);
        mr::rail_address const b = mr::rail_address::from_bytes(a.to_bytes());
        FUZZ_CHECK(b.nonce == a.nonce && b.window == a.window && b.message_bytes == a.message_bytes &&
                   b.epoch == a.epoch && b.rails == a.rails);
    } catch (rx::argument_error const&) {}
    try {
        mr::remote_region const r = mr::remote_region::from_bytes(in);
        mr::remote_region const s = mr::remote_region::from_bytes(r.to_bytes());
        FUZZ_CHECK(s.address == r.address && s.length == r.length && s.rkeys == r.rkeys);
    } catch (rx::argument_error const&) {}
    try {
        mr::message_header const h = mr::message_header::read(in);
        FUZZ_CHECK(h.length <= size - mr::message_header::wire_size);
        mr::detail::receive_window w{8, 64};
        if (h.kind != mr::message_kind::ack && h.length <= 64) {
            auto const got = w.take(h, in.subspan(mr::message_header::wire_size, h.length));
            FUZZ_CHECK((got == mr::detail::receive_window::arrival::accepted) == (h.seq >= 1 && h.seq <= 8));
        }
    } catch (rx::argument_error const&) {}
    return 0;
}
