// libFuzzer target: guid::parse and try_parse agree, refuse any text holding a NUL, and every
// GUID formats to text that parses back to it (both text forms); any 8 bytes round-trip too.
#include "fuzz.hpp"
#include "rdmacxx/gid.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rx = rdmacxx;

namespace {
void round_trip(rx::guid g) {
    FUZZ_CHECK(rx::guid::parse(g.to_string()) == g); // xxxx:xxxx:xxxx:xxxx
    static constexpr char digits[] = "0123456789abcdef";
    std::string hex = "0x";
    for (int shift = 60; shift >= 0; shift -= 4)
        hex += digits[(g.value() >> shift) & 0xf];
    FUZZ_CHECK(rx::guid::parse(hex) == g); // 0x and 16 digits
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::string_view const text{reinterpret_cast<char const*>(data), size};
    rx::guid got;
    bool const ok = rx::guid::try_parse(text, got);
    try {
        rx::guid const parsed = rx::guid::parse(text);
        FUZZ_CHECK(ok && parsed == got);
    } catch (rx::argument_error const&) {
        FUZZ_CHECK(!ok);
    }
    if (ok) {
        FUZZ_CHECK(text.find('\0') == std::string_view::npos);
        round_trip(got);
    }
    if (size >= 8) {
        std::uint64_t v = 0;
        std::memcpy(&v, data, 8);
        round_trip(rx::guid{v});
    }
    return 0;
}
