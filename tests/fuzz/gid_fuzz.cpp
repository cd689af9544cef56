// libFuzzer target: gid::parse and try_parse agree, refuse any text holding a NUL, and every GID
// they accept formats to canonical text that parses back to it; any 16 bytes round-trip too.
#include "fuzz.hpp"
#include "rdmacxx/gid.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rx = rdmacxx;

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::string_view const text{reinterpret_cast<char const*>(data), size};
    rx::gid got;
    bool const ok = rx::gid::try_parse(text, got);
    try {
        rx::gid const parsed = rx::gid::parse(text);
        FUZZ_CHECK(ok && parsed == got);
    } catch (rx::argument_error const& e) {
        FUZZ_CHECK(!ok);
        FUZZ_CHECK(std::string_view{e.what()}.find("cannot parse GID") == 0);
    }
    if (ok) {
        FUZZ_CHECK(text.find('\0') == std::string_view::npos);
        std::string const canonical = got.to_string();
        FUZZ_CHECK(rx::gid::parse(canonical) == got);                   // parse(format(x)) == x
        FUZZ_CHECK(rx::gid::parse(canonical).to_string() == canonical); // the format is a fixed point
    }
    if (size >= 16) {
        std::array<std::uint8_t, 16> bytes{};
        std::memcpy(bytes.data(), data, 16);
        rx::gid const any{bytes};
        FUZZ_CHECK(rx::gid::parse(any.to_string()) == any);
    }
    return 0;
}
