#pragma once
/// @file
/// `mad::packet`: one 256-byte MAD as it goes on the wire, with its common header, the SA's
/// RMPP and SA headers, and its attribute read and written through the typed layouts of
/// rdmacxx/mad/attributes.hpp; and `mad::print_packet`, the field-by-field and hex dump that
/// `mad_error` prints at level 2.

#include "rdmacxx/mad/attributes.hpp"
#include "rdmacxx/mad/fields.hpp"
#include "rdmacxx/mad/types.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

namespace rdmacxx {
inline namespace v0 {
namespace mad {

/// Where a class's attribute data starts in a MAD, in bytes: 56 for the SA (after the RMPP and
/// SA headers), 64 for PerfMgt (after 40 reserved bytes), 40 for a vendor class of range 2
/// (after the RMPP header, a reserved byte and the OUI), 24 (right after the common header) for
/// any other class.
[[nodiscard]] constexpr std::size_t data_offset(std::uint8_t c) noexcept {
    if (c == mgmt_class::subn_adm) return 56;
    if (c == mgmt_class::perf_mgt) return 64;
    if (is_vendor_oui_class(c)) return 40;
    return mad_header::size;
}

/// One MAD: `mad_size` (256) bytes, zeroed on construction, in wire order. A value type; the
/// typed accessors decode and encode in place.
/// Thread-safety: a value; no sharing.
class packet {
public:
    /// A MAD of zero bytes.
    constexpr packet() noexcept = default;

    /// A copy of `bytes` (up to 256 bytes; the rest is zero).
    /// @throws argument_error when `bytes` holds more than 256 bytes.
    explicit packet(std::span<std::byte const> bytes) {
        if (bytes.size() > mad_size)
            throw argument_error("a MAD holds " + std::to_string(mad_size) + " bytes, not " +
                                 std::to_string(bytes.size()));
        for (std::size_t i = 0; i < bytes.size(); ++i)
            bytes_[i] = bytes[i];
    }

    /// The 256 bytes.
    [[nodiscard]] std::span<std::byte const, mad_size> bytes() const noexcept { return bytes_; }
    /// The 256 bytes, writable.
    [[nodiscard]] std::span<std::byte, mad_size> bytes() noexcept { return bytes_; }

    /// The common MAD header (bytes 0 … 23).
    [[nodiscard]] mad_header header() const { return decode<mad_header>(bytes_); }
    /// Writes the common MAD header.
    /// @throws argument_error when a field does not fit its width.
    void set_header(mad_header const& h) { encode(h, std::span<std::byte>{bytes_}); }

    /// The RMPP header (bytes 24 … 35) of an SA or vendor-OUI MAD.
    [[nodiscard]] rmpp_header rmpp() const { return decode<rmpp_header>(std::span{bytes_}.subspan(24)); }
    /// The SA header (bytes 36 … 55) of an SA MAD.
    [[nodiscard]] mad::sa_header sa_header() const { return decode<mad::sa_header>(std::span{bytes_}.subspan(36)); }
    /// Writes the SA header (bytes 36 … 55).
    /// @throws argument_error when a field does not fit its width.
    void set_sa_header(mad::sa_header const& h) { encode(h, std::span{bytes_}.subspan(36)); }

    /// The vendor OUI (bytes 37 … 39) of a vendor MAD of range 2.
    [[nodiscard]] std::uint32_t oui() const noexcept {
        return static_cast<std::uint32_t>(detail::get_bits(bytes_, oui_bit_offset, 24));
    }
    /// Writes the vendor OUI (bytes 37 … 39).
    void set_oui(std::uint32_t oui) {
        if (oui > 0xffffffU) throw argument_error("an OUI has 24 bits, not 0x" + rdmacxx::detail::hex(oui));
        detail::put_bits(bytes_, oui_bit_offset, 24, oui);
    }

    /// The attribute data of this MAD's class (from `data_offset(MgmtClass)` to the end).
    [[nodiscard]] std::span<std::byte const> data() const noexcept {
        return std::span{bytes_}.subspan(data_offset(static_cast<std::uint8_t>(bytes_[1])));
    }
    /// The attribute data of this MAD's class, writable (set the header's MgmtClass first).
    [[nodiscard]] std::span<std::byte> data() noexcept {
        return std::span{bytes_}.subspan(data_offset(static_cast<std::uint8_t>(bytes_[1])));
    }

    /// The attribute at the start of `data()`, decoded as `A`.
    /// @throws argument_error when `A` does not fit in the class's data.
    template <wire_layout A>
    [[nodiscard]] A attribute() const {
        return decode<A>(data());
    }
    /// Writes `a` at the start of `data()`.
    /// @throws argument_error when `A` does not fit in the class's data or a field its width.
    template <wire_layout A>
    void set_attribute(A const& a) {
        encode(a, data());
    }

    /// Byte-wise equality.
    friend bool operator==(packet const&, packet const&) = default;

private:
    static constexpr std::size_t oui_bit_offset = std::size_t{37} * 8; // bytes 37 … 39

    std::array<std::byte, mad_size> bytes_{};
};

/// "MAD_METHOD_GET(1) SubnAdm(3.2) SAPathRecord(53)": a MAD's method, class and version, and
/// attribute, as python-rdma names an RPC in its messages.
[[nodiscard]] inline std::string describe(mad_header const& h) {
    return method_name(h.method) + " " + class_name(h.mgmt_class) + "(" + std::to_string(h.mgmt_class) + "." +
           std::to_string(h.class_version) + ") " + attribute_name(h.mgmt_class, h.attribute_id) + "(" +
           std::to_string(h.attribute_id) + ")";
}

/// Prints `p` for a person, each line after `lead`: the common header field by field (with the
/// Status explained when it is not 0), the RMPP and SA headers of an SA MAD, the attribute when
/// this library knows it (ClassPortInfo; PathRecord of the SA; PortCounters of PerfMgt), then
/// the first `length` bytes (256 by default) in hex, 16 to a line (`print_hex`).
/// Thread-safety: reentrant.
inline void print_packet(std::ostream& os, packet const& p, std::string_view lead = {}, std::size_t length = mad_size) {
    std::string const inner = std::string{lead} + "  ";
    mad_header const h = p.header();
    os << lead << mad_header::name << " " << describe(h) << '\n';
    print(os, h, inner);
    if (h.status != 0) os << inner << "(Status: " << status_text(h.status) << ")\n";
    if (h.mgmt_class == mgmt_class::subn_adm) {
        os << lead << rmpp_header::name << '\n';
        print(os, p.rmpp(), inner);
        os << lead << sa_header::name << '\n';
        print(os, p.sa_header(), inner);
    }
    auto attr = [&]<class A>(A const&) {
        os << lead << A::name << '\n';
        print(os, p.attribute<A>(), inner);
    };
    if (h.attribute_id == attribute_id::class_port_info)
        attr(class_port_info{});
    else if (h.mgmt_class == mgmt_class::subn_adm && h.attribute_id == attribute_id::path_record)
        attr(path_record{});
    else if (h.mgmt_class == mgmt_class::perf_mgt && h.attribute_id == attribute_id::port_counters)
        attr(port_counters{});
    os << lead << "bytes (" << (length < mad_size ? length : mad_size) << ")\n";
    print_hex(os, p.bytes().first(length < mad_size ? length : mad_size), inner);
}

} // namespace mad
} // namespace v0
} // namespace rdmacxx
