#pragma once
/// @file
/// `cm::address`: an IPv4, IPv6 or AF_IB socket address (host and port) for the RDMA CM.

#include "rdmacxx/cm/error.hpp"
#include "rdmacxx/detail/cm.hpp"
#include "rdmacxx/gid.hpp"

#include <arpa/inet.h>
#include <endian.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace rdmacxx {
inline namespace v0 {
namespace cm {

/// A socket address (IPv4 or IPv6, host and port) as the RDMA CM takes it. A plain value.
/// Thread-safety: a value; `resolve` calls getaddrinfo(3), which is thread-safe.
class address {
public:
    /// The unspecified address (family AF_UNSPEC, port 0).
    address() noexcept = default;

    /// Copies a `sockaddr` of `len` bytes (at most `sizeof(sockaddr_storage)`).
    address(sockaddr const* sa, socklen_t len) noexcept {
        if (sa != nullptr && len <= sizeof storage_) std::memcpy(&storage_, sa, len);
    }

    /// The address of `host` (a numeric IPv4/IPv6 address or a name) at `port` (host order).
    /// All of `host` is read: an embedded NUL character is refused, not taken for its end.
    /// @throws argument_error, before getaddrinfo(3) is called, when `host` holds a NUL
    ///         character; address_error (synchronous, status -EADDRNOTAVAIL) when getaddrinfo(3)
    ///         cannot resolve it, with getaddrinfo's message.
    [[nodiscard]] static address resolve(std::string const& host, std::uint16_t port) {
        if (auto const nul = host.find('\0'); nul != std::string::npos)
            rdmacxx::detail::throw_argument("cannot resolve host " + rdmacxx::detail::quoted(host) +
                                            ": it holds a NUL character at offset " + std::to_string(nul));
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        std::string const service = std::to_string(port);
        if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0 || res == nullptr)
            throw address_error(std::nullopt, -EADDRNOTAVAIL, "resolving host \"" + host + "\": " + ::gai_strerror(rc));
        address a{res->ai_addr, res->ai_addrlen};
        ::freeaddrinfo(res);
        return a;
    }

    /// The IPv4 wildcard address 0.0.0.0 at `port` (host order), for a listener on every device.
    [[nodiscard]] static address any_ipv4(std::uint16_t port) noexcept {
        address a;
        auto& sin = a.as<sockaddr_in>();
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        sin.sin_addr.s_addr = htonl(INADDR_ANY);
        return a;
    }

    /// An AF_IB address (`sockaddr_ib`): port GID `g`, P_Key `pkey`, and `port` (host order) in
    /// the RDMA CM's TCP service-ID range (service ID 0x10600 + port), as rdma_cm(7) describes.
    /// AF_IB needs an InfiniBand port: on RoCE (e.g. rxe) `cm::id::bind` and `resolve_address`
    /// refuse it with `not_supported_error`.
    [[nodiscard]] static address ib(gid const& g, std::uint16_t port, std::uint16_t pkey = 0xffff) noexcept {
        address a;
        auto& sib = a.as<sockaddr_ib>();
        sib.sib_family = AF_IB;
        sib.sib_pkey = htons(pkey);
        auto const raw = g.native();
        std::memcpy(&sib.sib_addr, raw.raw, sizeof raw.raw);
        sib.sib_sid = htobe64(RDMA_IB_IP_PS_TCP | port);
        sib.sib_sid_mask = htobe64(RDMA_IB_IP_PS_MASK | 0xffff);
        return a;
    }

    /// AF_INET, AF_INET6, AF_IB or AF_UNSPEC.
    [[nodiscard]] int family() const noexcept { return storage_.ss_family; }
    /// The port, host order (0 for AF_UNSPEC).
    [[nodiscard]] std::uint16_t port() const noexcept {
        if (family() == AF_INET) return ntohs(as<sockaddr_in>().sin_port);
        if (family() == AF_INET6) return ntohs(as<sockaddr_in6>().sin6_port);
        if (family() == AF_IB) return static_cast<std::uint16_t>(be64toh(as<sockaddr_ib>().sib_sid) & 0xffff);
        return 0;
    }
    /// The same host at another `port` (host order).
    [[nodiscard]] address with_port(std::uint16_t port_number) const noexcept {
        address a = *this;
        if (family() == AF_INET) a.as<sockaddr_in>().sin_port = htons(port_number);
        if (family() == AF_INET6) a.as<sockaddr_in6>().sin6_port = htons(port_number);
        return a;
    }
    /// True for an IPv4 multicast (224.0.0.0/4) or IPv6 multicast (ff00::/8) host.
    [[nodiscard]] bool is_multicast() const noexcept {
        if (family() == AF_INET) return (ntohl(as<sockaddr_in>().sin_addr.s_addr) >> 28) == 0xe;
        if (family() == AF_INET6) return as<sockaddr_in6>().sin6_addr.s6_addr[0] == 0xff;
        return false;
    }
    /// "198.18.0.1:7471", "[fe80::1]:7471", or "unspecified".
    [[nodiscard]] std::string to_string() const {
        char buf[INET6_ADDRSTRLEN] = {};
        if (family() == AF_INET) {
            ::inet_ntop(AF_INET, &as<sockaddr_in>().sin_addr, buf, sizeof buf);
            return std::string{buf} + ':' + std::to_string(port());
        }
        if (family() == AF_INET6) {
            ::inet_ntop(AF_INET6, &as<sockaddr_in6>().sin6_addr, buf, sizeof buf);
            return '[' + std::string{buf} + "]:" + std::to_string(port());
        }
        if (family() == AF_IB) {
            ::inet_ntop(AF_INET6, &as<sockaddr_ib>().sib_addr, buf, sizeof buf);
            return "AF_IB [" + std::string{buf} + "]:" + std::to_string(port());
        }
        return family() == AF_UNSPEC ? "unspecified" : "address of family " + std::to_string(family());
    }

    /// The socket address, for the C calls.
    [[nodiscard]] sockaddr* native() noexcept { return reinterpret_cast<sockaddr*>(&storage_); }
    /// The socket address, for the C calls.
    [[nodiscard]] sockaddr const* native() const noexcept { return reinterpret_cast<sockaddr const*>(&storage_); }

private:
    template <class T>
    T& as() noexcept {
        return *reinterpret_cast<T*>(&storage_);
    }
    template <class T>
    T const& as() const noexcept {
        return *reinterpret_cast<T const*>(&storage_);
    }

    sockaddr_storage storage_{};
};

} // namespace cm
} // namespace v0
} // namespace rdmacxx
