// Thread domains, parent domains, DMA-BUF and on-demand-paging registration on a real device.
// rxe (kernel 6.1) has none of them: on rxe every test asserts the typed refusal, naming the verb
// and the device, so the code paths run; on a device that has them they are used for real.

#include "fixture.hpp"

#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <linux/udmabuf.h>
#include <string>
#include <string_view>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <system_error>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace {

namespace rx = rdmacxx;

bool is_rxe(rx::context const& ctx) { return std::string_view{ctx.name()}.starts_with("rxe"); }

bool contains(char const* text, std::string_view part) {
    return std::string_view{text}.find(part) != std::string_view::npos;
}

// An owned file descriptor.
struct fd_guard {
    int fd = -1;
    explicit fd_guard(int f) : fd(f) {}
    fd_guard(fd_guard const&) = delete;
    fd_guard& operator=(fd_guard const&) = delete;
    ~fd_guard() {
        if (fd >= 0) (void)::close(fd);
    }
};

// The DRM ioctls a vgem dma-buf needs (<drm/drm.h>, <drm/drm_mode.h>; libdrm's headers are not
// installed here, the kernel ABI is stable).
struct drm_version_arg {
    int major, minor, patchlevel;
    std::size_t name_len;
    char* name;
    std::size_t date_len;
    char* date;
    std::size_t desc_len;
    char* desc;
};
struct drm_create_dumb_arg {
    std::uint32_t height, width, bpp, flags, handle, pitch;
    std::uint64_t size;
};
struct drm_prime_handle_arg {
    std::uint32_t handle, flags;
    std::int32_t fd;
};
constexpr unsigned long drm_iowr(unsigned nr, std::size_t size) {
    return (3UL << 30) | (static_cast<unsigned long>(size) << 16) | ('d' << 8) | nr;
}
constexpr unsigned long drm_ioctl_version = drm_iowr(0x00, sizeof(drm_version_arg));
constexpr unsigned long drm_ioctl_prime_handle_to_fd = drm_iowr(0x2d, sizeof(drm_prime_handle_arg));
constexpr unsigned long drm_ioctl_mode_create_dumb = drm_iowr(0xb2, sizeof(drm_create_dumb_arg));

// A dma-buf of `bytes` bytes from udmabuf (a sealed memfd turned into a dma-buf), or, on a kernel
// built without udmabuf (Debian's 6.1), from vgem (a software DRM device whose buffers export as
// dma-bufs). `how` says which; a host with neither fails the test.
int make_dmabuf(std::size_t bytes, std::string& how) {
    if (int const dev = ::open("/dev/udmabuf", O_RDWR | O_CLOEXEC); dev >= 0) {
        fd_guard const d{dev};
        int const mem = ::memfd_create("rdmacxx-dmabuf", MFD_ALLOW_SEALING | MFD_CLOEXEC);
        REQUIRE_MESSAGE(mem >= 0, "memfd_create: " << std::string{std::strerror(errno)});
        fd_guard const m{mem};
        REQUIRE(::ftruncate(mem, static_cast<off_t>(bytes)) == 0);
        REQUIRE(::fcntl(mem, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
        udmabuf_create create{};
        create.memfd = static_cast<std::uint32_t>(mem);
        create.flags = UDMABUF_FLAGS_CLOEXEC;
        create.offset = 0;
        create.size = bytes;
        int const buf = ::ioctl(dev, UDMABUF_CREATE, &create);
        REQUIRE_MESSAGE(buf >= 0, "ioctl UDMABUF_CREATE: " << std::string{std::strerror(errno)});
        how = "udmabuf";
        return buf;
    }
    for (int card = 0; card < 8; ++card) {
        std::string const path = "/dev/dri/card" + std::to_string(card);
        int const dev = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (dev < 0) continue;
        fd_guard const d{dev};
        char name[16] = {};
        drm_version_arg version{};
        version.name = name;
        version.name_len = sizeof name - 1;
        if (::ioctl(dev, drm_ioctl_version, &version) != 0 || std::string_view{name} != "vgem") continue;
        drm_create_dumb_arg dumb{};
        dumb.height = 1;
        dumb.width = static_cast<std::uint32_t>(bytes / 4);
        dumb.bpp = 32;
        REQUIRE_MESSAGE(::ioctl(dev, drm_ioctl_mode_create_dumb, &dumb) == 0,
                        "vgem DRM_IOCTL_MODE_CREATE_DUMB: " << std::string{std::strerror(errno)});
        REQUIRE(dumb.size >= bytes);
        drm_prime_handle_arg prime{};
        prime.handle = dumb.handle;
        prime.flags = O_CLOEXEC | O_RDWR;
        prime.fd = -1;
        REQUIRE_MESSAGE(::ioctl(dev, drm_ioctl_prime_handle_to_fd, &prime) == 0,
                        "vgem DRM_IOCTL_PRIME_HANDLE_TO_FD: " << std::string{std::strerror(errno)});
        REQUIRE(prime.fd >= 0);
        how = "vgem " + path;
        return prime.fd; // the dma-buf holds the buffer after the device file closes
    }
    FAIL("no dma-buf exporter: neither /dev/udmabuf nor a vgem /dev/dri/card*: load udmabuf or vgem (tools/softroce "
         "loads vgem)");
    return -1;
}

} // namespace

TEST_CASE("thread_domain: allocated, or refused by rxe with not_supported_error naming ibv_alloc_td and the device") {
    rx::context ctx = test::open_test_device();
    std::string const dev{ctx.name()};
    if (is_rxe(ctx)) {
        try {
            rx::thread_domain const td{ctx};
            FAIL("rxe allocated a thread domain");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_alloc_td");
            CHECK(contains(e.what(), dev));
            CHECK(e.errno_value() == EOPNOTSUPP);
        }
        return;
    }
    rx::thread_domain const td{ctx};
    CHECK(td.native_handle() != nullptr);
}

TEST_CASE("parent_domain: a protection_domain QPs and MRs are made in, or refused by rxe naming "
          "ibv_alloc_parent_domain and the device") {
    rx::context ctx = test::open_test_device();
    std::string const dev{ctx.name()};
    rx::protection_domain pd{ctx};
    if (is_rxe(ctx)) {
        try {
            rx::parent_domain const parent{pd};
            FAIL("rxe allocated a parent domain");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_alloc_parent_domain");
            CHECK(contains(e.what(), dev));
            CHECK(e.errno_value() == EOPNOTSUPP);
        }
        // The program goes on in the protection domain itself.
        test::buffer const buf{pd, 4096};
        CHECK(buf.mr.lkey() != 0);
        return;
    }
    rx::thread_domain td{ctx};
    rx::parent_domain parent{pd, td};
    CHECK(&parent.pd() == &pd);
    CHECK(parent.td() == &td);
    rx::protection_domain& as_pd = parent; // made in exactly as in any domain
    test::buffer const buf{as_pd, 4096};
    rx::completion_queue<rx::busy_poll> cq{ctx, 16};
    rx::queue_pair<rx::rc, rx::busy_poll> const qp{as_pd, cq, cq, {}};
    CHECK(qp.native_handle()->pd == parent.native_handle());
}

TEST_CASE("completion_queue_ex in a parent domain: made single-threaded where the device has parent domains; on rxe "
          "the thread domain and parent domain it needs are refused naming the verb and the device, and rxe's "
          "ibv_create_cq_ex ignores IBV_CQ_INIT_ATTR_MASK_PD") {
    rx::context ctx = test::open_test_device();
    std::string const dev{ctx.name()};
    rx::protection_domain pd{ctx};
    // A plain protection domain is not a place for a CQ: that does not compile
    // (tests/compile_fail/cq_ex_in_protection_domain.cpp); a parent domain is.
    static_assert(std::is_constructible_v<rx::completion_queue_ex<rx::busy_poll>, rx::parent_domain const&, int>);
    if (is_rxe(ctx)) {
        std::string const refused = " (" + std::system_category().message(EOPNOTSUPP) + ")";
        // The program's path to a lock-free CQ: a thread domain, a parent domain with it, the CQ
        // in the parent domain. rxe refuses the first step ...
        try {
            rx::thread_domain td{ctx};
            rx::parent_domain const parent{pd, td};
            rx::completion_queue_ex<rx::busy_poll> const cq{parent, 16};
            FAIL("rxe made a CQ in a parent domain with a thread domain");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_alloc_td");
            CHECK(e.errno_value() == EOPNOTSUPP);
            CHECK(std::string{e.what()} == "ibv_alloc_td failed on " + dev + ": allocating a thread domain" + refused);
        }
        // ... and a parent domain without one, so no parent_domain exists for a CQ to be made in.
        try {
            rx::parent_domain const parent{pd};
            rx::completion_queue_ex<rx::busy_poll> const cq{parent, 16};
            FAIL("rxe made a CQ in a parent domain");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_alloc_parent_domain");
            CHECK(e.errno_value() == EOPNOTSUPP);
            CHECK(std::string{e.what()} == "ibv_alloc_parent_domain failed on " + dev +
                                               ": allocating a parent domain without a thread domain" + refused);
        }
        // What rxe does with the attributes such a CQ is created with, given the plain PD that
        // the type rules out: rdma-core 44 lets IBV_CQ_INIT_ATTR_MASK_PD through
        // (ibv_cmd_create_cq_ex), rxe never reads parent_domain, and the kernel is not told. An
        // ordinary CQ comes back: on rxe nothing but the type would catch a plain PD.
        ibv_cq_init_attr_ex attr = rx::detail::cq_ex_init_attributes(16, 0, true, pd.native_handle());
        CHECK(attr.comp_mask == static_cast<std::uint32_t>(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD));
        CHECK(attr.flags == static_cast<std::uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED));
        CHECK(attr.parent_domain == pd.native_handle());
        errno = 0;
        ibv_cq_ex* const raw = ::ibv_create_cq_ex(ctx.native_handle(), &attr);
        REQUIRE_MESSAGE(raw != nullptr,
                        "rxe refused IBV_CQ_INIT_ATTR_MASK_PD with a plain PD: " << std::string{std::strerror(errno)});
        ibv_wc wc{};
        CHECK(::ibv_poll_cq(::ibv_cq_ex_to_cq(raw), 1, &wc) == 0);
        CHECK(::ibv_destroy_cq(::ibv_cq_ex_to_cq(raw)) == 0);
        return;
    }
    // A device with thread and parent domains: the CQ is made in the parent domain (single-threaded:
    // the thread domain implies it), QPs in the same domain complete on it, and it is polled.
    rx::thread_domain td{ctx};
    rx::parent_domain parent{pd, td};
    rx::completion_queue_ex<rx::busy_poll, rx::standard_wc_fields> cq{parent, 16};
    rx::end_port port{ctx};
    rx::queue_pair<rx::rc, rx::busy_poll> a{parent, cq, cq, {}}, b{parent, cq, cq, {}};
    a.connect(port, b.local_endpoint(port), {.remote_access = rx::all_remote});
    b.connect(port, a.local_endpoint(port), {.remote_access = rx::all_remote});
    test::buffer src{parent, 64}, dst{parent, 64};
    a.post(rx::write{src.span().first(8), dst.mr.remote().first(8)}.id(7));
    std::uint64_t wr_id = 0;
    REQUIRE(cq.wait<1>(
                [&](auto const& c) {
                    c.throw_if_error();
                    wr_id = c.wr_id();
                },
                std::chrono::seconds{10}) == 1);
    CHECK(wr_id == 7);
    CHECK(a.native_handle()->send_cq == cq.native_handle());
}

TEST_CASE("register_dmabuf: a real dma-buf is registered, or refused by rxe with not_supported_error naming "
          "ibv_reg_dmabuf_mr and the device; supports_dmabuf() agrees") {
    rx::context ctx = test::open_test_device();
    std::string const dev{ctx.name()};
    rx::protection_domain pd{ctx};
    constexpr std::size_t bytes = 64 * 1024;
    std::string how;
    fd_guard const buf{make_dmabuf(bytes, how)};
    MESSAGE("dma-buf fd " << buf.fd << " from " << how);

    // Bad input never reaches the device.
    CHECK_THROWS_AS((void)pd.register_dmabuf(-1, 0, bytes, 0, rx::access::local_write), rx::argument_error);
    CHECK_THROWS_AS((void)pd.register_dmabuf(buf.fd, 0, 0, 0, rx::access::local_write), rx::argument_error);

    bool const supported = pd.supports_dmabuf();
    if (is_rxe(ctx)) {
        CHECK_FALSE(supported);
        try {
            rx::memory_region const mr = pd.register_dmabuf(buf.fd, 0, bytes, 0x10000, rx::access::local_write);
            FAIL("rxe registered a dma-buf");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_reg_dmabuf_mr");
            CHECK(contains(e.what(), dev));
            CHECK(e.errno_value() == EOPNOTSUPP);
        }
        return;
    }
    REQUIRE(supported);
    rx::memory_region const mr = pd.register_dmabuf(buf.fd, 0, bytes, 0x10000, rx::access::local_write);
    CHECK(mr.length() == bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(mr.address()) == 0x10000);
}

TEST_CASE("on-demand paging: the capability query, registration with access::on_demand and ibv_advise_mr; rxe "
          "refuses them with not_supported_error naming the verb and the device") {
    rx::context ctx = test::open_test_device();
    std::string const dev{ctx.name()};
    rx::protection_domain pd{ctx};
    std::vector<std::byte> memory(64 * 1024);
    test::buffer plain{pd, 4096};

    // Bad input never reaches the device.
    CHECK_THROWS_AS(plain.mr.advise(rx::prefetch::read, 0, 0), rx::argument_error);
    CHECK_THROWS_AS(plain.mr.advise(rx::prefetch::read, 4000, 97), rx::argument_error);

    bool const odp = pd.supports_on_demand_paging();
    if (is_rxe(ctx)) {
        CHECK_FALSE(odp);
        try {
            rx::memory_region const mr =
                pd.register_memory(std::span{memory}, rx::access::local_write | rx::access::on_demand);
            FAIL("rxe registered an on-demand paged region");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_reg_mr");
            CHECK(contains(e.what(), dev));
            CHECK(contains(e.what(), "on-demand paging"));
        }
        try {
            plain.mr.advise(rx::prefetch::write);
            FAIL("rxe accepted ibv_advise_mr");
        } catch (rx::not_supported_error const& e) {
            MESSAGE("rxe refused: " << std::string{e.what()});
            CHECK(e.verb() == "ibv_advise_mr");
            CHECK(contains(e.what(), dev));
        }
        return;
    }
    REQUIRE(odp);
    rx::memory_region mr = pd.register_memory(std::span{memory}, rx::access::local_write | rx::access::on_demand);
    mr.advise(rx::prefetch::write, rx::advise_flush::yes);
    CHECK(rx::has(mr.rights(), rx::access::on_demand));
}
