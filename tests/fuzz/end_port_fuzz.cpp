// libFuzzer target: end_port_description::parse and try_parse agree, refuse any text holding a
// NUL, and every description they accept, written back in its canonical form (name, name/port,
// GID text, GUID groups), parses to the same description.
#include "fuzz.hpp"
#include "rdmacxx/end_port.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rx = rdmacxx;
using form = rx::end_port_description::form;

namespace {
std::string canonical(rx::end_port_description const& d) {
    switch (d.kind()) {
    case form::any:
        return {};
    case form::device:
        return d.device_name();
    case form::device_port:
        return d.device_name() + "/" + std::to_string(d.port_num());
    case form::gid:
        return d.gid().to_string();
    case form::guid:
        return d.guid().to_string();
    }
    return {};
}

bool same(rx::end_port_description const& a, rx::end_port_description const& b) {
    return a.kind() == b.kind() && a.device_name() == b.device_name() && a.port_num() == b.port_num() &&
           a.gid() == b.gid() && a.guid() == b.guid();
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    std::string_view const text{reinterpret_cast<char const*>(data), size};
    rx::end_port_description got;
    bool const ok = rx::end_port_description::try_parse(text, got);
    try {
        auto const parsed = rx::end_port_description::parse(text);
        FUZZ_CHECK(ok && same(parsed, got));
        FUZZ_CHECK(parsed.text() == text);
    } catch (rx::argument_error const& e) {
        FUZZ_CHECK(!ok);
        FUZZ_CHECK(std::string_view{e.what()}.find("invalid end port description") == 0);
    }
    if (ok) {
        FUZZ_CHECK(text.find('\0') == std::string_view::npos);
        FUZZ_CHECK(got.kind() != form::device_port || (got.port_num() >= 1));
        FUZZ_CHECK(got.device_name().size() <= 63);
        auto const again = rx::end_port_description::parse(canonical(got)); // parse(format(x)) == x
        FUZZ_CHECK(same(again, got));
    }
    return 0;
}
