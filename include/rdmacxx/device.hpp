#pragma once
/// @file
/// Device discovery: `device_list` and `device` (name, GUID, index, node and transport type,
/// open), after the Rust `ibverbs` crate's `Device` and python-rdma's `get_devices`.

#include "rdmacxx/error.hpp"
#include "rdmacxx/gid.hpp"

#include <cerrno>
#include <cstddef>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>

namespace rdmacxx {
inline namespace v0 {

class context;

/// One RDMA device of the host: a non-owning view of an `ibv_device`, valid while the
/// `device_list` it came from lives. Opening it gives a `context` that outlives the list.
/// Thread-safety: the queries only read; safe from several threads.
class device {
public:
    /// Wraps a device handle from ibv_get_device_list(3).
    explicit device(ibv_device* handle) noexcept : handle_(handle) {}

    /// The kernel name, e.g. "mlx5_0" or "rxe0". @see ibv_get_device_name(3)
    [[nodiscard]] std::string_view name() const noexcept { return ::ibv_get_device_name(handle_); }

    /// The node GUID. @see ibv_get_device_guid(3)
    [[nodiscard]] rdmacxx::guid guid() const noexcept { return guid::from_network(::ibv_get_device_guid(handle_)); }

    /// The kernel's stable index of the device (it survives renames), as the Rust `ibverbs`
    /// crate's `Device::index` gives it.
    /// @throws sys_error with ENOTSUP (std::errc::not_supported) saying that the kernel or
    ///         libibverbs does not report device indices, when ibv_get_device_index(3) fails.
    /// @see ibv_get_device_index(3)
    [[nodiscard]] int index() const {
        int const idx = ::ibv_get_device_index(handle_);
        if (idx < 0) [[unlikely]]
            detail::throw_sys(ENOTSUP, "ibv_get_device_index",
                              "for device " + std::string{name()} +
                                  ": this kernel or libibverbs does not report stable device indices");
        return idx;
    }

    /// The node type (CA, switch, router, RNIC, …).
    [[nodiscard]] ibv_node_type node_type() const noexcept { return handle_->node_type; }
    /// The transport type (InfiniBand, iWARP, …); RoCE devices, rxe among them, report InfiniBand.
    [[nodiscard]] ibv_transport_type transport_type() const noexcept { return handle_->transport_type; }
    /// The node type as text, as ibv_node_type_str(3) gives it: "InfiniBand channel adapter",
    /// "InfiniBand switch", "InfiniBand router", "iWARP NIC", … @see ibv_node_type_str(3)
    [[nodiscard]] std::string_view node_type_name() const noexcept { return ::ibv_node_type_str(node_type()); }
    /// The transport type as text: "InfiniBand", "iWARP", "usNIC", "usNIC UDP", "unspecified".
    [[nodiscard]] std::string_view transport_type_name() const noexcept {
        switch (transport_type()) {
        case IBV_TRANSPORT_IB:
            return "InfiniBand";
        case IBV_TRANSPORT_IWARP:
            return "iWARP";
        case IBV_TRANSPORT_USNIC:
            return "usNIC";
        case IBV_TRANSPORT_USNIC_UDP:
            return "usNIC UDP";
        case IBV_TRANSPORT_UNSPECIFIED:
            return "unspecified";
        case IBV_TRANSPORT_UNKNOWN:
            break;
        }
        return "unknown";
    }

    /// Opens the device. Defined in context.hpp (include it, or rdmacxx/verbs.hpp, to call it):
    /// the context sits above the device it opens.
    /// @throws sys_error naming the device when ibv_open_device(3) fails.
    [[nodiscard]] context open() const;

    /// The verbs handle.
    [[nodiscard]] ibv_device* native_handle() const noexcept { return handle_; }

private:
    ibv_device* handle_;
};

/// The host's RDMA devices, as ibv_get_device_list(3) reports them. A host with no RDMA stack at
/// all (ENOSYS) gives an empty list, not an error. Move-only; frees the list on destruction.
/// Contexts opened from its devices outlive it.
/// Thread-safety: a const list may be read from several threads.
class device_list {
public:
    /// Reads the device list.
    /// @throws sys_error when ibv_get_device_list(3) fails for a reason other than ENOSYS
    ///         (no RDMA subsystem), e.g. EPERM or ENOMEM.
    device_list() {
        int count = 0;
        errno = 0;
        list_.reset(::ibv_get_device_list(&count));
        if (!list_) {
            if (errno == ENOSYS) return; // no RDMA stack on this host: no devices
            detail::throw_errno("ibv_get_device_list", "while listing RDMA devices");
        }
        size_ = static_cast<std::size_t>(count);
    }

    /// Random-access iterator yielding `device` values.
    class iterator {
    public:
        using iterator_category = std::random_access_iterator_tag;
        using value_type = device;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = device;
        iterator() noexcept = default;
        explicit iterator(ibv_device** at) noexcept : at_(at) {}
        device operator*() const noexcept { return device{*at_}; }
        device operator[](difference_type n) const noexcept { return device{at_[n]}; }
        iterator& operator++() noexcept {
            ++at_;
            return *this;
        }
        iterator operator++(int) noexcept {
            auto t = *this;
            ++at_;
            return t;
        }
        iterator& operator--() noexcept {
            --at_;
            return *this;
        }
        iterator operator--(int) noexcept {
            auto t = *this;
            --at_;
            return t;
        }
        iterator& operator+=(difference_type n) noexcept {
            at_ += n;
            return *this;
        }
        iterator& operator-=(difference_type n) noexcept {
            at_ -= n;
            return *this;
        }
        friend iterator operator+(iterator i, difference_type n) noexcept { return i += n; }
        friend iterator operator+(difference_type n, iterator i) noexcept { return i += n; }
        friend iterator operator-(iterator i, difference_type n) noexcept { return i -= n; }
        friend difference_type operator-(iterator a, iterator b) noexcept { return a.at_ - b.at_; }
        friend bool operator==(iterator, iterator) noexcept = default;
        friend auto operator<=>(iterator, iterator) noexcept = default;

    private:
        ibv_device** at_ = nullptr;
    };

    [[nodiscard]] iterator begin() const noexcept { return iterator{list_.get()}; }
    [[nodiscard]] iterator end() const noexcept { return iterator{list_.get() + size_}; }
    /// Number of devices.
    [[nodiscard]] std::size_t size() const noexcept { return size_; }
    /// True when the host has no RDMA device.
    [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
    /// The device at position `i` (0 ≤ i < size(); unchecked).
    [[nodiscard]] device operator[](std::size_t i) const noexcept { return device{list_.get()[i]}; }

    /// The device called `name`.
    /// @throws argument_error naming it and listing the devices that exist.
    [[nodiscard]] device find(std::string_view name) const {
        for (device d : *this)
            if (d.name() == name) return d;
        detail::throw_argument("no RDMA device named \"" + std::string{name} + "\" (" + describe() + ")");
    }

    /// The device whose node GUID is `g`.
    /// @throws argument_error naming it and listing the devices that exist.
    [[nodiscard]] device find(guid g) const {
        for (device d : *this)
            if (d.guid() == g) return d;
        detail::throw_argument("no RDMA device with node GUID " + g.to_string() + " (" + describe() + ")");
    }

    /// "devices: a, b" or "this host has no RDMA device", for error messages.
    [[nodiscard]] std::string describe() const {
        if (empty()) return "this host has no RDMA device";
        std::string s = "devices:";
        for (device d : *this) {
            s += ' ';
            s += d.name();
        }
        return s;
    }

private:
    struct deleter {
        void operator()(ibv_device** l) const noexcept { ::ibv_free_device_list(l); }
    };
    std::unique_ptr<ibv_device*[], deleter> list_;
    std::size_t size_ = 0;
};

} // namespace v0
} // namespace rdmacxx
